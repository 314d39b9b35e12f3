package sim

import (
	"testing"
	"time"
)

// azureJitter loads azure-16 with 1 ms of jitter on every link and clock
// offsets of up to ±5 s.
func azureJitter(t testing.TB, seed uint64) *Net {
	n := FromScenario(loadOffset(t, "azure-16", seed), seed, nil)
	for k, l := range n.links {
		l.Jitter = time.Millisecond
		n.links[k] = l
	}
	return n
}

// TestSteadyJitterNoRouteChanges runs azure-16 with 1 ms jitter for ten
// simulated minutes after a 10 s warm-up: no route may change, and the
// chosen paths must still pass the oracle check.
func TestSteadyJitterNoRouteChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("ten simulated minutes of 16 sites")
	}
	n := azureJitter(t, 10)
	start(t, n)
	n.RunFor(10 * time.Second)
	before := len(n.Changes)
	n.RunFor(10 * time.Minute)
	changes := n.Changes[before:]
	for _, c := range changes {
		t.Errorf("route change at +%v: %s → %v: %v → %v", c.At.Sub(Start), c.Site, c.Dest, c.From, c.To)
	}
	rep := checkOracle(t, n, 3)
	t.Logf("10 min of azure-16 with 1 ms jitter: %d route changes, %d events; %d pairs relayed, %d outside the oracle bound",
		len(changes), n.Events, rep.relayed, rep.violations)
}

// TestJitterOnsetMovesNoRoute: azure-16 runs for a minute without jitter,
// then every link gets 1 ms of jitter either way (uniform in ±1 ms
// around its delay, the WAN emulator's model), which leaves each link's
// mean delay where it was. No route may change in the two minutes after
// the onset: a link estimate that reads such jitter low makes every
// relay of two or three links look 0.5 to 1 ms better at once.
func TestJitterOnsetMovesNoRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("three simulated minutes of 16 sites")
	}
	n := FromScenario(loadOffset(t, "azure-16", 12), 12, nil)
	start(t, n)
	n.RunFor(time.Minute)
	for k, l := range n.links {
		l.Delay -= time.Millisecond
		l.Jitter = 2 * time.Millisecond
		n.links[k] = l
	}
	before := len(n.Changes)
	n.RunFor(2 * time.Minute)
	for _, c := range n.Changes[before:] {
		from, _ := n.TrueDelay(c.Site, c.From)
		to, _ := n.TrueDelay(c.Site, c.To)
		t.Errorf("route change at +%v: %s → %v: %v (%v) → %v (%v)", c.At.Sub(Start), c.Site, c.Dest, c.From, from, c.To, to)
	}
	rep := checkOracle(t, n, 3)
	t.Logf("2 min of azure-16 after the onset of ±1 ms jitter: %d route changes; %d pairs relayed, %d outside the oracle bound",
		len(n.Changes)-before, rep.relayed, rep.violations)
}

// TestControlTraffic measures the control traffic per site at 16 sites in
// steady state, by message type.
func TestControlTraffic(t *testing.T) {
	n := azureJitter(t, 11)
	start(t, n)
	n.RunFor(10 * time.Second)
	total, maxSite, perType := controlTraffic(n, 30*time.Second)
	logControlTraffic(t, 16, total, maxSite, perType)
	// 15 peers × 10 probes/s × (24 + 40) bytes is 9.6 kB/s of probing; link
	// state adds about 15 × 380 bytes per second.
	if total > 20000 {
		t.Errorf("control traffic %.0f B/s per site, more than the 20 kB/s budget", total)
	}
}

// controlTraffic runs n for window and returns the control bytes per
// second each site sends (detour payload): the mean over sites, the
// largest site, and the mean by message type.
func controlTraffic(n *Net, window time.Duration) (total, maxSite float64, perType [8]float64) {
	type snap struct{ out, in [8]uint64 }
	take := func() map[string]snap {
		m := map[string]snap{}
		for _, s := range n.Sites() {
			c := s.Node.Counters()
			var sn snap
			for i := range c.Out {
				sn.out[i], sn.in[i] = c.Out[i].Bytes, c.In[i].Bytes
			}
			m[s.Name] = sn
		}
		return m
	}
	first := take()
	n.RunFor(window)
	last := take()
	for name, l := range last {
		site := 0.0
		for i := range l.out {
			b := float64(l.out[i]-first[name].out[i]) / window.Seconds()
			perType[i] += b / float64(len(last))
			site += b
		}
		total += site / float64(len(last))
		maxSite = max(maxSite, site)
	}
	return total, maxSite, perType
}
