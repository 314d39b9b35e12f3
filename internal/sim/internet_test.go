package sim

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// internet describes an overlay built as the Internet would give it: a
// subset of the 54 measured Azure regions, each direction's one-way delay
// (half the measured round trip) perturbed independently, so that many
// pairs have a faster detour, clocks set tens of seconds apart and
// drifting, a little jitter and random loss on every link.
type internet struct {
	sites   int           // regions taken at random from the 54; 54 takes all
	perturb float64       // each direction's delay × U(1 − perturb, 1 + perturb)
	offset  time.Duration // clock offsets U(−offset, +offset)
	skew    float64       // clock skew U(−skew, +skew)
	jitter  time.Duration
	loss    float64 // random loss on every directed link
	// stagger starts the sites one after the other, this far apart.
	stagger time.Duration
}

// issueInternet is the network of the loss and convergence checks: ±25 %
// per direction, clocks ±30 s apart and ±100 ppm, 0.3 ms jitter.
func issueInternet(sites int, loss float64) internet {
	return internet{sites: sites, perturb: 0.25, offset: 30 * time.Second, skew: 100e-6, stagger: 250 * time.Millisecond,
		jitter: 300 * time.Microsecond, loss: loss}
}

// build returns the network (sites not started) for seed.
func (in internet) build(t testing.TB, seed uint64) *Net {
	t.Helper()
	sc := load(t, "azure-54")
	rng := rand.New(rand.NewPCG(seed, seed*31+7))
	pick := rng.Perm(len(sc.Sites))[:in.sites]
	n := New(seed)
	for k, i := range pick {
		var boot []netip.AddrPort
		if k > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		off := time.Duration((2*rng.Float64() - 1) * float64(in.offset))
		s := n.AddSite(sc.Sites[i].Name, off, boot, nil)
		s.Skew = (2*rng.Float64() - 1) * in.skew
	}
	for a, i := range pick {
		for b, j := range pick {
			if a == b {
				continue
			}
			d := float64(sc.Link(i, j).Delay) * (1 + in.perturb*(2*rng.Float64()-1))
			n.links[[2]int{a, b}] = Link{Delay: time.Duration(d), Jitter: in.jitter, Loss: in.loss}
		}
	}
	return n
}

// startStaggered starts every site, stagger apart, and returns when the
// last one has started.
func startStaggered(t testing.TB, n *Net, stagger time.Duration) {
	t.Helper()
	for _, s := range n.Sites() {
		if err := n.Start(s.Name); err != nil {
			t.Fatal(err)
		}
		n.RunFor(stagger)
	}
}

// settleRun is what one run of the convergence check saw.
type settleRun struct {
	early, late  oracleReport // 10 s after the last start, and at the end
	firstInBound time.Duration
	// Route changes between the two checks: those to a path truly
	// shorter than the one left (an estimate that reached a real gain),
	// and the others (noise).
	better, noise []string
}

// runSettle builds and starts the network, checks every ordered pair
// against the 3-hop optimum after warm (10 s in the issue) and again
// after steady more, and counts the route changes in between.
func runSettle(t *testing.T, in internet, seed uint64, warm, steady time.Duration) settleRun {
	n := in.build(t, seed)
	startStaggered(t, n, in.stagger)
	var r settleRun
	r.firstInBound = -1
	for el := time.Duration(0); el < warm; el += time.Second {
		n.RunFor(time.Second)
		if r.firstInBound < 0 && checkOracleQuiet(n, 3).violations == 0 {
			r.firstInBound = el + time.Second
		}
	}
	r.early = checkOracleQuiet(n, 3)
	before := len(n.Changes)
	n.RunFor(steady)
	r.late = checkOracleQuiet(n, 3)
	for _, c := range n.Changes[before:] {
		from, ok1 := n.TrueDelay(c.Site, c.From)
		to, ok2 := n.TrueDelay(c.Site, c.To)
		d := fmt.Sprintf("+%v %s→%s: %v (%v) → %v (%v): %s", c.At.Sub(Start).Round(time.Millisecond), c.Site, n.nameOf(c.Dest),
			n.names(c.From), from, n.names(c.To), to, c.Reason)
		if ok1 && ok2 && to < from {
			r.better = append(r.better, d)
		} else {
			r.noise = append(r.noise, d)
		}
	}
	return r
}

