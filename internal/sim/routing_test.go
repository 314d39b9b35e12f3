package sim

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

const ms = time.Millisecond

// triangle builds A, B, C with the given one-way delays (a map "XY" → delay)
// and clock offsets.
func triangle(d map[string]time.Duration, offsets [3]time.Duration, jitter time.Duration, seed uint64) *Net {
	n := New(seed)
	names := []string{"A", "B", "C"}
	for i, name := range names {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(name, offsets[i], boot, nil)
	}
	for k, v := range d {
		n.SetLink(k[:1], k[1:], Link{Delay: v, Jitter: jitter})
	}
	return n
}

// TestOneWayTIV: A→C is slow direct (20 ms) and fast via B (10 ms); C→A is
// fast direct (10 ms) and slow via B (20 ms). A relays, C does not, with
// and without clock offsets of several seconds. Every link adds 0 to 1 ms
// of jitter, 0.5 ms on average, so the relay saves 9.5 ms on average.
func TestOneWayTIV(t *testing.T) {
	d := map[string]time.Duration{"AC": 20 * ms, "CA": 10 * ms, "AB": 5 * ms, "BC": 5 * ms, "CB": 10 * ms, "BA": 10 * ms}
	for _, off := range [][3]time.Duration{{}, {3 * time.Second, -7 * time.Second, 11 * time.Second}} {
		t.Run(fmt.Sprint(off), func(t *testing.T) {
			n := triangle(d, off, ms, 7)
			if off[0] != 0 { // and clocks running ±50 ppm apart
				n.Site("A").Skew, n.Site("C").Skew = 50e-6, -50e-6
			}
			start(t, n)
			n.RunFor(60 * time.Second)
			if got := n.PathNames("A", "C"); !slices.Equal(got, []string{"B", "C"}) {
				t.Errorf("A→C path %v, want via B", got)
			}
			if got := n.PathNames("C", "A"); !slices.Equal(got, []string{"A"}) {
				t.Errorf("C→A path %v, want direct", got)
			}
			tivs := n.Site("A").Node.TIVs()
			if len(tivs) != 1 || tivs[0].From != n.Site("A").ID || tivs[0].To != n.Site("C").ID {
				t.Fatalf("TIVs %+v", tivs)
			}
			if s := tivs[0].Saving; s < 9*time.Millisecond || s > 10*time.Millisecond {
				t.Errorf("saving %v, want 9.5 ms", s)
			}
		})
	}
}

// TestRelayKeptThroughLostReports: B relays A→C; every link-state report
// from B to A is lost for 6 s, longer than a report's expiry (3.5 s),
// while B's probes and replies still arrive. B is alive and its last
// report the best knowledge of its links, so A keeps the route.
func TestRelayKeptThroughLostReports(t *testing.T) {
	d := map[string]time.Duration{"AC": 20 * ms, "CA": 20 * ms, "AB": 5 * ms, "BA": 5 * ms, "BC": 5 * ms, "CB": 5 * ms}
	n := triangle(d, [3]time.Duration{}, 0, 7)
	start(t, n)
	n.RunFor(20 * time.Second)
	if got := n.PathNames("A", "C"); !slices.Equal(got, []string{"B", "C"}) {
		t.Fatalf("A→C path %v, want via B", got)
	}
	a, b := n.Site("A").Addr, n.Site("B").Addr
	n.Drop = func(from, to netip.AddrPort, pkt []byte) bool {
		return from == b && to == a && len(pkt) > wire.CommonHeaderLen && wire.Type(pkt[2]) == wire.TypeLinkState
	}
	before := len(n.Changes)
	n.RunFor(6 * time.Second)
	n.Drop = nil
	n.RunFor(2 * time.Second)
	for _, c := range n.Changes[before:] {
		t.Errorf("route change at +%v: %s → %v: %v → %v (%s)", c.At.Sub(Start), c.Site, c.Dest, c.From, c.To, c.Reason)
	}
}

// bestFrom returns the lowest true delay from src to every site over
// paths of at most h links (Bellman-Ford limited to h rounds; with
// positive delays a walk never beats the simple path inside it).
func bestFrom(n *Net, src, h int) []time.Duration {
	const inf = time.Duration(1 << 62)
	k := len(n.Sites())
	dist := make([]time.Duration, k)
	for i := range dist {
		dist[i] = inf
	}
	dist[src] = 0
	for range h {
		next := slices.Clone(dist)
		for u := range k {
			if dist[u] == inf {
				continue
			}
			for v := range k {
				if l, ok := n.links[[2]int{u, v}]; ok && u != v && !l.Down && dist[u]+l.Mean() < next[v] {
					next[v] = dist[u] + l.Mean()
				}
			}
		}
		dist = next
	}
	return dist
}

