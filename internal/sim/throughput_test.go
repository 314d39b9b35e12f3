package sim

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/site"
	"github.com/detour-overlay/detour/internal/wire"
)

// narrowTriangle builds the triangle: A–B direct is the fastest
// (10 ms) but narrow (20 Mbit/s); through C it is 2 ms slower and
// 200 Mbit/s wide. Every link has a rate and no jitter (a train's
// dispersion is what the rate makes it).
func narrowTriangle(seed uint64, configure func(*control.Config)) *Net {
	n := New(seed)
	for i, name := range []string{"A", "B", "C"} {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(name, time.Duration(i)*1700*time.Millisecond, boot, configure)
	}
	set := func(a, b string, d time.Duration, rate float64) {
		n.SetLink(a, b, Link{Delay: d, Rate: rate})
		n.SetLink(b, a, Link{Delay: d, Rate: rate})
	}
	set("A", "B", 10*ms, 20e6)
	set("A", "C", 6*ms, 200e6)
	set("C", "B", 6*ms, 200e6)
	return n
}

// TestThroughputNarrowTriangle: the trains measure every link within 20 %
// of its rate, every site learns every link's rate, A's bulk path to B
// goes through C while its latency path stays direct, and the probe bytes
// stay within the budget.
func TestThroughputNarrowTriangle(t *testing.T) {
	n := narrowTriangle(3, nil)
	start(t, n)
	n.RunFor(30 * time.Second)
	truth := map[[2]string]float64{{"A", "B"}: 20e6, {"B", "A"}: 20e6, {"A", "C"}: 200e6, {"C", "A"}: 200e6,
		{"B", "C"}: 200e6, {"C", "B"}: 200e6}
	for _, s := range n.Sites() {
		seen := 0
		for _, l := range s.Node.Links(s.Local(n.Now())) {
			want, ok := truth[[2]string{l.From, l.To}]
			if !ok {
				continue
			}
			seen++
			if l.Rate.Rate < 0.8*want || l.Rate.Rate > 1.2*want {
				t.Errorf("at %s: %s→%s rate %.1f Mbit/s (%s), want %.0f ± 20 %%", s.Name, l.From, l.To, l.Rate.Rate/1e6, l.Rate.Kind, want/1e6)
			}
			t.Logf("at %s: %s→%s %.2f Mbit/s (%s, %v old), truth %.0f", s.Name, l.From, l.To, l.Rate.Rate/1e6, l.Rate.Kind, l.Rate.Age.Round(time.Second), want/1e6)
		}
		if seen != 6 {
			t.Errorf("%s knows %d of the 6 links", s.Name, seen)
		}
	}
	a, b := n.Site("A"), n.Site("B")
	rt, ok := a.Node.Table().Lookup(b.ID)
	if !ok || !slices.Equal(n.PathNames("A", "B"), []string{"B"}) {
		t.Fatalf("A→B latency path %v, want direct", n.PathNames("A", "B"))
	}
	if rt.Bulk == nil || !slices.Equal(rt.Bulk.Path, []wire.SiteID{n.Site("C").ID, b.ID}) {
		t.Fatalf("A→B bulk path %+v, want via C", rt.Bulk)
	}
	t.Logf("A→B: latency path direct (%.0f Mbit/s), bulk path via C (%.0f Mbit/s, %v slower)",
		rt.Bulk.PathRate/1e6, rt.Bulk.Rate/1e6, rt.Bulk.Delay-rt.Delay)
	if rt.Bulk.Rate < 160e6 || rt.Bulk.PathRate > 24e6 {
		t.Errorf("bulk figures %+v", rt.Bulk)
	}
	if r, _ := a.Node.Table().Lookup(n.Site("C").ID); r.Bulk != nil {
		t.Errorf("A→C bulk path %+v, want none (the direct path is the widest)", r.Bulk)
	}
	budget := control.DefaultThroughputConfig()
	for _, s := range n.Sites() {
		c := s.Node.Counters()
		allowed := uint64(budget.ProbeBudget)*30 + 4*uint64(budget.TrainPackets*(budget.TrainSize+28))
		t.Logf("%s: %d trains, %d probe bytes (%.0f B/s over 30 s), %d reports", s.Name, c.TrainsSent, c.ProbeBytes, float64(c.ProbeBytes)/30, c.TrainReports)
		if c.TrainsSent == 0 || c.ProbeBytes > allowed || c.TrainReports == 0 {
			t.Errorf("%s: %d trains, %d probe bytes (allowed %d), %d reports", s.Name, c.TrainsSent, c.ProbeBytes, allowed, c.TrainReports)
		}
	}
}