// TestInternetLossRoutes is the loss and convergence check: random
// 20-site subsets of the Azure regions with 0, 0.1, 0.5 and 1 % random
// loss on every link. 10 s after the last site starts every ordered pair
// must be within max(0.5 ms, 2 %) of the 3-hop optimum, and stay so with no
// route change for the rest of the run other than to a truly shorter path
// (the links do not change, so any other change is noise). The run is 2
// simulated minutes here; DETOUR_SIM_STEADY (a duration, e.g. 10m), DETOUR_SIM_SEEDS (a count),
// DETOUR_SIM_SITES (54 for all regions) and DETOUR_SIM_LOSS make it
// longer and wider.
func TestInternetLossRoutes(t *testing.T) {
	if testing.Short() {
		t.Skip("several 20-site overlays for minutes each")
	}
	steady := 2 * time.Minute
	if v := os.Getenv("DETOUR_SIM_STEADY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("DETOUR_SIM_STEADY=%q: %v", v, err)
		}
		steady = d
	}
	sites := 20
	if v := os.Getenv("DETOUR_SIM_SITES"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 2 || k > 54 {
			t.Fatalf("DETOUR_SIM_SITES=%q: want a count of 2..54", v)
		}
		sites = k
	}
	seeds := 2
	if v := os.Getenv("DETOUR_SIM_SEEDS"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 {
			t.Fatalf("DETOUR_SIM_SEEDS=%q: want a positive count", v)
		}
		seeds = k
	}
	for _, loss := range lossRates() {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			t.Run(fmt.Sprintf("loss=%g%%/seed=%d", 100*loss, seed), func(t *testing.T) {
				t.Parallel()
				r := runSettle(t, issueInternet(sites, loss), 100+seed, 10*time.Second, steady)
				t.Logf("in bound after %v; at 10 s: %d of %d pairs outside (worst kept: %s); after %v more: %d outside; route changes between: %d to a truly shorter path, %d others",
					r.firstInBound, r.early.violations, r.early.pairs, r.early.worst, steady, r.late.violations, len(r.better), len(r.noise))
				for _, d := range r.better {
					t.Logf("route change to a shorter path: %s", d)
				}
				for _, d := range r.early.details {
					t.Errorf("at 10 s: %s", d)
				}
				for _, d := range r.late.details {
					t.Errorf("at the end: %s", d)
				}
				for _, d := range r.noise {
					t.Errorf("route change not to a shorter path: %s", d)
				}
			})
		}
	}
}

// lossRates are the loss rates of TestInternetLossRoutes; DETOUR_SIM_LOSS
// (a comma-separated list of percentages) replaces them.
func lossRates() []float64 {
	v := os.Getenv("DETOUR_SIM_LOSS")
	if v == "" {
		return []float64{0, 0.001, 0.005, 0.01}
	}
	var out []float64
	for _, f := range strings.Split(v, ",") {
		p, err := strconv.ParseFloat(f, 64)
		if err != nil {
			panic(fmt.Sprintf("DETOUR_SIM_LOSS=%q: %v", v, err))
		}
		out = append(out, p/100)
	}
	return out
}

// lossyTriangle is A, B, C with A→C direct at direct (losing loss of its
// packets one way) and A→B→C at 10 ms + relayed; every other link is
// clean at 10 ms, with 0.3 ms jitter and clocks seconds apart.
func lossyTriangle(direct, relayed time.Duration, loss float64) *Net {
	n := New(3)
	for i, name := range []string{"A", "B", "C"} {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(name, time.Duration(i*7-5)*time.Second, boot, nil)
	}
	for _, a := range []string{"A", "B", "C"} {
		for _, b := range []string{"A", "B", "C"} {
			if a != b {
				n.SetLink(a, b, Link{Delay: 10 * ms, Jitter: 300 * time.Microsecond})
			}
		}
	}
	n.SetLink("A", "C", Link{Delay: direct, Jitter: 300 * time.Microsecond, Loss: loss})
	n.SetLink("B", "C", Link{Delay: relayed, Jitter: 300 * time.Microsecond})
	return n
}

