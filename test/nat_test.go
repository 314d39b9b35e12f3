//go:build netns

package test

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"
)

// TestOverlayNATPair: nat-pair (scenarios/nat-pair.yaml): Osaka and
// Sendai each behind a NAT (nftables in the gateway: source port 4800
// translated to 40000, only flows the gateway started let in), Tokyo
// public, all under an overlay CA. Sendai's agent starts last, knowing
// only Tokyo's address; the NATed sites reach each other through Tokyo
// (logged when the poll catches it), then directly once their probes
// have punched both NATs, and the host RTT is the direct link's (10 ms). Tokyo sends to each NATed site at its NAT's mapping.
// Then Osaka's NAT takes a new mapping (a new source port, the old
// mappings flushed, as a NAT that restarts): Tokyo and Sendai follow
// Osaka to its new port within 1 s, and the hosts keep talking.
func TestOverlayNATPair(t *testing.T) {
	scen, err := filepath.Abs("../scenarios/nat-pair.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o := upOverlay(t, scen, "--overlay", "detour", "--ca", "--hold", "Sendai")
	osaka := o.idx("Osaka")
	t0 := time.Now()
	o.restartAgent(t, "Sendai")
	var paths []string
	var relayedAt, directAt time.Duration
	for time.Since(t0) < 20*time.Second {
		p := o.path(osaka, "Sendai")
		if p != "" && (len(paths) == 0 || paths[len(paths)-1] != p) {
			paths = append(paths, p)
		}
		if p == "Tokyo>Sendai" && relayedAt == 0 {
			relayedAt = time.Since(t0)
		}
		if p == "Sendai" && o.path(o.idx("Sendai"), "Osaka") == "Osaka" {
			directAt = time.Since(t0)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("Osaka -> Sendai after Sendai's agent started: paths %v; relayed at %.2f s, direct both ways at %.2f s", paths, relayedAt.Seconds(), directAt.Seconds())
	if p := o.path(osaka, "Sendai"); p != "Sendai" {
		t.Fatalf("Osaka's path to Sendai is %q 20 s after up, want the punched direct link", p)
	}
	st, err := o.status(o.idx("Tokyo"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		i := o.sc.SiteIndex(m.Name)
		if i < 0 || !o.sc.Sites[i].NAT {
			continue
		}
		want := fmt.Sprintf("%s:%d", o.st.Sites[i].Underlay, 40000)
		if m.Address != want || m.State != "alive" {
			t.Errorf("Tokyo sees %s %s at %s, want alive at its NAT's mapping %s", m.Name, m.State, m.Address, want)
		}
	}
	rtts := o.hostPingNear(t, "Osaka", "Sendai", 50, "0.05", 10, 1)
	got := median(rtts)
	t.Logf("host ping Osaka -> Sendai over the punched link: %d replies, median %.3f ms (p95 %.3f), want 10 ± 1 ms", len(rtts), got, percentile(rtts, 95))
	if len(rtts) < 49 || math.Abs(got-10) > 1 {
		t.Errorf("%d replies, median %.3f ms; want 50 and 10 ± 1 ms", len(rtts), got)
	}
	o.natRebind(t, "Osaka", 40001, "Tokyo", "Sendai")
}

// natRebind gives site's NAT a new mapping (port) and checks that each
// of the others lists site alive at the new mapping within 1 s, and that
// the hosts still reach each other.
func (o *overlay) natRebind(t *testing.T, site string, port int, others ...string) {
	t.Helper()
	want := fmt.Sprintf("%s:%d", o.st.Sites[o.idx(site)].Underlay, port)
	t0 := time.Now()
	if out, e, err := o.run("nat-rebind", site, "--port", fmt.Sprint(port)); err != nil {
		t.Fatalf("nat-rebind: %v: %s%s", err, out, e)
	}
	for _, s := range others {
		for {
			if addr, state := o.memberAt(t, s, site); addr == want && state == "alive" {
				break
			}
			if time.Since(t0) > 1*time.Second {
				addr, state := o.memberAt(t, s, site)
				t.Fatalf("%s sees %s %s at %s 1 s after its NAT's new mapping %s", s, site, state, addr, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("%s follows %s to its NAT's new mapping %s after %v", s, site, want, time.Since(t0).Round(time.Millisecond))
	}
	for _, s := range others {
		if _, err := pingRTTs(o.host(site).NS, o.host(s).Addr, 5, "0.1"); err != nil {
			t.Errorf("%s's host does not reach %s's after the new mapping: %v", site, s, err)
		}
	}
}

// memberAt is the address and state at which site lists member.
func (o *overlay) memberAt(t *testing.T, site, member string) (string, string) {
	t.Helper()
	st, err := o.status(o.idx(site))
	if err != nil {
		t.Fatalf("%s: status: %v", site, err)
	}
	for _, m := range st.Members {
		if m.Name == member {
			return m.Address, m.State
		}
	}
	return "", ""
}
