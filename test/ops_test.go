//go:build netns

package test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/runstate"
)

// The tests of running on real gateways (issue 19): durable run-time
// state, reload, storm protection.

const opsPrefix = "dtg-"

// restartAgent starts site's agent again (it was killed) and waits for its
// API.
func (o *overlay) restartAgent(t *testing.T, site string) {
	t.Helper()
	if _, e, err := o.run("restart-agent", site); err != nil {
		t.Fatalf("restart-agent %s: %v: %s", site, err, e)
	}
}

// change is one run-time change: a key (what it sets) and its value.
type change struct {
	key, value string
	args       []string
}

// randomChange draws a change of Fujisawa's run-time state: forbid or
// allow a relay, pin or unpin Seoul, attach or detach a network, or a
// rate limit.
func randomChange(r *rand.Rand) change {
	switch r.IntN(5) {
	case 0:
		s := []string{"Inagi", "Seoul"}[r.IntN(2)]
		if r.IntN(2) == 0 {
			return change{"forbid " + s, "yes", []string{"route", "forbid", s}}
		}
		return change{"forbid " + s, "", []string{"route", "allow", s}}
	case 1:
		if r.IntN(2) == 0 {
			return change{"pin Seoul", "Seoul", []string{"route", "pin", "Seoul"}}
		}
		return change{"pin Seoul", "", []string{"route", "unpin", "Seoul"}}
	case 2, 3:
		k := r.IntN(3)
		name := fmt.Sprintf("n%d", k)
		if r.IntN(2) == 0 {
			return change{"net " + name, "yes", []string{"net", "attach", name, "--id", fmt.Sprint(100 + k), "--tap", "dt-" + name}}
		}
		return change{"net " + name, "", []string{"net", "detach", name}}
	default:
		rate := fmt.Sprintf("%dmbit", 10+r.IntN(90))
		return change{"limit default", rate, []string{"net", "limit", "default", "--max-rate", rate}}
	}
}

// stateValues reads the keys of randomChange from a state document.
func stateValues(d *runstate.Doc) map[string]string {
	v := map[string]string{}
	for _, s := range d.Forbidden {
		v["forbid "+s] = "yes"
	}
	if p, ok := d.Pins["Seoul"]; ok {
		v["pin Seoul"] = strings.Join(p, ">")
	}
	for _, n := range d.Attached {
		v["net "+n.Name] = "yes"
	}
	if l, ok := d.Limits["default"]; ok && l.MaxRate > 0 {
		v["limit default"] = l.MaxRate.String()
	}
	return v
}

