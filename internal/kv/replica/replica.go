// Package replica chooses, for each read of a replicated memcached shard,
// the replica to send it to (issue 18). It predicts each replica's fetch
// time from what a gateway can see — the overlay's live path round trip,
// the server's service time as observed from the gateway per value-size
// class, a penalty for the requests outstanding at the server, and the
// value's size over the path's observed throughput — and takes the
// argmin. It keeps the other replicas' estimates fresh by sampling them at
// a bounded rate, and decides when a read still unanswered is hedged to
// the next best replica, within a budget. The static policies local-first,
// static-zone and nearest-rtt are here too, for comparison.
//
// Everything is pure: time is an argument (monotonic nanoseconds), and
// nothing here does I/O or allocates after New. A Chooser is not safe for
// concurrent use; the key router holds a lock around it. The model and its
// constants are described in docs/replicas.md.
package replica

import (
	"fmt"
	"math"
)

// Policy is how a read picks a replica.
type Policy uint8

// The policies.
const (
	// Predicted takes the lowest predicted fetch time.
	Predicted Policy = iota
	// LocalFirst takes a replica at this site, else the nearest by path
	// round trip.
	LocalFirst
	// StaticZone takes a replica at this site, else one in the declared
	// near zone (the nearest of them), else the nearest.
	StaticZone
	// NearestRTT takes the replica with the lowest path round trip.
	NearestRTT
)

var policyNames = [...]string{"predicted", "local-first", "static-zone", "nearest-rtt"}