type oracleReport struct {
	pairs, relayed, violations int
	saved, directSum           time.Duration
	worst                      string
	// details describes each violation.
	details []string
}

// checkOracle compares every site's chosen path with the offline optimum
// and fails t for each pair outside the bound.
func checkOracle(t *testing.T, n *Net, h int) oracleReport {
	t.Helper()
	rep := checkOracleQuiet(n, h)
	for _, d := range rep.details {
		t.Error(d)
	}
	return rep
}

// checkOracleQuiet compares every site's chosen path with the offline
// optimum of at most h links: a pair is outside the bound when its path's
// true delay exceeds the optimum by more than max(0.5 ms, 2 %).
func checkOracleQuiet(n *Net, h int) oracleReport {
	var rep oracleReport
	var worstExcess time.Duration
	for i, a := range n.Sites() {
		bests := bestFrom(n, i, h)
		for j, b := range n.Sites() {
			if i == j {
				continue
			}
			rep.pairs++
			p := n.Path(a.Name, b.Name)
			got, ok := n.TrueDelay(a.Name, p)
			if p == nil || !ok {
				rep.violations++
				rep.details = append(rep.details, fmt.Sprintf("%s→%s: no usable route (%v)", a.Name, b.Name, p))
				continue
			}
			best := bests[j]
			bound := max(500*time.Microsecond, best/50)
			if excess := got - best; excess > bound {
				rep.violations++
				rep.details = append(rep.details, fmt.Sprintf("%s→%s: path %v true %v, best %v (bound %v)", a.Name, b.Name, n.PathNames(a.Name, b.Name), got, best, bound))
			} else if excess > worstExcess {
				worstExcess = excess
				rep.worst = fmt.Sprintf("%s→%s %v above the optimum %v", a.Name, b.Name, excess, best)
			}
			direct := n.links[[2]int{i, j}].Delay
			rep.directSum += direct
			if len(p) > 1 {
				rep.relayed++
				rep.saved += direct - got
			}
		}
	}
	return rep
}

// TestAzure16Oracle runs the 16-region Azure scenario (one-way = RTT/2 per
// direction from each region's own row) with clock offsets of up to ±5 s
// and checks every ordered pair against the offline optimum of at most 3
// hops.
func TestAzure16Oracle(t *testing.T) {
	n := FromScenario(loadOffset(t, "azure-16", 16), 16, nil)
	start(t, n)
	n.RunFor(8 * time.Second)
	rep := checkOracle(t, n, 3)
	t.Logf("azure-16: %d ordered pairs, %d relayed (%.1f %%), %d outside max(0.5 ms, 2 %%) of the 3-hop optimum; worst kept: %s",
		rep.pairs, rep.relayed, 100*float64(rep.relayed)/float64(rep.pairs), rep.violations, rep.worst)
	t.Logf("azure-16: one-way latency saved %v in total over %d relayed pairs (%.2f %% of the sum of direct one-way delays %v), %.2f ms per relayed pair",
		rep.saved, rep.relayed, 100*float64(rep.saved)/float64(rep.directSum), rep.directSum, float64(rep.saved)/float64(rep.relayed)/1e6)
}

// percentile returns the p-quantile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// detourMesh: four sites; S→D direct 10 ms, via R 8+8 ms, via Q 9+9 ms,
// other links 10 ms, 1 ms jitter, random clock offsets.
func detourMesh(seed uint64) *Net {
	rng := rand.New(rand.NewPCG(seed, 99))
	n := New(seed)
	names := []string{"S", "D", "R", "Q"}
	for i, name := range names {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(name, time.Duration(rng.Int64N(int64(4*time.Second))), boot, nil)
	}
	for _, a := range names {
		for _, b := range names {
			if a != b {
				n.SetLink(a, b, Link{Delay: 10 * ms, Jitter: ms})
			}
		}
	}
	for _, k := range []string{"SR", "RD", "DR", "RS"} {
		n.SetLink(k[:1], k[1:], Link{Delay: 8 * ms, Jitter: ms})
	}
	for _, k := range []string{"SQ", "QD", "DQ", "QS"} {
		n.SetLink(k[:1], k[1:], Link{Delay: 9 * ms, Jitter: ms})
	}
	return n
}