// TestStateSurvivesKill9: on leon-japan, a stream of run-time changes goes
// to Fujisawa's agent through its unix socket while the agent is killed
// with SIGKILL at 50 random moments. After each kill the state file
// parses and holds every acknowledged change (the change in flight at the
// kill may be there or not), and the restarted agent runs with the
// networks and limits it holds; at the end the pins and forbidden relays
// are back in force too.
func TestStateSurvivesKill9(t *testing.T) {
	o := withAgents(t, upWith(t, opsPrefix, "leon-japan", "--overlay", "detour"))
	stateFile := filepath.Join(o.dir, "detour", "fujisawa.state.json")
	r := rand.New(rand.NewPCG(19, 2))       // the changes, drawn by the stream
	moments := rand.New(rand.NewPCG(19, 3)) // the kills' moments
	acked := map[string]string{}            // key -> the last acknowledged value
	const kills = 50
	t0 := time.Now()
	total, refused := 0, 0
	for k := range kills {
		proc, err := o.agentPID("Fujisawa")
		if err != nil {
			t.Fatal(err)
		}
		pid := proc.PID
		var inflight *change
		done := make(chan struct{})
		stop := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := randomChange(r)
				inflight = &c
				_, err := o.detourIn("Fujisawa", c.args...)
				select {
				case <-stop: // the answer may have come after the kill
					if err == nil {
						acked[c.key] = c.value
						inflight = nil
					}
					return
				default:
				}
				total++
				if err == nil {
					acked[c.key] = c.value
				} else {
					refused++ // e.g. forbidding a site not yet rejoined
				}
				inflight = nil
			}
		}()
		time.Sleep(time.Duration(50+moments.IntN(400)) * time.Millisecond)
		// stop is closed first: a command that answers after it may
		// have been in flight at the kill.
		close(stop)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
		<-done

		b, err := os.ReadFile(stateFile)
		if err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		d, err := runstate.Decode(b)
		if err != nil {
			t.Fatalf("kill %d: the state file does not parse: %v\n%s", k, err, b)
		}
		got := stateValues(d)
		for key, want := range acked {
			if got[key] != want && (inflight == nil || inflight.key != key || got[key] != inflight.value) {
				t.Fatalf("kill %d: %s is %q in the state file, acknowledged %q (in flight: %+v)\n%s", k, key, got[key], want, inflight, b)
			}
		}
		for key := range got {
			if _, ok := acked[key]; !ok && (inflight == nil || inflight.key != key) {
				t.Fatalf("kill %d: %s in the state file was never asked\n%s", k, key, b)
			}
		}
		if inflight != nil { // learn what the file says about it
			acked[inflight.key] = got[inflight.key]
		}
		o.restartAgent(t, "Fujisawa")
		var nets []api.Network
		if err := o.api[o.idx("Fujisawa")].Get("/v1/networks", &nets); err != nil {
			t.Fatal(err)
		}
		for _, n := range nets {
			if strings.HasPrefix(n.Name, "n") && acked["net "+n.Name] != "yes" {
				t.Fatalf("kill %d: network %s runs after the restart but is not in the state", k, n.Name)
			}
			if n.Name == "default" && acked["limit default"] != "" && n.MaxRate != acked["limit default"] {
				t.Fatalf("kill %d: default's max_rate %q after the restart, state %q", k, n.MaxRate, acked["limit default"])
			}
		}
	}
	t.Logf("%d kills in %.1f s, %d changes sent, %d refused (sites not yet rejoined), %d keys set", kills, time.Since(t0).Seconds(), total, refused, len(acked))

	// The overrides of the state file return once their sites rejoin.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := o.status(o.idx("Fujisawa"))
		if err == nil {
			pinned := slices.ContainsFunc(s.Pins, func(p api.Pin) bool { return p.Dest == "Seoul" })
			ok := pinned == (acked["pin Seoul"] != "")
			for _, site := range []string{"Inagi", "Seoul"} {
				ok = ok && slices.Contains(s.Forbidden, site) == (acked["forbid "+site] == "yes")
			}
			if ok {
				t.Logf("pins %v and forbidden relays %v back in force", s.Pins, s.Forbidden)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pins %v, forbidden %v after the last restart; the state says %v", s.Pins, s.Forbidden, acked)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agentConfig is the path of site's agent configuration in the testbed.
func (o *overlay) agentConfig(site string) string {
	return filepath.Join(o.dir, "detour", strings.ToLower(site)+".yaml")
}

var pingLossRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`)

// startPing pings dst from namespace ns n times every interval in the
// background; the returned function waits and returns sent and received.
func startPing(t *testing.T, ns, dst string, n int, interval string) func() (int, int) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "ping", "-n", "-q", "-c", strconv.Itoa(n), "-i", interval, "-W", "1", dst)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return func() (int, int) {
		cmd.Wait()
		m := pingLossRE.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("ping %s: %s", dst, out.String())
		}
		sent, _ := strconv.Atoi(m[1])
		got, _ := strconv.Atoi(m[2])
		return sent, got
	}
}

// TestReloadLive: on leon-japan, while Fujisawa's host pings Seoul's every
// 10 ms through the overlay, Fujisawa's agent is asked to reload a file
// with an error (refused, naming the field and its line), then a file
// with a new network (its TAP device comes up), then, by SIGHUP, a file
// with a rate limit on the new network. The ping loses nothing.
func TestReloadLive(t *testing.T) {
	o := withAgents(t, upWith(t, opsPrefix, "leon-japan", "--overlay", "detour"))
	file := o.agentConfig("Fujisawa")
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.waitPath("Fujisawa", "Seoul", "Seoul", 10*time.Second); err != nil && !strings.Contains(err.Error(), ">") {
		t.Log(err)
	}
	wait := startPing(t, o.host("Fujisawa").NS, o.host("Seoul").Addr, 500, "0.01")
	time.Sleep(500 * time.Millisecond)

	// A file with an error: refused, with field and line; nothing changes.
	lines := strings.Count(string(orig), "\n")
	broken := string(orig) + "underlay_mtu: 12\n"
	if err := os.WriteFile(file, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := o.detourIn("Fujisawa", "reload")
	t.Logf("broken file: detour reload: %v\n%s", err, out)
	if err == nil || !strings.Contains(out, fmt.Sprintf("line %d: underlay_mtu: 12 is outside", lines+1)) || !strings.Contains(out, "running configuration stays") {
		t.Errorf("a broken file was not refused naming underlay_mtu and line %d:\n%s", lines+1, out)
	}

	// A new network: up, the others untouched.
	cfg.Networks = append(cfg.Networks, config.Network{Name: "blue", ID: 50, TAP: "dt-blue", MTU: cfg.Networks[0].MTU})
	b, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	out = o.mustDetour(t, "Fujisawa", "reload")
	t.Logf("new network: detour reload in %.1f ms:\n%s", float64(time.Since(t0).Microseconds())/1000, out)
	if !strings.Contains(out, "add network blue") {
		t.Errorf("reload output: %s", out)
	}
	if link, err := inNS(o.gw("Fujisawa"), "ip", "-o", "link", "show", "dt-blue"); err != nil {
		t.Errorf("dt-blue after the reload: %v %s", err, link)
	}

	// SIGHUP: a limit on the new network.
	cfg.Networks[len(cfg.Networks)-1].MaxRate = 20e6
	b, _ = cfg.Marshal()
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	proc, err := o.agentPID("Fujisawa")
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(proc.PID, syscall.SIGHUP)
	deadline := time.Now().Add(3 * time.Second)
	for {
		list, _ := o.detourIn("Fujisawa", "net", "list")
		if strings.Contains(list, "20mbit") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 20mbit limit 3 s after SIGHUP:\n%s", list)
		}
		time.Sleep(50 * time.Millisecond)
	}

	sent, got := wait()
	t.Logf("ping Fujisawa -> Seoul every 10 ms across the reloads: %d sent, %d received", sent, got)
	if got != sent {
		t.Errorf("the reloads cost %d of %d pings of a network they did not touch", sent-got, sent)
	}
}