// TestThroughputNoTrainsWithoutBudget: a zero budget sends no trains, and
// without rates there is no bulk path.
func TestThroughputNoTrainsWithoutBudget(t *testing.T) {
	n := narrowTriangle(4, func(c *control.Config) { c.Throughput.ProbeBudget = 0 })
	start(t, n)
	n.RunFor(20 * time.Second)
	for _, s := range n.Sites() {
		if c := s.Node.Counters(); c.TrainsSent != 0 || c.ProbeBytes != 0 {
			t.Fatalf("%s sent %d trains", s.Name, c.TrainsSent)
		}
	}
	if rt, _ := n.Site("A").Node.Table().Lookup(n.Site("B").ID); rt.Bulk != nil {
		t.Fatalf("bulk path without rates: %+v", rt.Bulk)
	}
}

// TestThroughputBudget: in an overlay of 12 sites every link is measured
// within a minute although the budget allows only four trains at once
// and one more every 0.9 s, and no site spends more than the budget.
func TestThroughputBudget(t *testing.T) {
	n := New(9)
	const sites = 12
	names := make([]string, sites)
	for i := range names {
		names[i] = string(rune('a' + i))
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(names[i], 0, boot, nil)
	}
	for i, a := range names {
		for j, b := range names {
			if i != j {
				n.SetLink(a, b, Link{Delay: time.Duration(5+i+j) * ms, Rate: float64(10*(1+(i+j)%7)) * 1e6})
			}
		}
	}
	start(t, n)
	const run = 60 * time.Second
	n.RunFor(run)
	cfg := control.DefaultThroughputConfig()
	train := uint64(cfg.TrainPackets * (cfg.TrainSize + 28))
	for _, s := range n.Sites() {
		c := s.Node.Counters()
		if allowed := uint64(cfg.ProbeBudget)*uint64(run/time.Second) + 4*train; c.ProbeBytes > allowed {
			t.Errorf("%s spent %d probe bytes, more than the %d allowed", s.Name, c.ProbeBytes, allowed)
		}
		known := 0
		for _, l := range s.Node.Links(s.Local(n.Now())) {
			if l.Rate.Rate > 0 {
				known++
				want := n.LinkOf(l.From, l.To).Rate
				if l.Rate.Rate < 0.8*want || l.Rate.Rate > 1.2*want {
					t.Errorf("at %s: %s→%s %.1f Mbit/s, want %.0f", s.Name, l.From, l.To, l.Rate.Rate/1e6, want/1e6)
				}
			}
		}
		if known != sites*(sites-1) {
			t.Errorf("%s knows the rate of %d of %d links", s.Name, known, sites*(sites-1))
		}
	}
	c := n.Site("a").Node.Counters()
	t.Logf("site a: %d trains, %d probe bytes in %v (%.0f B/s; budget %d B/s)", c.TrainsSent, c.ProbeBytes, run, float64(c.ProbeBytes)/run.Seconds(), cfg.ProbeBudget)
}

// TestThroughputWithJitter: with up to 100 µs of jitter on every datagram
// (which may reorder a train's packets) the trains still measure every
// link within 20 %.
func TestThroughputWithJitter(t *testing.T) {
	n := narrowTriangle(5, nil)
	for _, a := range []string{"A", "B", "C"} {
		for _, b := range []string{"A", "B", "C"} {
			if a != b {
				l := n.LinkOf(a, b)
				l.Jitter = 100 * time.Microsecond
				n.SetLink(a, b, l)
			}
		}
	}
	start(t, n)
	n.RunFor(150 * time.Second)
	s := n.Site("C")
	for _, l := range s.Node.Links(s.Local(n.Now())) {
		want := n.LinkOf(l.From, l.To).Rate
		t.Logf("%s→%s %.1f Mbit/s (%s), truth %.0f: %+.1f %%", l.From, l.To, l.Rate.Rate/1e6, l.Rate.Kind, want/1e6, 100*(l.Rate.Rate-want)/want)
		if l.Rate.Rate < 0.8*want || l.Rate.Rate > 1.2*want {
			t.Errorf("%s→%s rate %.1f Mbit/s, want %.0f ± 20 %%", l.From, l.To, l.Rate.Rate/1e6, want/1e6)
		}
	}
}

// TestThroughputPassive: with no trains, a flow of 5 Mbit/s from A to B
// that causes no queue gives a lower bound, and a flow of 20 Mbit/s whose
// queue delays A's probes by 8 ms gives the saturated rate; both reach C
// through B's link state.
func TestThroughputPassive(t *testing.T) {
	n := narrowTriangle(6, func(c *control.Config) { c.Throughput.ProbeBudget = 0 })
	start(t, n)
	n.RunFor(10 * time.Second)
	a, c := n.Site("A"), n.Site("C")
	var total uint64
	flow := func(d time.Duration, rate float64) {
		for end := n.Now().Add(d); n.Now().Before(end); {
			n.RunFor(100 * time.Millisecond)
			total += uint64(rate / 80)
			n.Do("B", func(core *site.Core, local time.Time) { core.Control().OnDataBytes(local, a.ID, total) })
		}
	}
	rateAt := func(s *Site, from, to string) control.RateView {
		for _, l := range s.Node.Links(s.Local(n.Now())) {
			if l.From == from && l.To == to {
				return l.Rate
			}
		}
		return control.RateView{}
	}
	flow(5*time.Second, 5e6)
	n.RunFor(2 * time.Second)
	if r := rateAt(c, "A", "B"); r.Kind != "lower-bound" || r.Rate < 4.5e6 || r.Rate > 5.5e6 {
		t.Fatalf("after an unqueued 5 Mbit/s flow, C sees A→B at %+v, want a 5 Mbit/s lower bound", r)
	}
	l := n.LinkOf("A", "B")
	l.Delay += 8 * ms // the flow's standing queue
	n.SetLink("A", "B", l)
	flow(5*time.Second, 20e6)
	n.RunFor(2 * time.Second)
	if r := rateAt(c, "A", "B"); r.Kind != "saturated" || r.Rate < 19e6 || r.Rate > 21e6 {
		t.Fatalf("after a queued 20 Mbit/s flow, C sees A→B at %+v, want 20 Mbit/s saturated", r)
	}
}

