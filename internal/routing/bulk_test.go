package routing

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// rated is a test network with a rate per directed link (bits/s, 0 =
// unknown): site 1 is the source, the others are numbered from 2.
type rated struct {
	n     int
	delay map[[2]int]time.Duration
	rate  map[[2]int]float64
}

func newRated(n int) *rated {
	return &rated{n: n, delay: map[[2]int]time.Duration{}, rate: map[[2]int]float64{}}
}

// link sets both directions of a link.
func (t *rated) link(a, b int, d time.Duration, rate float64) {
	t.delay[[2]int{a, b}], t.delay[[2]int{b, a}] = d, d
	t.rate[[2]int{a, b}], t.rate[[2]int{b, a}] = rate, rate
}

func (t *rated) matrix() *Matrix {
	m := NewMatrix(ids(t.n))
	for k, d := range t.delay {
		m.Set(wire.SiteID(k[0]), wire.SiteID(k[1]), Edge{Delay: d, RTT: 2 * d, Rate: t.rate[k], RateKind: wire.RateKindTrain})
	}
	return m
}

// narrowTriangle: 1 → 2 direct is the fastest (10 ms) but 20 Mbit/s; the
// relay 3 is 2 ms slower and 200 Mbit/s.
func narrowTriangle() *rated {
	t := newRated(3)
	t.link(1, 2, 10*ms, 20e6)
	t.link(1, 3, 6*ms, 200e6)
	t.link(3, 2, 6*ms, 200e6)
	return t
}

// bulkRun drives a router of DefaultConfig over a test network, one
// route computation every 100 ms.
type bulkRun struct {
	r   *Router
	tr  *rated
	now time.Time
}

// settledBulkRun returns a run over tr after MinSwitchInterval and a
// second, so that its first choices damp none of the next.
func settledBulkRun(tr *rated) *bulkRun {
	b := &bulkRun{r: NewRouter(DefaultConfig(), 1), tr: tr, now: t0}
	b.update(DefaultConfig().MinSwitchInterval + time.Second)
	return b
}

// update runs the router on for d.
func (b *bulkRun) update(d time.Duration) {
	for end := b.now.Add(d); b.now.Before(end); b.now = b.now.Add(100 * ms) {
		b.r.Update(b.now, b.tr.matrix(), addrsOf(3))
	}
}

func bulkOf(t *testing.T, r *Router, dst wire.SiteID) *BulkPath {
	t.Helper()
	rt, ok := r.Table().Lookup(dst)
	if !ok {
		t.Fatalf("no route to %v", dst)
	}
	return rt.Bulk
}

func TestBulkNarrowDirectWideRelay(t *testing.T) {
	r := NewRouter(DefaultConfig(), 1)
	r.Update(t0, narrowTriangle().matrix(), addrsOf(3))
	rt, _ := r.Table().Lookup(2)
	if !slices.Equal(rt.Path, []wire.SiteID{2}) {
		t.Fatalf("latency path %v, want direct", rt.Path)
	}
	b := rt.Bulk
	if b == nil || !slices.Equal(b.Path, []wire.SiteID{3, 2}) {
		t.Fatalf("bulk path %+v, want via 3", b)
	}
	if b.Rate != 200e6 || b.PathRate != 20e6 || b.Delay != 12*ms || b.FirstHop != addrsOf(3)[3] {
		t.Fatalf("bulk figures %+v", b)
	}
	// The destination 3 is itself wide and fastest direct: no bulk path.
	if b := bulkOf(t, r, 3); b != nil {
		t.Fatalf("bulk path to 3: %+v", b)
	}
	ex := r.Why(t0, 2)
	if !slices.Equal(ex.Bulk.Chosen, []wire.SiteID{3, 2}) || len(ex.Bulk.Candidates) < 2 || ex.Bulk.Candidates[0].Rate != 200e6 ||
		!ex.Bulk.Candidates[0].Chosen || ex.Bulk.Reason == "" || ex.Bulk.Bound != 10*ms {
		t.Fatalf("why: %+v", ex.Bulk)
	}
}