// A link with real loss (8 % one way) is left for a path whose extra delay
// is below what the loss costs (12 ms by the model of 200 ms per lost
// packet above 2 %; 7 to 10 ms charged on the lower end of the loss's
// interval after three minutes), and kept against one that costs more;
// the reverse direction, which loses nothing, stays direct. At 5 % loss
// the charge, 2 to 4 ms, would be too close to the first case's 2 ms for
// the outcome to be the model's rather than the draw's.
func TestLossyLinkAvoidedWithinItsPrice(t *testing.T) {
	for _, c := range []struct {
		relayed time.Duration // B→C; A→B is 10 ms, A→C 20 ms
		want    []string
	}{
		{12 * ms, []string{"B", "C"}}, // 2 ms more than direct
		{35 * ms, []string{"C"}},      // 25 ms more
	} {
		n := lossyTriangle(20*ms, c.relayed, 0.08)
		start(t, n)
		n.RunFor(3 * time.Minute)
		if got := n.PathNames("A", "C"); !slices.Equal(got, c.want) {
			t.Errorf("relay %v more than direct: A→C path %v, want %v", 10*ms+c.relayed-20*ms, got, c.want)
		}
		if got := n.PathNames("C", "A"); !slices.Equal(got, []string{"A"}) {
			t.Errorf("C→A path %v, want direct (the loss is one way)", got)
		}
		why, err := n.Site("A").Node.Why(n.Site("A").Local(n.Now()), "C")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("relay %v more: A→C %v; the direct link's loss and cost: %s", 10*ms+c.relayed-20*ms, n.PathNames("A", "C"), directLoss(why))
	}
}

// directLoss describes the direct candidate of an explanation.
func directLoss(ex routing.Explanation) string {
	for _, c := range ex.Candidates {
		if len(c.Path) == 1 {
			return fmt.Sprintf("%+v", c)
		}
	}
	return "no direct candidate"
}

// A link that loses half its packets is never used once its loss is
// known (a couple of seconds of probes), however much shorter it is.
func TestHalfLossLinkNeverUsed(t *testing.T) {
	n := lossyTriangle(2*ms, 60*ms, 0.5)
	start(t, n)
	n.RunFor(3 * time.Second)
	from := len(n.Changes)
	n.RunFor(5 * time.Minute)
	if got := n.PathNames("A", "C"); !slices.Equal(got, []string{"B", "C"}) {
		t.Errorf("A→C path %v, want via B", got)
	}
	for _, c := range n.Changes[from:] {
		if c.Site == "A" && c.Dest == n.Site("C").ID && slices.Equal(c.To, []wire.SiteID{n.Site("C").ID}) {
			t.Errorf("A→C went back to the half-lossy direct link at +%v", c.At.Sub(Start))
		}
	}
}

// A site that joins an overlay running for minutes, on a lossy Internet,
// has every pair to and from it, and through it, within the bound 10 s
// after it starts, and no route changes afterwards.
func TestInternetJoinConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20-site overlay for 80 s")
	}
	in := issueInternet(20, 0.005)
	n := in.build(t, 7)
	late := n.Sites()[len(n.Sites())-1].Name
	for _, s := range n.Sites()[:len(n.Sites())-1] {
		if err := n.Start(s.Name); err != nil {
			t.Fatal(err)
		}
	}
	n.RunFor(40 * time.Second)
	if err := n.Start(late); err != nil {
		t.Fatal(err)
	}
	first := time.Duration(-1)
	for el := time.Second; el <= 10*time.Second; el += time.Second {
		n.RunFor(time.Second)
		if first < 0 && checkOracleQuiet(n, 3).violations == 0 {
			first = el
		}
	}
	rep := checkOracle(t, n, 3)
	before := len(n.Changes)
	n.RunFor(30 * time.Second)
	for _, c := range n.Changes[before:] {
		t.Errorf("route change at +%v after the join: %s→%s %v → %v", c.At.Sub(Start), c.Site, n.nameOf(c.Dest), n.names(c.From), n.names(c.To))
	}
	t.Logf("%s joined: every pair within the bound %v after it started; %d outside at 10 s", late, first, rep.violations)
}
