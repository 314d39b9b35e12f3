package sim

import (
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/topo"
)

// TestEconomyAgainstOld runs a 24-site geometric overlay with added
// detours, 1 ms jitter and skewed clocks under both schemes: the new one
// sends less control traffic, keeps every ordered pair within the bound
// with no route change in the window other than to a truly shorter path
// (one estimate settling, at 41 s), and covers the routes of a killed
// relay within a second. The figures at 100 and 300 sites come from
// detour-lab sim and scripts/bench-scale.sh (docs/scaling.md).
func TestEconomyAgainstOld(t *testing.T) {
	if testing.Short() {
		t.Skip("two 24-site overlays for 70 simulated seconds")
	}
	tp := topo.Geometric(24, 3)
	run := func(scheme string) ScaleReport {
		return RunScale(ScaleOptions{Topology: tp, Seed: 3, Scheme: scheme, Warm: 40 * time.Second, Steady: 20 * time.Second,
			Jitter: time.Millisecond, Offset: 5 * time.Second, Skew: 50e-6, Events: true})
	}
	old, eco := run("old"), run("new")
	for _, r := range []ScaleReport{old, eco} {
		t.Logf("%s: %.0f kbit/s per site (max %.0f) %v; %d of %d pairs outside; %d route changes; killed relay covered p95 %.0f ms (%d missed)",
			r.Scheme, r.ControlKbit, r.ControlKbitMax, r.ControlByType, r.PairsOutsideBound, r.Pairs, r.RouteChanges,
			r.KilledRelayCover.P95ms, r.KilledRelayCover.Missed)
	}
	if eco.ControlKbit > 0.8*old.ControlKbit {
		t.Errorf("new scheme %.0f kbit/s per site, old %.0f: want at least 20 %% less", eco.ControlKbit, old.ControlKbit)
	}
	if eco.PairsOutsideBound != 0 || eco.RouteChangesNoise != 0 {
		t.Errorf("new scheme: %d pairs outside the bound %v, %d route changes not to a shorter path", eco.PairsOutsideBound, eco.Outside, eco.RouteChangesNoise)
	}
	if k := eco.KilledRelayCover; k == nil || k.Count == 0 || k.Missed > 0 || k.MaxMs > 1000 {
		t.Errorf("new scheme: killed relay covered %+v, want every route within 1 s", k)
	}
}
