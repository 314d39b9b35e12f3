package replica

import (
	"testing"
)

const ms = int64(1e6)

func TestClass(t *testing.T) {
	for _, c := range []struct{ n, class int }{
		{0, 0}, {1024, 0}, {1025, 1}, {4096, 1}, {4097, 2}, {16384, 2}, {65536, 3},
		{65537, 4}, {262144, 4}, {1 << 20, 5}, {1<<20 + 1, 6}, {1 << 30, 6},
	} {
		if got := Class(c.n); got != c.class {
			t.Errorf("Class(%d) = %d, want %d", c.n, got, c.class)
		}
	}
	if ClassLimit(0) != 1024 || ClassLimit(5) != 1<<20 || Class(ClassLimit(3)) != 3 {
		t.Errorf("ClassLimit: %d %d", ClassLimit(0), ClassLimit(5))
	}
}

func TestParsePolicy(t *testing.T) {
	for _, s := range []string{"predicted", "local-first", "static-zone", "nearest-rtt"} {
		p, err := ParsePolicy(s)
		if err != nil || p.String() != s {
			t.Errorf("ParsePolicy(%q) = %v, %v", s, p, err)
		}
	}
	if _, err := ParsePolicy("fastest"); err == nil {
		t.Error("unknown policy accepted")
	}
}

// observe feeds replica i n replies of size bytes whose first datagram
// arrives rtt+svc after sending, with dgms datagrams spread at thr bytes/s.
func observe(c *Chooser, i, n, size int, svc int64, thr float64, now int64) {
	r := &c.Replicas[i]
	for k := 0; k < n; k++ {
		dgms := max(1, (size+1399)/1400)
		first := now + r.RTT + svc
		last := first
		firstBytes := min(size, 1400)
		if dgms > 1 {
			last = first + int64(float64(size-firstBytes)/thr*1e9)
		}
		c.Sent(i)
		c.Observe(i, Reply{Sent: now, First: first, Last: last, Bytes: size, FirstBytes: firstBytes, Dgms: dgms}, last)
	}
}

// The prediction is RTT + S + queue + size/throughput, each part as
// observed.
func TestPredict(t *testing.T) {
	c := New(Predicted, DefaultParams(), 2, nil)
	c.Replicas[1].RTT = 10 * ms
	observe(c, 1, 20, 100000, 2*ms, 20e6, 0)
	p := c.Predict(1, 100000)
	if p.RTT != 10*ms || p.Service != 2*ms || p.Queue != 0 || p.Class != 4 || p.Samples != 20 {
		t.Errorf("prediction %+v", p)
	}
	if p.Throughput < 19.9e6 || p.Throughput > 20.1e6 {
		t.Errorf("throughput %.0f, want 20e6", p.Throughput)
	}
	if want := 100000 * int64(1e9) / 20e6; p.Transfer < want*99/100 || p.Transfer > want*101/100 {
		t.Errorf("transfer %d, want %d", p.Transfer, want)
	}
	if p.Total != p.RTT+p.Service+p.Queue+p.Transfer {
		t.Errorf("total %d is not the sum of the parts", p.Total)
	}
	// Another class borrows the nearest class with samples.
	if q := c.Predict(1, 2000); q.Service != 2*ms || q.Samples != 0 || q.From != 4 {
		t.Errorf("borrowed prediction %+v", q)
	}
	// Unknown replica: service 0, default throughput.
	if q := c.Predict(0, 10e6); q.From != -1 || q.Service != 0 || q.Throughput != 10e6 || q.Transfer != int64(1e9) {
		t.Errorf("unknown replica %+v", q)
	}
	// Outstanding requests: linear penalty S × q / Concurrency.
	for k := 0; k < 8; k++ {
		c.Sent(1)
	}
	if q := c.Predict(1, 100000); q.Queue != 4*ms {
		t.Errorf("queue penalty for 8 outstanding = %d, want 4 ms", q.Queue)
	}
	c.Params.QueueExp = 3 // C3's cubic: ((1 + 8/4)^3 − 1) × 2 ms
	if q := c.Predict(1, 100000); q.Queue != 52*ms {
		t.Errorf("cubic queue penalty = %d, want 52 ms", q.Queue)
	}
	for k := 0; k < 10; k++ {
		c.GiveUp(1)
	}
	if c.Replicas[1].Outstanding() != 0 {
		t.Errorf("outstanding %d after giving up", c.Replicas[1].Outstanding())
	}
}