// TestRerouteWhenLinkSlows: S→D direct becomes 30 ms at a random moment;
// the time until S uses a relay, p95 over 20 seeds, must be under 1 s.
func TestRerouteWhenLinkSlows(t *testing.T) {
	var took []time.Duration
	for seed := uint64(1); seed <= 20; seed++ {
		n := detourMesh(seed)
		start(t, n)
		n.RunFor(5*time.Second + time.Duration(seed*37)*ms)
		if p := n.PathNames("S", "D"); !slices.Equal(p, []string{"D"}) {
			t.Fatalf("seed %d: before the change S→D is %v", seed, p)
		}
		n.SetLink("S", "D", Link{Delay: 30 * ms, Jitter: ms})
		at := n.Now()
		if !n.RunUntil(at.Add(3*time.Second), func() bool { return len(n.Path("S", "D")) == 2 }) {
			t.Fatalf("seed %d: not rerouted within 3 s", seed)
		}
		took = append(took, n.Now().Sub(at))
	}
	p50, p95 := percentile(took, 0.5), percentile(took, 0.95)
	t.Logf("reroute after a link slows (20 trials): p50 %v, p95 %v, max %v", p50, p95, percentile(took, 1))
	if p95 > time.Second {
		t.Errorf("p95 reroute time %v, want < 1 s", p95)
	}
}

// TestSwitchesAreReported: the path change made when S→D slows is handed
// out once in the core's Ready (which the agent logs), with the old and
// new path and the router's reason.
func TestSwitchesAreReported(t *testing.T) {
	n := detourMesh(1)
	start(t, n)
	n.RunFor(5 * time.Second)
	s := n.Site("S")
	s.Switches = nil // the settling period's, if any
	n.SetLink("S", "D", Link{Delay: 30 * ms, Jitter: ms})
	if !n.RunUntil(n.Now().Add(3*time.Second), func() bool { return len(n.Path("S", "D")) == 2 }) {
		t.Fatal("not rerouted within 3 s")
	}
	// A change handed out twice would be recorded twice.
	n.RunFor(10 * ms)
	d := n.Site("D").ID
	var got []routing.Switch
	for _, sw := range s.Switches {
		if sw.To[len(sw.To)-1] == d {
			got = append(got, sw)
		}
	}
	if len(got) != 1 || !slices.Equal(got[0].From, []wire.SiteID{d}) || !slices.Equal(got[0].To, n.Path("S", "D")) || got[0].Reason == "" {
		t.Fatalf("switches to D: %+v, want one from [D] to %v with a reason", got, n.Path("S", "D"))
	}
	if again := s.Node.Switches(); len(again) != 0 {
		t.Fatalf("the node still holds %d changes the core took", len(again))
	}
}

// TestRelayKilled: S→D goes via R; R is killed; every pair relayed through
// R must move off it within 1.5 s (p95 over 20 seeds).
func TestRelayKilled(t *testing.T) {
	var took []time.Duration
	for seed := uint64(1); seed <= 20; seed++ {
		n := detourMesh(seed)
		n.SetLink("S", "D", Link{Delay: 30 * ms, Jitter: ms})
		n.SetLink("D", "S", Link{Delay: 30 * ms, Jitter: ms})
		start(t, n)
		n.RunFor(5*time.Second + time.Duration(seed*37)*ms)
		r := n.Site("R").ID
		type pair struct{ a, b string }
		var via []pair
		for _, a := range n.Sites() {
			for _, b := range n.Sites() {
				if a != b && b.ID != r && slices.Contains(n.Path(a.Name, b.Name), r) {
					via = append(via, pair{a.Name, b.Name})
				}
			}
		}
		if len(via) < 2 {
			t.Fatalf("seed %d: only %v relayed via R", seed, via)
		}
		n.Kill("R")
		at := n.Now()
		moved := func() bool {
			for _, p := range via {
				if q := n.Path(p.a, p.b); q == nil || slices.Contains(q, r) {
					return false
				}
			}
			return true
		}
		if !n.RunUntil(at.Add(5*time.Second), moved) {
			t.Fatalf("seed %d: pairs via R not rerouted within 5 s", seed)
		}
		took = append(took, n.Now().Sub(at))
	}
	p50, p95 := percentile(took, 0.5), percentile(took, 0.95)
	t.Logf("reroute after the relay dies (20 trials): p50 %v, p95 %v, max %v", p50, p95, percentile(took, 1))
	if p95 > 1500*time.Millisecond {
		t.Errorf("p95 %v, want < 1.5 s", p95)
	}
}
