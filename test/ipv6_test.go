//go:build netns

package test

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestOverlayLeonJapanIPv6: leon-japan with the agents on an IPv6
// underlay (--underlay-ipv6): the same paths (Fujisawa<->Seoul via Inagi)
// and the same host RTT (21 ms ± 1) as over IPv4 (TestOverlayLeonJapan),
// and the agents know each other by their IPv6 addresses.
func TestOverlayLeonJapanIPv6(t *testing.T) {
	o := upOverlay(t, "leon-japan", "--overlay", "detour", "--underlay-ipv6")
	for _, c := range [][3]string{{"Fujisawa", "Seoul", "Inagi>Seoul"}, {"Seoul", "Fujisawa", "Inagi>Fujisawa"}} {
		d, err := o.waitPath(c[0], c[1], c[2], 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s -> %s via %s, %.2f s after up", c[0], c[1], c[2], d.Seconds())
	}
	const want = 21.0
	rtts := o.hostPingNear(t, "Fujisawa", "Seoul", 50, "0.05", want, 1)
	got := median(rtts)
	t.Logf("IPv6 underlay: host ping Fujisawa -> Seoul: %d replies, median RTT %.3f ms (p95 %.3f), want %.0f ± 1 ms", len(rtts), got, percentile(rtts, 95), want)
	if len(rtts) < 49 {
		t.Errorf("%d replies of 50", len(rtts))
	}
	if math.Abs(got-want) > 1 {
		t.Errorf("median host RTT %.3f ms, want %.0f ± 1 ms", got, want)
	}
	members := o.mustDetour(t, "Fujisawa", "status")
	if !strings.Contains(members, "fd18::c612:") {
		t.Errorf("Fujisawa's status shows no IPv6 member address:\n%s", members)
	}
	rs, err := o.routes(o.idx("Fujisawa"))
	if err != nil {
		t.Fatal(err)
	}
	r := rs["Seoul"]
	t.Logf("Fujisawa -> Seoul: path %v latency %.2f ms direct %.2f ms saving %.2f ms", r.Path, r.LatencyMs, r.DirectMs, r.SavingMs)
}