// The service time excludes the path's round trip; the estimate is the
// median of the last 8 samples: an outlier does not move it, a lasting
// change does after 5 samples.
func TestObserveMedian(t *testing.T) {
	c := New(Predicted, DefaultParams(), 1, nil)
	c.Replicas[0].RTT = 30 * ms
	observe(c, 0, 1, 500, 4*ms, 1e6, 0)
	observe(c, 0, 1, 500, 8*ms, 1e6, 0)
	if s := c.Stats(0, 0, 0); s.Median != 6*ms || s.Samples != 2 {
		t.Errorf("after 4 and 8 ms: %+v, want median 6 ms", s)
	}
	observe(c, 0, 6, 500, 4*ms, 1e6, 0)
	observe(c, 0, 1, 500, 40*ms, 1e6, 0) // one slow request
	if s := c.Stats(0, 0, 0); s.Median != 4*ms {
		t.Errorf("after an outlier: median %d, want 4 ms", s.Median)
	}
	if w, _ := c.HedgeAfter(0, 500); w < 30*ms+4*ms+2*ms {
		t.Errorf("the outlier did not widen the hedge's wait: %d", w)
	}
	// The service time rises to 20 ms: with the outlier, 4 slow samples
	// of 8 put the median half way, 5 move it.
	observe(c, 0, 3, 500, 20*ms, 1e6, 0)
	if s := c.Stats(0, 0, 0); s.Median != 12*ms {
		t.Errorf("4 slow samples of 8: median %d, want 12 ms", s.Median)
	}
	observe(c, 0, 1, 500, 20*ms, 1e6, 0)
	if s := c.Stats(0, 0, 0); s.Median != 20*ms {
		t.Errorf("5 slow samples of 8: median %d, want 20 ms", s.Median)
	}
	// A reply before the RTT is over (the RTT estimate ran high) counts 0.
	c2 := New(Predicted, DefaultParams(), 1, nil)
	c2.Replicas[0].RTT = 30 * ms
	c2.Observe(0, Reply{Sent: 0, First: 20 * ms, Last: 20 * ms, Bytes: 10, FirstBytes: 10, Dgms: 1}, 20*ms)
	if s := c2.Stats(0, 0, 0); s.Median != 0 || s.Samples != 1 {
		t.Errorf("negative service time kept: %+v", s)
	}
}

// tiers builds the paper's case: a local disk (slow to start, fast
// bridge), a nearby memory replica (a few ms away, slower path) and a
// remote memory replica, each observed in every size class.
func tiers() *Chooser {
	c := New(Predicted, DefaultParams(), 3, nil)
	c.Replicas[0].Local = true
	c.Replicas[1].RTT, c.Replicas[1].Near = 3*ms, true
	c.Replicas[2].RTT = 60 * ms
	for cl := 0; cl < NumClasses-1; cl++ {
		size := ClassLimit(cl)
		observe(c, 0, 8, size, 8*ms, 100e6, 0)
		observe(c, 1, 8, size, ms/10, 20e6, 0)
		observe(c, 2, 8, size, ms/10, 20e6, 0)
	}
	return c
}

// The argmin takes nearby memory for small values and the local disk
// again from the size class where the WAN transfer costs more than the
// disk's access time (about 122 KB here: 8 ms + s/100 MB/s = 3.1 ms +
// s/20 MB/s).
func TestChooseSizeWhereDiskWinsAgain(t *testing.T) {
	c := tiers()
	want := []int{1, 1, 1, 1, 0, 0}
	for cl, w := range want {
		size := ClassLimit(cl)
		d := c.Choose(size, 0)
		if d.Primary != w {
			t.Errorf("size %d: chose %d, want %d (predictions %d %d %d)", size, d.Primary, w,
				c.Predict(0, size).Total, c.Predict(1, size).Total, c.Predict(2, size).Total)
		}
	}
	// A dead replica is never chosen.
	c.Replicas[1].Usable = false
	if d := c.Choose(1000, 0); d.Primary != 0 {
		t.Errorf("with nearby down: chose %d", d.Primary)
	}
	for i := range c.Replicas {
		c.Replicas[i].Usable = false
	}
	if d := c.Choose(1000, 0); d.Primary != -1 || d.Explore != -1 {
		t.Errorf("nothing usable: %+v", d)
	}
}

// Each static policy picks as documented, whatever the estimates say.
func TestStaticPolicies(t *testing.T) {
	for _, c := range []struct {
		policy Policy
		down   []int
		want   int
	}{
		{LocalFirst, nil, 0},
		{LocalFirst, []int{0}, 1}, // then the nearest: nearby (3 ms) before remote
		{StaticZone, nil, 0},
		{StaticZone, []int{0}, 3}, // then the near zone, although farther than 1
		{StaticZone, []int{0, 3}, 1},
		{NearestRTT, nil, 0},
		{NearestRTT, []int{0}, 1},
		{NearestRTT, []int{0, 1}, 3},
	} {
		ch := tiers()
		ch.Policy = c.policy
		ch.Replicas[1].Near = false
		ch.Replicas = append(ch.Replicas, Replica{Usable: true, RTT: 20 * ms, Near: true, Path: &Path{}})
		for _, i := range c.down {
			ch.Replicas[i].Usable = false
		}
		d := ch.Choose(1000, 0)
		if d.Primary != c.want || d.Explore != -1 {
			t.Errorf("%v with %v down: %+v, want primary %d and no exploration", c.policy, c.down, d, c.want)
		}
		if _, ok := ch.HedgeAfter(d.Primary, 1000); ok {
			t.Errorf("%v hedges", c.policy)
		}
	}
}

