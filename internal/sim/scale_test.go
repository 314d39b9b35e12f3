package sim

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/topo"
)

// TestAzure54Scale runs all 54 Azure regions with clock offsets of up to
// ±5 s: the probe interval grows to 53 members / 200 probes per second,
// every ordered pair's path is within the oracle bound, and the control
// traffic per site stays within its budget. It logs the protocol's CPU
// cost per simulated site-second.
func TestAzure54Scale(t *testing.T) {
	if testing.Short() {
		t.Skip("54 sites take about 10 s")
	}
	n := FromScenario(loadOffset(t, "azure-54", 54), 54, nil)
	start(t, n)
	wall := time.Now()
	n.RunFor(12 * time.Second)
	t.Logf("54 sites, 12 s simulated in %v of CPU: %.2f ms per site-second", time.Since(wall),
		float64(time.Since(wall).Milliseconds())/(54*12))
	// Route computations are batched: at most one per 50 ms at 54 sites,
	// however many probe replies and reports arrive.
	for _, s := range n.Sites() {
		if r := float64(s.Node.Counters().Refreshes) / 12; r > 20 {
			t.Errorf("%s recomputed its routes %.1f times a second; the batch interval allows 20", s.Name, r)
		}
	}
	t.Logf("route computations per site: %.1f a second", float64(n.Sites()[0].Node.Counters().Refreshes)/12)
	for _, s := range n.Sites() {
		probe, down := s.Node.DetectionTimes()
		if probe != 265*time.Millisecond || down != 1325*time.Millisecond {
			t.Fatalf("%s probes every %v, down after %v; want 265 ms and 1.325 s (53 members at 200 probes/s)", s.Name, probe, down)
		}
	}
	rep := checkOracle(t, n, 3)
	t.Logf("azure-54: %d ordered pairs, %d relayed (%.1f %%), %d outside max(0.5 ms, 2 %%) of the 3-hop optimum; worst kept: %s",
		rep.pairs, rep.relayed, 100*float64(rep.relayed)/float64(rep.pairs), rep.violations, rep.worst)
	total, maxSite, perType := controlTraffic(n, 10*time.Second)
	logControlTraffic(t, 54, total, maxSite, perType)
	// 200 probes and 200 replies a second of about 64 bytes together are
	// 12.8 kB/s; link state is 53 reports of about 1.3 kB a second.
	if total > 100000 {
		t.Errorf("control traffic %.0f B/s per site at 54 sites, more than the 100 kB/s budget", total)
	}
}

// TestScaleRunIsDeterministic: two runs of the same scaling scenario
// (clock offsets and skew, jitter, busy links slowed, a relay killed)
// report the same, down to the number of events simulated, so that a
// change can be compared with the code before it run for run.
func TestScaleRunIsDeterministic(t *testing.T) {
	tp, err := topo.Generate("azure", 12, 1)
	if err != nil {
		t.Fatal(err)
	}
	run := func() string {
		rep := RunScale(ScaleOptions{Topology: tp, Seed: 1, Scheme: "new", Warm: 20 * time.Second, Steady: 10 * time.Second,
			Jitter: time.Millisecond, Offset: 5 * time.Second, Skew: 50e-6, Events: true})
		rep.WallS = 0
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("two runs of one scenario differ:\n%s\n%s", a, b)
	}
}