func TestBulkBoundRespected(t *testing.T) {
	tr := narrowTriangle()
	tr.link(3, 2, 15*ms, 200e6) // the relay is now 11 ms slower: beyond max(10 ms, 25 % of 20 ms)
	r := NewRouter(DefaultConfig(), 1)
	r.Update(t0, tr.matrix(), addrsOf(3))
	if b := bulkOf(t, r, 2); b != nil {
		t.Fatalf("bulk path beyond the bound: %+v", b)
	}
	// A larger fraction of the round trip allows it.
	cfg := DefaultConfig()
	cfg.Bulk.BoundFraction = 0.6
	r = NewRouter(cfg, 1)
	r.Update(t0, tr.matrix(), addrsOf(3))
	if b := bulkOf(t, r, 2); b == nil || !slices.Equal(b.Path, []wire.SiteID{3, 2}) {
		t.Fatalf("bulk path within 60 %% of the round trip: %+v", b)
	}
}

func TestBulkNeedsMinGainAndKnownRates(t *testing.T) {
	tr := narrowTriangle()
	tr.link(1, 3, 6*ms, 25e6) // the relay's bottleneck is only 1.25× wider
	r := NewRouter(DefaultConfig(), 1)
	r.Update(t0, tr.matrix(), addrsOf(3))
	if b := bulkOf(t, r, 2); b != nil {
		t.Fatalf("bulk path for a 1.25× gain: %+v", b)
	}
	tr = narrowTriangle()
	tr.rate[[2]int{1, 2}] = 0 // the direct link's rate unknown
	r = NewRouter(DefaultConfig(), 1)
	r.Update(t0, tr.matrix(), addrsOf(3))
	if b := bulkOf(t, r, 2); b != nil {
		t.Fatalf("bulk path with the latency path's rate unknown: %+v", b)
	}
	cfg := DefaultConfig()
	cfg.Bulk.Enabled = false
	r = NewRouter(cfg, 1)
	r.Update(t0, narrowTriangle().matrix(), addrsOf(3))
	if b := bulkOf(t, r, 2); b != nil {
		t.Fatalf("bulk path with bulk routing off: %+v", b)
	}
}

// TestBulkLeavesLatencyRoutingAlone: the latency paths chosen with rates
// are the ones chosen without, on random matrices.
func TestBulkLeavesLatencyRoutingAlone(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 30; trial++ {
		tr := newRated(6)
		for a := 1; a <= 6; a++ {
			for b := a + 1; b <= 6; b++ {
				tr.link(a, b, time.Duration(1+rng.IntN(40))*ms, float64(1+rng.IntN(500))*1e6)
			}
		}
		with := NewRouter(DefaultConfig(), 1)
		with.Update(t0, tr.matrix(), addrsOf(6))
		m := tr.matrix()
		for i := range m.edges {
			m.edges[i].Rate = 0
		}
		without := NewRouter(DefaultConfig(), 1)
		without.Update(t0, m, addrsOf(6))
		for dst := wire.SiteID(2); dst <= 6; dst++ {
			a, _ := with.Table().Lookup(dst)
			b, _ := without.Table().Lookup(dst)
			if !slices.Equal(a.Path, b.Path) || b.Bulk != nil {
				t.Fatalf("trial %d dst %v: path %v with rates, %v without (bulk %+v)", trial, dst, a.Path, b.Path, b.Bulk)
			}
			if a.Bulk != nil {
				pm, _ := m.Measure(DefaultWeights(), 1, a.Path)
				if a.Bulk.Delay-a.Delay > max(10*ms, pm.RTT/4) || a.Bulk.Rate < 1.5*a.Bulk.PathRate {
					t.Fatalf("trial %d dst %v: bulk %+v breaks the bound or the gain over %v", trial, dst, a.Bulk, a.Delay)
				}
			}
		}
	}
}