// A replica down with a readmission trial armed gets a copy of the next
// read under every policy, without an exploration token and before any
// stale estimate; it takes the read itself only when no replica is
// usable. A replica down without a trial gets nothing.
func TestTrialCopy(t *testing.T) {
	for _, policy := range []Policy{Predicted, LocalFirst, StaticZone, NearestRTT} {
		c := tiers()
		c.Policy = policy
		c.Budget.exploreT = 0
		c.Replicas[2].Usable = false
		if d := c.Choose(1000, 0); d.Explore != -1 {
			t.Errorf("%v: a copy to a replica down without a trial: %+v", policy, d)
		}
		c.Replicas[2].Trial = true
		if d := c.Choose(1000, 0); d.Primary != c.Pick(1000) || d.Primary == 2 || d.Explore != 2 {
			t.Errorf("%v: with replica 2 on trial: %+v, want its copy beside primary %d", policy, d, c.Pick(1000))
		}
		c.Replicas[0].Usable, c.Replicas[1].Usable = false, false
		if d := c.Choose(1000, 0); d.Primary != 2 || d.Explore != -1 {
			t.Errorf("%v: nothing usable but replica 2 on trial: %+v", policy, d)
		}
		c.Replicas[2].Trial = false
		if d := c.Choose(1000, 0); d.Primary != -1 || d.Explore != -1 {
			t.Errorf("%v: nothing usable and no trial: %+v", policy, d)
		}
	}
}

// Exploration keeps the other replicas' estimates fresh but stays within
// its budget: ExploreRate per second + ExploreShare per read + the burst.
func TestExplorationBound(t *testing.T) {
	c := tiers()
	p := c.Params
	const reads, every = 20000, ms // 1,000 reads/s for 20 s
	last := [3]int64{}
	var maxGap int64
	for k := int64(0); k < reads; k++ {
		now := k * every
		d := c.Choose(1000, now)
		observe(c, d.Primary, 1, 1000, []int64{8 * ms, ms / 10, ms / 10}[d.Primary], 20e6, now) // as in tiers()
		if d.Explore >= 0 {
			if gap := now - last[d.Explore]; last[d.Explore] != 0 && gap > maxGap {
				maxGap = gap
			}
			last[d.Explore] = now
			c.GiveUp(d.Explore)
			c.Replicas[d.Explore].svc[0].at = now
			c.Replicas[d.Explore].svc[0].n++
		}
	}
	bound := p.ExploreRate*float64(reads*every)/1e9 + p.ExploreShare*reads + p.ExploreBurst
	t.Logf("%d explorations over %d reads (bound %.0f), longest gap %d ms", c.Budget.Explored, reads, bound, maxGap/ms)
	if got := float64(c.Budget.Explored); got > bound || got == 0 {
		t.Errorf("%v explorations over %d reads, bound %.0f", got, reads, bound)
	}
	if maxGap > 2*p.ExploreAge {
		t.Errorf("a replica went %d ms without a sample; ExploreAge is %d ms", maxGap/ms, p.ExploreAge/ms)
	}
	// Nothing to explore while every estimate is fresh.
	c2 := tiers()
	if d := c2.Choose(1000, 0); d.Explore != -1 {
		t.Errorf("explored %d with fresh estimates", d.Explore)
	}
	// Bursts are capped: with the budget spent, no more than the refill.
	c3 := tiers()
	n := 0
	for k := 0; k < 100; k++ {
		if c3.Choose(1000, p.ExploreAge+1).Explore >= 0 {
			n++
		}
	}
	if max := int(p.ExploreBurst + 100*p.ExploreShare); n > max {
		t.Errorf("%d explorations in one instant, at most %d", n, max)
	}
}

