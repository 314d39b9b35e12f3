package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/scenario"
)

func load(t testing.TB, name string) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Load(name)
	if err != nil {
		t.Fatalf("scenario %s: %v", name, err)
	}
	return sc
}

func start(t testing.TB, n *Net) {
	t.Helper()
	if err := n.StartAll(); err != nil {
		t.Fatal(err)
	}
}

// TestLeonJapan: Fujisawa→Seoul goes via Inagi (21 ms RTT against 32 ms
// direct), and so does the reverse direction.
func TestLeonJapan(t *testing.T) {
	n := FromScenario(load(t, "leon-japan"), 1, nil)
	start(t, n)
	n.RunFor(5 * time.Second)
	if got := n.PathNames("Fujisawa", "Seoul"); !slices.Equal(got, []string{"Inagi", "Seoul"}) {
		t.Fatalf("Fujisawa→Seoul path %v", got)
	}
	if got := n.PathNames("Seoul", "Fujisawa"); !slices.Equal(got, []string{"Inagi", "Fujisawa"}) {
		t.Fatalf("Seoul→Fujisawa path %v", got)
	}
	r, _ := n.Site("Fujisawa").Node.Table().Lookup(n.Site("Seoul").ID)
	t.Logf("Fujisawa→Seoul via Inagi: RTT estimate %v, one-way estimate %v, gain over direct %v",
		r.RTTEstimate, r.OneWayEstimate, r.DirectDelay-r.Delay)
	if d := r.RTTEstimate - 21*time.Millisecond; d < -300*time.Microsecond || d > 300*time.Microsecond {
		t.Errorf("RTT estimate %v, want 21 ms", r.RTTEstimate)
	}
}