// TestBulkDoesNotFlap: two wide relays within 10 % of each other, with
// rates that jitter by ±15 % at every update, and a third path whose gain
// hovers around MinGain: the bulk path is chosen once and kept.
func TestBulkDoesNotFlap(t *testing.T) {
	tr := newRated(4)
	tr.link(1, 2, 10*ms, 20e6)
	tr.link(1, 3, 6*ms, 200e6)
	tr.link(3, 2, 6*ms, 200e6)
	tr.link(1, 4, 6*ms, 190e6)
	tr.link(4, 2, 6*ms, 190e6)
	tr.link(3, 4, 50*ms, 1e9)
	rng := rand.New(rand.NewPCG(1, 2))
	r := NewRouter(DefaultConfig(), 1)
	var first []wire.SiteID
	changes := 0
	now := t0
	for i := 0; i < 300; i++ {
		m := tr.matrix()
		for k := range m.edges {
			m.edges[k].Rate *= 0.85 + 0.3*rng.Float64()
		}
		r.Update(now, m, addrsOf(4))
		b := bulkOf(t, r, 2)
		if b == nil {
			t.Fatalf("update %d: no bulk path", i)
		}
		if first == nil {
			first = b.Path
		} else if !slices.Equal(first, b.Path) {
			changes++
			first = b.Path
		}
		now = now.Add(100 * ms)
	}
	if changes > 0 {
		t.Fatalf("the bulk path changed %d times on rate noise", changes)
	}

	// A relay whose gain hovers between 1.3× and 1.7× of the direct path:
	// once chosen (at 1.5× or more) it stays.
	tr = newRated(3)
	tr.link(1, 2, 10*ms, 20e6)
	tr.link(1, 3, 6*ms, 30e6)
	tr.link(3, 2, 6*ms, 30e6)
	r = NewRouter(DefaultConfig(), 1)
	had, flips := false, 0
	for i := 0; i < 300; i++ {
		m := tr.matrix()
		g := 1.3 + 0.4*rng.Float64()
		for k := range m.edges {
			if m.edges[k].Rate == 30e6 {
				m.edges[k].Rate = g * 20e6
			}
		}
		r.Update(now, m, addrsOf(3))
		has := bulkOf(t, r, 2) != nil
		if had && !has {
			flips++
		}
		had = had || has
		now = now.Add(100 * ms)
	}
	if !had || flips > 0 {
		t.Fatalf("bulk path chosen %v, dropped %d times on noise around the gain", had, flips)
	}
}

func TestBulkFollowsRealChangesAndDeath(t *testing.T) {
	tr := newRated(4)
	tr.link(1, 2, 10*ms, 20e6)
	tr.link(1, 3, 6*ms, 200e6)
	tr.link(3, 2, 6*ms, 200e6)
	tr.link(1, 4, 6*ms, 100e6)
	tr.link(4, 2, 6*ms, 100e6)
	r := NewRouter(DefaultConfig(), 1)
	now := t0
	r.Update(now, tr.matrix(), addrsOf(4))
	if b := bulkOf(t, r, 2); b == nil || b.Path[0] != 3 {
		t.Fatalf("bulk %+v, want via 3", b)
	}
	// Relay 4 becomes four times wider: followed, after the damping.
	tr.link(1, 4, 6*ms, 800e6)
	tr.link(4, 2, 6*ms, 800e6)
	r.Update(now.Add(time.Second), tr.matrix(), addrsOf(4))
	if b := bulkOf(t, r, 2); b.Path[0] != 3 {
		t.Fatalf("bulk path changed within the damping interval: %+v", b)
	}
	now = now.Add(11 * time.Second)
	r.Update(now, tr.matrix(), addrsOf(4))
	if b := bulkOf(t, r, 2); b == nil || b.Path[0] != 4 {
		t.Fatalf("bulk %+v, want via 4", b)
	}
	// Relay 4 dies: the bulk path moves at once, damping or not.
	delete(tr.delay, [2]int{4, 2})
	now = now.Add(time.Second)
	r.Update(now, tr.matrix(), addrsOf(4))
	if b := bulkOf(t, r, 2); b == nil || b.Path[0] != 3 {
		t.Fatalf("after relay 4 died: bulk %+v, want via 3", b)
	}
}

// benchUpdate times a route computation over n sites with (or without)
// rates on every link.
func benchUpdate(b *testing.B, n int, rates bool) {
	rng := rand.New(rand.NewPCG(1, 1))
	tr := newRated(n)
	for i := 1; i <= n; i++ {
		for j := i + 1; j <= n; j++ {
			rate := 0.0
			if rates {
				rate = float64(1+rng.IntN(500)) * 1e6
			}
			tr.link(i, j, time.Duration(1+rng.IntN(50))*ms, rate)
		}
	}
	m := tr.matrix()
	r := NewRouter(DefaultConfig(), 1)
	now := t0
	b.ResetTimer()
	for range b.N {
		now = now.Add(100 * ms)
		r.Update(now, m, addrsOf(n))
	}
}

