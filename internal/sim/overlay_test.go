package sim

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/scenario"
	"github.com/detour-overlay/detour/internal/wire"
)

func load(t testing.TB, name string) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Load(name)
	if err != nil {
		t.Fatalf("scenario %s: %v", name, err)
	}
	return sc
}

// loadOffset loads a scenario and gives its sites random clock offsets of
// up to ±5 s.
func loadOffset(t testing.TB, name string, seed uint64) *scenario.Scenario {
	t.Helper()
	sc := load(t, name)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range sc.Sites {
		sc.Sites[i].ClockOffset = scenario.Duration(time.Duration(rng.Int64N(int64(10*time.Second))) - 5*time.Second)
	}
	return sc
}

// logControlTraffic logs what controlTraffic measured, by message type.
func logControlTraffic(t *testing.T, sites int, total, maxSite float64, perType [8]float64) {
	t.Helper()
	t.Logf("control traffic at %d sites, bytes/s sent per site (detour payload): mean %.0f, max %.0f", sites, total, maxSite)
	for i, b := range perType {
		if b > 0 {
			t.Logf("  %-11s %7.0f B/s", wire.Type(i), b)
		}
	}
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

// TestGarbageKeepsRouting injects 1000 random datagrams per second into
// every leon-japan site for 10 s: they are counted as dropped, and the
// routes stay as they were.
func TestGarbageKeepsRouting(t *testing.T) {
	n := FromScenario(load(t, "leon-japan"), 3, nil)
	start(t, n)
	n.RunFor(5 * time.Second)
	before := len(n.Changes)
	rng := rand.New(rand.NewPCG(5, 5))
	from := netip.MustParseAddrPort("192.0.2.66:4789")
	injected := 0
	for i := 0; i < 10000; i++ {
		for _, s := range n.Sites() {
			b := make([]byte, rng.IntN(120))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
			if len(b) > 4 && i%2 == 0 {
				b[0], b[1], b[2] = 0xD7, 1, byte(2+rng.IntN(6))
			}
			n.Inject(s.Name, from, b)
			injected++
		}
		n.RunFor(time.Millisecond)
	}
	if len(n.Changes) != before {
		t.Fatalf("garbage changed routes: %+v", n.Changes[before:])
	}
	if got := n.PathNames("Fujisawa", "Seoul"); !slices.Equal(got, []string{"Inagi", "Seoul"}) {
		t.Fatalf("Fujisawa→Seoul path %v", got)
	}
	var dropped uint64
	for _, s := range n.Sites() {
		c := s.Node.Counters()
		for _, v := range c.Dropped {
			dropped += v
		}
	}
	// A random datagram can be well formed (say, an empty member list);
	// such rare ones are processed rather than dropped.
	if dropped+10 < uint64(injected) {
		t.Fatalf("%d of %d garbage datagrams counted", dropped, injected)
	}
	t.Logf("%d garbage datagrams, %d drops counted, routes unchanged", injected, dropped)
}