// TestThroughputLanman2017: on the lanman2017 scenario's links (2.4 to
// 18 Mbit/s, asymmetric) every site's estimate of every link is within
// 20 % of the scenario's rate.
func TestThroughputLanman2017(t *testing.T) {
	n := FromScenario(load(t, "lanman2017"), 11, nil).WithRates(load(t, "lanman2017"))
	start(t, n)
	const run = 90 * time.Second
	n.RunFor(run)
	worst := 0.0
	for _, s := range n.Sites() {
		known := 0
		for _, l := range s.Node.Links(s.Local(n.Now())) {
			want := n.LinkOf(l.From, l.To).Rate
			e := (l.Rate.Rate - want) / want
			worst = max(worst, e, -e)
			if l.Rate.Rate > 0 {
				known++
			}
			if s.Name == "BOR" {
				t.Logf("%s→%s %.2f Mbit/s (%s), truth %.1f: %+.1f %%", l.From, l.To, l.Rate.Rate/1e6, l.Rate.Kind, want/1e6, 100*e)
			}
			if e > 0.2 || e < -0.2 {
				t.Errorf("at %s: %s→%s %.2f Mbit/s, truth %.1f", s.Name, l.From, l.To, l.Rate.Rate/1e6, want/1e6)
			}
		}
		if known != 12 {
			t.Errorf("%s knows %d of 12 links", s.Name, known)
		}
		c := s.Node.Counters()
		t.Logf("%s: %d trains, %d probe bytes in %v (%.0f B/s)", s.Name, c.TrainsSent, c.ProbeBytes, run, float64(c.ProbeBytes)/run.Seconds())
	}
	t.Logf("largest error %.1f %%", 100*worst)
}

// TestLateHandlingMeasuresTheWire: sites whose shells hand every datagram
// to the core 30 ms after reading it, ticks running meanwhile (a busy
// gateway's control loop), measure what a prompt site measures: the round
// trips, the mean one-way delays and the trains' rates, since the core
// measures with the time a datagram was read, not the time it was
// handled.
func TestLateHandlingMeasuresTheWire(t *testing.T) {
	n := narrowTriangle(5, nil)
	for _, s := range n.Sites() {
		s.HandleLag = 30 * ms
	}
	start(t, n)
	n.RunFor(30 * time.Second)
	truth := map[[2]string]float64{{"A", "B"}: 20e6, {"B", "A"}: 20e6, {"A", "C"}: 200e6, {"C", "A"}: 200e6,
		{"B", "C"}: 200e6, {"C", "B"}: 200e6}
	for _, s := range n.Sites() {
		for _, l := range s.Node.Links(s.Local(n.Now())) {
			if l.From != s.Name {
				continue
			}
			want := 2 * n.LinkOf(l.From, l.To).Delay
			t.Logf("at %s: %s→%s RTT %v (wire %v), mean one-way %v against %v, rate %.1f Mbit/s (%s)",
				s.Name, l.From, l.To, l.RTT, want, l.MeanDelay, l.Delay, l.Rate.Rate/1e6, l.Rate.Kind)
			if l.RTT < want || l.RTT > want+ms/2 {
				t.Errorf("at %s: %s→%s RTT %v, want the wire's %v within 0.5 ms", s.Name, l.From, l.To, l.RTT, want)
			}
			if d := l.MeanDelay - l.Delay; d < 0 || d > ms/2 {
				t.Errorf("at %s: %s→%s mean one-way delay %v above its floor %v, want within 0.5 ms", s.Name, l.From, l.To, l.MeanDelay, l.Delay)
			}
		}
		for _, l := range s.Node.Links(s.Local(n.Now())) {
			if want := truth[[2]string{l.From, l.To}]; l.Rate.Rate < 0.8*want || l.Rate.Rate > 1.2*want {
				t.Errorf("at %s: %s→%s rate %.1f Mbit/s (%s), want %.0f ± 20 %%", s.Name, l.From, l.To, l.Rate.Rate/1e6, l.Rate.Kind, want/1e6)
			}
		}
	}
}