// String names the policy as the configuration spells it.
func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParsePolicy reads a policy's name ("" is Predicted).
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return Predicted, nil
	}
	for i, n := range policyNames {
		if n == s {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("replica: unknown policy %q", s)
}

// MaxReplicas bounds the replicas of one shard (config.MaxKVReplicas).
const MaxReplicas = 8

// Size classes: service times are kept per class of value size, by
// powers of 4 from 1 KB: ≤1 KB, ≤4 KB, ≤16 KB, ≤64 KB, ≤256 KB, ≤1 MB,
// larger.
const NumClasses = 7

// Class returns the size class of a value of n bytes.
func Class(n int) int {
	c, limit := 0, 1024
	for c < NumClasses-1 && n > limit {
		c++
		limit *= 4
	}
	return c
}

// ClassLimit returns the largest size of class c (math.MaxInt for the
// last).
func ClassLimit(c int) int {
	if c >= NumClasses-1 {
		return math.MaxInt
	}
	return 1024 << (2 * c)
}

// Params are the model's constants; DefaultParams gives those of
// docs/replicas.md.
type Params struct {
	// Gain is the weight of a new sample in the smoothed path throughput
	// (an EWMA); DevGain that of the deviation of throughput and service
	// time.
	Gain, DevGain float64
	// Concurrency is how many requests a server serves at once, for the
	// queue penalty S × ((1 + outstanding/Concurrency)^QueueExp − 1).
	// QueueExp 1 is a linear queue; C3 uses 3 (see docs/replicas.md).
	Concurrency, QueueExp float64
	// Throughput is the path throughput (bytes/s) assumed before any is
	// observed.
	Throughput float64
	// ExploreAge is how old a replica's estimate for a size class may
	// get before a read of that class is also sent to it (ns).
	ExploreAge int64
	// ExploreRate (per second) and ExploreShare (per read) fill the
	// exploration budget, which holds at most ExploreBurst samples.
	ExploreRate, ExploreShare, ExploreBurst float64
	// HedgeShare (per read) fills the hedge budget, which holds at most
	// HedgeBurst hedges: at most HedgeShare extra requests in the long
	// run, plus the burst.
	HedgeShare, HedgeBurst float64
	// MinHedgeDelay is the shortest wait before a hedge (ns).
	MinHedgeDelay int64
}

// DefaultParams returns the constants docs/replicas.md describes.
func DefaultParams() Params {
	return Params{
		Gain: 0.25, DevGain: 0.25,
		Concurrency: 4, QueueExp: 1,
		Throughput: 10e6,
		ExploreAge: 200e6, ExploreRate: 10, ExploreShare: 0.02, ExploreBurst: 4,
		HedgeShare: 0.05, HedgeBurst: 5,
		MinHedgeDelay: 500e3,
	}
}

// estimate is a smoothed value with its mean deviation.
type estimate struct {
	mean, dev float64
	n         uint32
	at        int64 // time of the last sample
}

// add takes sample x into the estimate. A sample more than
// outlierDevs mean deviations above the mean moves the mean only as far
// as that bound, while the deviation takes it whole: one slow request now
// and then does not make a replica look slow for the many samples an
// EWMA needs to forget it, but a lasting rise widens the bound and is
// followed within a sample or two more than without it. Falls are taken
// whole.
func (e *estimate) add(x float64, now int64, gain, devGain float64) {
	if e.n == 0 {
		e.mean, e.dev = x, x/2
	} else {
		m := min(x, e.mean+outlierDevs*e.dev)
		e.dev += devGain * (math.Abs(x-e.mean) - e.dev)
		e.mean += gain * (m - e.mean)
	}
	e.n++
	e.at = now
}

// outlierDevs bounds the rise one sample may cause (see estimate.add).
const outlierDevs = 3

// windowLen is how many recent service times of a size class a replica
// keeps.
const windowLen = 8

// window is a replica's recent service times in one size class. The
// estimate is their median: one slow request now and then does not move
// it (an EWMA would carry it for many samples, during which reads go to a
// replica that is in fact slower), while a lasting change moves it after
// half the window (5 samples: at once for the replica reads go to, within
// about a second through exploration for the others). The EWMA of the
// samples' deviation from it sizes the hedge's wait.
type window struct {
	s   [windowLen]float64
	n   uint32 // samples taken
	med float64
	dev float64
	at  int64 // time of the last sample
}

func (w *window) add(x float64, now int64, devGain float64) {
	if w.n == 0 {
		w.dev = x / 2
	} else {
		w.dev += devGain * (math.Abs(x-w.med) - w.dev)
	}
	w.s[w.n%windowLen] = x
	w.n++
	w.at = now
	k := int(min(w.n, windowLen))
	var t [windowLen]float64
	copy(t[:k], w.s[:k])
	for i := 1; i < k; i++ { // insertion sort of at most 8
		for j := i; j > 0 && t[j] < t[j-1]; j-- {
			t[j], t[j-1] = t[j-1], t[j]
		}
	}
	if k%2 == 1 {
		w.med = t[k/2]
	} else {
		w.med = (t[k/2-1] + t[k/2]) / 2
	}
}

// Replica is what the chooser knows of one replica.
type Replica struct {
	// Local is set for a replica at this site, Near for one in the
	// declared near zone.
	Local, Near bool
	// Usable is false while the replica is down (health, its site lost,
	// drained); set by the caller before each choice.
	Usable bool
	// Trial is set by the caller for a replica that is down but may take
	// one request to see whether it is back (a readmission trial): the
	// next read's second copy goes to it, whatever the policy, and its
	// reply only feeds the estimates; when no replica is usable, the read
	// itself goes to it.
	Trial bool
	// RTT is the round trip of the path the overlay uses to the
	// replica's site (ns; 0 for this site), set by the caller.
	RTT int64

	// Path is the path's observed throughput, which the replicas of a
	// pool at one site may share; New gives each replica its own.
	Path *Path

	svc         [NumClasses]window // service time per size class (ns)
	outstanding int
}

// Path is the observed throughput of the path to one site.
type Path struct {
	thr estimate // bytes/s
}

// Budget holds the exploration and hedge tokens of one pool, shared by
// the choosers of its shards so that the bounds hold for the pool.
type Budget struct {
	params    Params
	exploreT  float64
	hedgeT    float64
	lastFill  int64
	hasFilled bool
	// Reads, Explored and Hedges count the reads chosen for, the
	// exploration samples and the hedges granted.
	Reads, Explored, Hedges uint64
}

// NewBudget returns a full budget.
func NewBudget(p Params) *Budget {
	return &Budget{params: p, exploreT: p.ExploreBurst, hedgeT: p.HedgeBurst}
}

// fill adds the tokens for the time since the last call and for one more
// read.
func (b *Budget) fill(now int64) {
	p := &b.params
	if b.hasFilled && now > b.lastFill {
		b.exploreT += p.ExploreRate * float64(now-b.lastFill) / 1e9
	}
	b.lastFill, b.hasFilled = now, true
	b.exploreT = min(b.exploreT+p.ExploreShare, p.ExploreBurst)
	b.hedgeT = min(b.hedgeT+p.HedgeShare, p.HedgeBurst)
	b.Reads++
}

// Outstanding returns the requests sent to the replica and not yet
// answered or given up.
func (r *Replica) Outstanding() int { return r.outstanding }

// Chooser picks replicas for the reads of one shard.
type Chooser struct {
	Policy   Policy
	Params   Params
	Replicas []Replica
	// Budget is the pool's exploration and hedge budget.
	Budget *Budget

	typical estimate // reply size (bytes), for reads of unknown size
}

// New returns a chooser for n replicas, all usable with RTT 0, each with
// its own Path, drawing on budget (a new one when nil).
func New(policy Policy, params Params, n int, budget *Budget) *Chooser {
	if budget == nil {
		budget = NewBudget(params)
	}
	c := &Chooser{Policy: policy, Params: params, Replicas: make([]Replica, n), Budget: budget}
	for i := range c.Replicas {
		c.Replicas[i].Usable = true
		c.Replicas[i].Path = &Path{}
	}
	return c
}

// Prediction is a replica's predicted fetch time and its parts (ns).
type Prediction struct {
	Total, RTT, Service, Queue, Transfer int64
	// Class is the size class predicted for; Samples the service-time
	// samples behind it (0: borrowed from class From, or unknown when
	// From is -1); Throughput the path throughput used (bytes/s).
	Class, Samples, From int
	Throughput           float64
}

// Predict returns replica i's predicted fetch time for a value of size
// bytes: RTT + S + S × ((1 + q/c)^b − 1) + size / throughput.
func (c *Chooser) Predict(i, size int) Prediction {
	r := &c.Replicas[i]
	cl := Class(size)
	p := Prediction{RTT: r.RTT, Class: cl, From: -1}
	if e := &r.svc[cl]; e.n > 0 {
		p.Service, p.Samples, p.From = int64(e.med), int(e.n), cl
	} else if k := r.nearestClass(cl); k >= 0 {
		p.Service, p.From = int64(r.svc[k].med), k
	}
	if r.outstanding > 0 {
		f := float64(r.outstanding) / c.Params.Concurrency
		if c.Params.QueueExp != 1 {
			f = math.Pow(1+f, c.Params.QueueExp) - 1
		}
		p.Queue = int64(float64(p.Service) * f)
	}
	p.Throughput = c.Params.Throughput
	if r.Path.thr.n > 0 {
		p.Throughput = r.Path.thr.mean
	}
	if p.Throughput > 0 {
		p.Transfer = int64(float64(size) / p.Throughput * 1e9)
	}
	p.Total = p.RTT + p.Service + p.Queue + p.Transfer
	return p
}

// nearestClass returns the class nearest to cl with samples (the smaller
// on a tie), or -1.
func (r *Replica) nearestClass(cl int) int {
	for d := 1; d < NumClasses; d++ {
		if k := cl - d; k >= 0 && r.svc[k].n > 0 {
			return k
		}
		if k := cl + d; k < NumClasses && r.svc[k].n > 0 {
			return k
		}
	}
	return -1
}

// Decision is the outcome of Choose: the replica the read goes to, and
// another it is also sent to so that its estimate stays fresh (-1: none).
type Decision struct {
	Primary, Explore int
}

// Choose picks the replica for a read of an expected size bytes at now
// (when none is usable, one on trial, else -1) and a second replica the
// read is also sent to: one on trial (Replica.Trial), under any policy
// and without a token; else, under Predicted, one whose estimate for the
// size class is older than ExploreAge, for an exploration token.
func (c *Chooser) Choose(size int, now int64) Decision {
	c.Budget.fill(now)
	d := Decision{Primary: c.Pick(size), Explore: -1}
	if d.Primary < 0 {
		d.Primary = c.trial(-1) // none usable: one on trial takes the read
		return d
	}
	if d.Explore = c.trial(d.Primary); d.Explore < 0 && c.Policy == Predicted {
		d.Explore = c.explore(size, d.Primary, now)
	}
	return d
}

// trial returns the first replica on trial other than primary, or -1.
func (c *Chooser) trial(primary int) int {
	for i := range c.Replicas {
		if r := &c.Replicas[i]; i != primary && r.Trial && !r.Usable {
			return i
		}
	}
	return -1
}

// Pick returns the replica the policy gives a read of size bytes (-1
// when none is usable), spending nothing: what Choose's primary would
// be.
func (c *Chooser) Pick(size int) int {
	switch c.Policy {
	case LocalFirst:
		return c.staticPick(false)
	case StaticZone:
		return c.staticPick(true)
	case NearestRTT:
		return c.nearest(func(int) bool { return true })
	}
	return c.best(size, -1)
}

// best returns the usable replica other than skip with the lowest
// predicted fetch time (the first in order on a tie), or -1.
func (c *Chooser) best(size, skip int) int {
	b, bt := -1, int64(math.MaxInt64)
	for i := range c.Replicas {
		if i == skip || !c.Replicas[i].Usable {
			continue
		}
		if t := c.Predict(i, size).Total; t < bt {
			b, bt = i, t
		}
	}
	return b
}

// nearest returns the usable replica with the lowest path round trip
// among those ok accepts (the first on a tie), or -1.
func (c *Chooser) nearest(ok func(int) bool) int {
	b := -1
	for i := range c.Replicas {
		r := &c.Replicas[i]
		if r.Usable && ok(i) && (b < 0 || r.RTT < c.Replicas[b].RTT) {
			b = i
		}
	}
	return b
}

// staticPick is local-first (zone false) or static-zone: a local replica,
// then (static-zone) the nearest of the near zone, then the nearest.
func (c *Chooser) staticPick(zone bool) int {
	if i := c.nearest(func(i int) bool { return c.Replicas[i].Local }); i >= 0 {
		return i
	}
	if zone {
		if i := c.nearest(func(i int) bool { return c.Replicas[i].Near }); i >= 0 {
			return i
		}
	}
	return c.nearest(func(int) bool { return true })
}

// explore returns the usable replica other than primary whose estimate
// for the class of size is the oldest, when it is older than ExploreAge
// and a token is left; -1 otherwise.
func (c *Chooser) explore(size, primary int, now int64) int {
	if c.Budget.exploreT < 1 {
		return -1
	}
	cl := Class(size)
	b, bAt := -1, int64(math.MaxInt64)
	for i := range c.Replicas {
		r := &c.Replicas[i]
		if i == primary || !r.Usable {
			continue
		}
		at := r.svc[cl].at
		if r.svc[cl].n == 0 {
			at = math.MinInt64 // never sampled: the most stale
		} else if now-at <= c.Params.ExploreAge {
			continue
		}
		if at < bAt || b < 0 {
			b, bAt = i, at
		}
	}
	if b >= 0 {
		c.Budget.exploreT--
		c.Budget.Explored++
	}
	return b
}

// HedgeAfter returns how long after sending a read of size bytes to
// replica i it should be hedged: the replica's p95 fetch time for the
// class, estimated as the prediction plus twice the mean deviation of
// its service time, at least MinHedgeDelay. ok is false when the
// replica's class has no samples (nothing to judge by) or hedging is off
// for the policy.
func (c *Chooser) HedgeAfter(i, size int) (wait int64, ok bool) {
	if c.Policy != Predicted {
		return 0, false
	}
	e := &c.Replicas[i].svc[Class(size)]
	if e.n == 0 {
		return 0, false
	}
	return max(c.Predict(i, size).Total+int64(2*e.dev), c.Params.MinHedgeDelay), true
}

// Hedge returns the replica a read first sent to primary (and possibly
// to explored) is hedged to now: the best usable other replica, when a
// hedge token is left; -1 otherwise.
func (c *Chooser) Hedge(size, primary, explored int) int {
	if c.Budget.hedgeT < 1 {
		return -1
	}
	b, bt := -1, int64(math.MaxInt64)
	for i := range c.Replicas {
		if i == primary || i == explored || !c.Replicas[i].Usable {
			continue
		}
		if t := c.Predict(i, size).Total; t < bt {
			b, bt = i, t
		}
	}
	if b >= 0 {
		c.Budget.hedgeT--
		c.Budget.Hedges++
	}
	return b
}

// Sent records a request sent to replica i.
func (c *Chooser) Sent(i int) { c.Replicas[i].outstanding++ }

// GiveUp forgets a request to replica i that will not be answered (it
// expired, or its soft state was evicted).
func (c *Chooser) GiveUp(i int) {
	if r := &c.Replicas[i]; r.outstanding > 0 {
		r.outstanding--
	}
}

// Reply is one observed reply: when the request left and when the first
// and last of its datagrams arrived, its bytes, those of its first
// datagram, and its datagram count.
type Reply struct {
	Sent, First, Last       int64
	Bytes, FirstBytes, Dgms int
}

// Observe records replica i's reply r at now: the service time (first
// datagram's arrival − sending − path RTT, at least 0) in the class of
// its size, and, for a reply of several datagrams, the path throughput
// (the bytes after the first datagram over the time from the first to
// the last).
func (c *Chooser) Observe(i int, r Reply, now int64) {
	rp := &c.Replicas[i]
	if rp.outstanding > 0 {
		rp.outstanding--
	}
	p := &c.Params
	svc := max(r.First-r.Sent-rp.RTT, 0)
	rp.svc[Class(r.Bytes)].add(float64(svc), now, p.DevGain)
	if span := r.Last - r.First; r.Dgms > 1 && span > 0 && r.Bytes > r.FirstBytes {
		rp.Path.thr.add(float64(r.Bytes-r.FirstBytes)/(float64(span)/1e9), now, p.Gain, p.DevGain)
	}
	c.typical.add(float64(r.Bytes), now, 1.0/16, 1.0/16)
}

// TypicalSize is the smoothed size of the replies seen (0 before any),
// for reads whose value size is not known.
func (c *Chooser) TypicalSize() int { return int(c.typical.mean) }

// ClassStats is a replica's service-time estimate for one size class.
type ClassStats struct {
	Median, Dev int64 // ns: the window's median and the smoothed deviation from it
	Samples     int
	Age         int64 // ns since the last sample at the time asked
}

// Stats returns replica i's service-time estimate for class cl at now.
func (c *Chooser) Stats(i, cl int, now int64) ClassStats {
	e := &c.Replicas[i].svc[cl]
	s := ClassStats{Median: int64(e.med), Dev: int64(e.dev), Samples: int(e.n)}
	if e.n > 0 {
		s.Age = now - e.at
	}
	return s
}
