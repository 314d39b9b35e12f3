package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// TestInbandLeavesABusyLinkSooner: S→D is direct (15 ms; via R 16 ms, via Q
// 18 ms) when that link slows by 20 ms at once, as when a queue fills.
// With a flow from S to D on it, whose stamps D sends back, S leaves it
// within 150 ms in every one of 10 seeds (the slowed link's new round
// trip is 50 ms of it; a collapse hold of 100 ms made it 176–199 ms);
// with probes alone it takes longer in every seed, but under 230 ms: the
// first probe that crosses the slowed link makes S send the probes that
// confirm it at once (control's confirm), where waiting for two more
// probe intervals took 256–344 ms.
func TestInbandLeavesABusyLinkSooner(t *testing.T) {
	leave := map[bool][]time.Duration{}
	for _, traffic := range []bool{false, true} {
		for seed := uint64(1); seed <= 10; seed++ {
			n := detourMesh(seed)
			n.SetLink("S", "D", Link{Delay: 15 * ms, Jitter: ms})
			n.SetLink("D", "S", Link{Delay: 15 * ms, Jitter: ms})
			start(t, n)
			if traffic {
				n.AddTraffic("S", "D")
			}
			n.RunFor(12*time.Second + time.Duration(seed*37)*ms)
			direct := []wire.SiteID{n.Site("D").ID}
			if p := n.Path("S", "D"); !slices.Equal(p, direct) {
				t.Fatalf("seed %d: S→D is %v, want direct", seed, n.PathNames("S", "D"))
			}
			n.SetLink("S", "D", Link{Delay: 35 * ms, Jitter: ms})
			at := n.Now()
			if !n.RunUntil(at.Add(5*time.Second), func() bool { return !slices.Equal(n.Path("S", "D"), direct) }) {
				t.Fatalf("traffic %v, seed %d: still on the slowed link after 5 s", traffic, seed)
			}
			leave[traffic] = append(leave[traffic], n.Now().Sub(at))
			if traffic && n.Site("S").Node.Counters().InbandSamples == 0 {
				t.Fatalf("seed %d: S took no in-band samples", seed)
			}
		}
	}
	t.Logf("left the slowed link after: with traffic %v, probes alone %v", leave[true], leave[false])
	if worst := slices.Max(leave[true]); worst > 150*ms {
		t.Errorf("with traffic the slowed link was left after up to %v; want 150 ms", worst)
	}
	if worst := slices.Max(leave[false]); worst > 230*ms {
		t.Errorf("with probes alone the slowed link was left after up to %v; want 230 ms", worst)
	}
	if slices.Max(leave[true]) >= slices.Min(leave[false]) {
		t.Errorf("with traffic up to %v, probes alone from %v: in-band samples do not help", slices.Max(leave[true]), slices.Min(leave[false]))
	}
}