func BenchmarkUpdate20(b *testing.B)      { benchUpdate(b, 20, false) }
func BenchmarkUpdate20Rated(b *testing.B) { benchUpdate(b, 20, true) }
func BenchmarkUpdate32(b *testing.B)      { benchUpdate(b, 32, false) }
func BenchmarkUpdate32Rated(b *testing.B) { benchUpdate(b, 32, true) }
func BenchmarkUpdate48(b *testing.B)      { benchUpdate(b, 48, false) }
func BenchmarkUpdate48Rated(b *testing.B) { benchUpdate(b, 48, true) }
func BenchmarkUpdate80(b *testing.B)      { benchUpdate(b, 80, false) }
func BenchmarkUpdate80Rated(b *testing.B) { benchUpdate(b, 80, true) }

// A bulk path in use whose delay grows beyond the bound, as when the
// transfer on it fills its bottleneck's queue, is kept; a path that was
// never chosen is still judged by the bound.
func TestBulkKeptWhenItsOwnQueueGrows(t *testing.T) {
	tr := narrowTriangle()
	r := NewRouter(DefaultConfig(), 1)
	r.Update(t0, tr.matrix(), addrsOf(3))
	if b := bulkOf(t, r, 2); b == nil || b.Path[0] != 3 {
		t.Fatalf("bulk %+v, want via 3", b)
	}
	tr.link(3, 2, 18*ms, 170e6) // 11.5 ms of queue on the relay's link
	r.Update(t0.Add(time.Second), tr.matrix(), addrsOf(3))
	if b := bulkOf(t, r, 2); b == nil || b.Path[0] != 3 {
		t.Fatalf("bulk path left when its own queue grew: %+v", b)
	}
	fresh := NewRouter(DefaultConfig(), 1)
	fresh.Update(t0, tr.matrix(), addrsOf(3))
	if b := bulkOf(t, fresh, 2); b != nil {
		t.Fatalf("a path beyond the bound chosen: %+v", b)
	}
}

// TestBulkPathBackWhenTheLatencyPathLeavesIt: the narrow direct link
// collapses (a flow filled it before it became bulk) and the latency path
// moves onto the bulk path; when the direct link drains and the latency
// path goes back to it, the bulk path is the relay again at once, not
// after the flap damping, so the bulk flows never follow the latency path
// onto the narrow link.
func TestBulkPathBackWhenTheLatencyPathLeavesIt(t *testing.T) {
	tr := narrowTriangle()
	run := settledBulkRun(tr)
	r, update := run.r, run.update
	if b := bulkOf(t, r, 2); b == nil || b.Path[0] != 3 {
		t.Fatalf("bulk %+v, want via 3", b)
	}
	tr.link(1, 2, 60*ms, 20e6) // the queue of the narrow link filled
	update(time.Second)
	rt, _ := r.Table().Lookup(2)
	if !slices.Equal(rt.Path, []wire.SiteID{3, 2}) || rt.Bulk != nil {
		t.Fatalf("latency path %v, bulk %+v; want the relay, with the bulk flows on it", rt.Path, rt.Bulk)
	}
	r.BulkMoved(run.now, 2) // the flow that filled it became bulk
	tr.link(1, 2, 10*ms, 20e6)
	update(time.Second)
	rt, _ = r.Table().Lookup(2)
	if !slices.Equal(rt.Path, []wire.SiteID{2}) || rt.Bulk == nil || !slices.Equal(rt.Bulk.Path, []wire.SiteID{3, 2}) {
		t.Fatalf("latency path %v, bulk %+v; want direct, and the bulk flows still via 3", rt.Path, rt.Bulk)
	}
}

// lanman2017's LAN → NEU: the direct path (15 ms, 11 Mbit/s) is the
// fastest and the widest, so it is the latency path and the bulk flows'
// too. A transfer fills its queue; the latency path leaves for the relay
// BOR (28 ms, 2.4 Mbit/s), and the direct path, 33 ms above its best,
// is then out of any bound a new bulk path must meet. It stays the bulk
// path: the bulk flows were on it a moment ago, and following the latency
// path would put them on a link a fifth as wide.
func TestBulkFlowsKeepTheCollapsedLatencyPath(t *testing.T) {
	tr := newRated(3)
	tr.link(1, 2, 15*ms, 11e6)
	tr.link(1, 3, 18*ms, 14e6)
	tr.link(3, 2, 10*ms, 2.4e6)
	run := settledBulkRun(tr)
	r, update := run.r, run.update
	if rt, _ := r.Table().Lookup(2); !slices.Equal(rt.Path, []wire.SiteID{2}) || rt.Bulk != nil {
		t.Fatalf("latency path %v, bulk %+v; want both direct", rt.Path, rt.Bulk)
	}
	tr.link(1, 2, 48*ms, 11e6) // the transfer's queue
	update(time.Second)
	rt, _ := r.Table().Lookup(2)
	if !slices.Equal(rt.Path, []wire.SiteID{3, 2}) {
		t.Fatalf("latency path %v, want the relay", rt.Path)
	}
	if rt.Bulk == nil || !slices.Equal(rt.Bulk.Path, []wire.SiteID{2}) {
		t.Fatalf("bulk %+v, want the direct path kept (%s)", rt.Bulk, r.dests[2].bulkReason)
	}
}