// Hedges: after the primary's p95 (prediction + 2 mean deviations), to
// the next best, at most HedgeShare of reads plus the burst.
func TestHedgeBudget(t *testing.T) {
	c := tiers()
	wait, ok := c.HedgeAfter(1, 1000)
	p := c.Predict(1, 1000)
	if !ok || wait < c.Params.MinHedgeDelay || wait < p.Total {
		t.Errorf("HedgeAfter = %d, %v; prediction %d", wait, ok, p.Total)
	}
	c.Replicas[1].svc[0].dev = float64(2 * ms)
	if wait, _ := c.HedgeAfter(1, 1000); wait != p.Total+4*ms {
		t.Errorf("HedgeAfter = %d, want prediction + 4 ms", wait)
	}
	if _, ok := New(Predicted, DefaultParams(), 2, nil).HedgeAfter(0, 1000); ok {
		t.Error("hedge without any sample to judge by")
	}
	// The next best other than primary and the explored replica.
	if h := c.Hedge(1000, 1, -1); h != 0 {
		t.Errorf("hedged to %d, want 0 (local disk, next best)", h)
	}
	if h := c.Hedge(1000, 1, 0); h != 2 {
		t.Errorf("hedged to %d, want 2", h)
	}
	// Budget: every read asks for a hedge.
	c = tiers()
	const reads = 10000
	for k := int64(0); k < reads; k++ {
		d := c.Choose(1000, k*ms)
		c.Hedge(1000, d.Primary, d.Explore)
	}
	if max := uint64(reads*c.Params.HedgeShare + c.Params.HedgeBurst); c.Budget.Hedges > max || c.Budget.Hedges < max-2 {
		t.Errorf("%d hedges for %d reads, want about %d and no more", c.Budget.Hedges, reads, max)
	}
	// A shared budget bounds the pool, not each shard.
	b := NewBudget(DefaultParams())
	s1, s2 := New(Predicted, DefaultParams(), 2, b), New(Predicted, DefaultParams(), 2, b)
	n := 0
	for k := 0; k < 1000; k++ {
		for _, s := range []*Chooser{s1, s2} {
			s.Choose(1000, int64(k)*ms)
			if s.Hedge(1000, 0, -1) >= 0 {
				n++
			}
		}
	}
	if max := int(2000*b.params.HedgeShare + b.params.HedgeBurst); n > max {
		t.Errorf("%d hedges for 2,000 reads of two shards, at most %d", n, max)
	}
}

// The queue penalty moves reads off a replica with many outstanding.
func TestQueuePenaltyMovesReads(t *testing.T) {
	c := tiers()
	size := ClassLimit(4) // the disk wins at this size when idle
	if d := c.Choose(size, 0); d.Primary != 0 {
		t.Fatalf("idle: chose %d", d.Primary)
	}
	for k := 0; k < 8; k++ {
		c.Sent(0)
	}
	if d := c.Choose(size, 0); d.Primary != 1 {
		t.Errorf("8 outstanding at the disk: chose %d (disk %d, nearby %d)", d.Primary, c.Predict(0, size).Total, c.Predict(1, size).Total)
	}
}

// Dynamics: the nearby path slows down (its RTT, from the overlay's
// measurements, rises): reads move at once; the local disk's cap is lifted
// (its service time falls): exploration brings reads home within 2 s.
func TestDynamics(t *testing.T) {
	c := tiers()
	if c.Choose(1000, 0).Primary != 1 {
		t.Fatal("not nearby at first")
	}
	c.Replicas[1].RTT = 40 * ms
	if d := c.Choose(1000, 0); d.Primary != 0 {
		t.Errorf("nearby slowed to 40 ms: chose %d", d.Primary)
	}
	c.Replicas[1].RTT = 3 * ms
	// The disk gets fast at t=1 s; reads every 5 ms, each answered by
	// the replica's true service time.
	svc := [3]int64{8 * ms, ms / 10, ms / 10}
	start := int64(1e9)
	svc[0] = ms / 2
	var home int64 = -1
	for now := start; now < start+5e9; now += 5 * ms {
		d := c.Choose(1000, now)
		if d.Primary == 0 && home < 0 {
			home = now - start
		}
		observe(c, d.Primary, 1, 1000, svc[d.Primary], 20e6, now)
		if d.Explore >= 0 {
			observe(c, d.Explore, 1, 1000, svc[d.Explore], 20e6, now)
		}
	}
	t.Logf("reads came home %d ms after the disk got fast", home/ms)
	if home < 0 || home > 2e9 {
		t.Errorf("reads came home after %d ms, want within 2 s", home/ms)
	}
}

// A replica never sampled in the class is explored first.
func TestExploreUnknownFirst(t *testing.T) {
	c := New(Predicted, DefaultParams(), 3, nil)
	c.Replicas[0].Local = true
	c.Replicas[1].RTT, c.Replicas[2].RTT = 3*ms, 60*ms
	observe(c, 1, 1, 100, ms, 1e6, 0)
	d := c.Choose(100, 1)
	if d.Primary != 0 || d.Explore != 2 {
		t.Errorf("decision %+v, want primary 0 (RTT 0, unknown) and exploration of 2 (never sampled)", d)
	}
}