// TestBulkFlowsKeepTheMergedPathWhenTheLatencyPathLeaves: on the loaded
// testbed the narrow direct link's delay rose while the bulk flows ran on
// the relay, the latency path moved onto the relay (the two paths
// merged), and went back once the direct link was faster again. By then
// the relay carried the transfer's queue, beyond the bound a new bulk
// path must meet; it stays the bulk path all the same, since the bulk
// flows are on it, rather than following the latency path onto a link a
// tenth as wide.
func TestBulkFlowsKeepTheMergedPathWhenTheLatencyPathLeaves(t *testing.T) {
	tr := narrowTriangle()
	run := settledBulkRun(tr)
	r, update := run.r, run.update
	if b := bulkOf(t, r, 2); b == nil || b.Path[0] != 3 {
		t.Fatalf("bulk %+v, want via 3", b)
	}
	tr.link(1, 2, 40*ms, 20e6) // the direct link's delay rises
	update(time.Second)
	rt, _ := r.Table().Lookup(2)
	if !slices.Equal(rt.Path, []wire.SiteID{3, 2}) || rt.Bulk != nil {
		t.Fatalf("latency path %v, bulk %+v; want the relay, with the bulk flows on it", rt.Path, rt.Bulk)
	}
	tr.link(1, 2, 10*ms, 20e6)
	tr.link(3, 2, 18*ms, 170e6) // the transfer's queue on the relay's link, seen at once
	update(DefaultConfig().MinSwitchInterval + time.Second)
	rt, _ = r.Table().Lookup(2)
	if !slices.Equal(rt.Path, []wire.SiteID{2}) || rt.Bulk == nil || !slices.Equal(rt.Bulk.Path, []wire.SiteID{3, 2}) {
		t.Fatalf("latency path %v, bulk %+v (%s); want direct, and the bulk flows still via 3", rt.Path, rt.Bulk, r.dests[2].bulkReason)
	}
}

// TestBulkPathBackAfterAMomentLost: the relay carrying the bulk flows,
// beyond the bound with their queue, loses its rate for a moment (on a
// loaded machine: a relay in doubt, a rate not refreshed); when it is
// usable again it is the bulk path again, not the narrow latency path;
// and a path lost for longer than bulkLostWindow must meet the bound
// again.
func TestBulkPathBackAfterAMomentLost(t *testing.T) {
	tr := narrowTriangle()
	run := settledBulkRun(tr)
	r, update := run.r, run.update
	tr.link(3, 2, 18*ms, 170e6) // the transfer's queue
	update(time.Second)
	for _, lost := range []time.Duration{300 * ms, bulkLostWindow + time.Second} {
		if b := bulkOf(t, r, 2); b == nil || b.Path[0] != 3 {
			t.Fatalf("bulk %+v before the loss, want via 3", b)
		}
		tr.link(3, 2, 18*ms, 0) // the relay's rate unknown
		update(lost)
		if b := bulkOf(t, r, 2); b != nil {
			t.Fatalf("bulk %+v while the relay's rate is unknown", b)
		}
		tr.link(3, 2, 18*ms, 170e6)
		update(time.Second)
		b := bulkOf(t, r, 2)
		if lost < bulkLostWindow && (b == nil || b.Path[0] != 3) {
			t.Fatalf("bulk %+v after %v lost (%s), want via 3 again", b, lost, r.dests[2].bulkReason)
		}
		if lost > bulkLostWindow && b != nil {
			t.Fatalf("bulk %+v after %v lost, beyond the bound", b, lost)
		}
		tr.link(3, 2, 6*ms, 200e6) // the queue drains: chosen again
		update(DefaultConfig().MinSwitchInterval + time.Second)
		tr.link(3, 2, 18*ms, 170e6)
		update(time.Second)
	}
}
