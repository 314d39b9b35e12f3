package measure

import (
	"slices"
	"time"
)

// The available throughput of a directed link is estimated at its
// receiving end, from three inputs (docs/throughput.md):
//
//   - Passive delivery rate: the bytes of detour's own data that arrived
//     over the link, counted over windows in which data flowed throughout.
//     A window's rate is a lower bound of what the link can carry.
//   - Passive queueing: the offset-shifted one-way delay of the sender's
//     probes, compared with its floor over the last BaseWindow. A window
//     whose probes saw a queue of QueueThreshold or more was one in which
//     detour's traffic filled the link: its delivery rate is then the
//     available throughput itself, not a bound.
//   - Packet trains: a burst of datagrams sent back to back; the receiver's
//     dispersion, the bytes after the first over the time from the first
//     to the last, is the rate of the link's bottleneck.
//
// Trains cost probe bytes, so the sender sends one only when the estimate
// it is told is missing, only a lower bound, or old (RateEstimate.Stale).

// RateKind says what a rate estimate rests on.
type RateKind uint8

// Rate kinds, from the weakest to the strongest.
const (
	// RateNone: nothing is known.
	RateNone RateKind = iota
	// RateLowerBound: detour's own traffic was delivered at this rate
	// without queueing; the link can carry at least that.
	RateLowerBound
	// RateTrain: the dispersion of a packet train (the bottleneck rate).
	RateTrain
	// RateSaturated: detour's own traffic filled the link (its probes saw
	// a queue) and was delivered at this rate.
	RateSaturated
)

func (k RateKind) String() string {
	switch k {
	case RateLowerBound:
		return "lower-bound"
	case RateTrain:
		return "train"
	case RateSaturated:
		return "saturated"
	}
	return "none"
}

// RateEstimate is a link's available throughput in bits per second, what
// it rests on and when it was measured.
type RateEstimate struct {
	Rate float64
	Kind RateKind
	At   time.Time
}

// Valid reports whether the estimate says anything.
func (e RateEstimate) Valid() bool { return e.Kind != RateNone && e.Rate > 0 }

// Stale reports whether a sender told estimate e at now should measure the
// link with a train: nothing is known, only a lower bound, or the estimate
// is older than refresh.
func (e RateEstimate) Stale(now time.Time, refresh time.Duration) bool {
	return !e.Valid() || e.Kind == RateLowerBound || now.Sub(e.At) >= refresh
}

// RateConfig tunes a RateEstimator.
type RateConfig struct {
	// Window is the length of a passive window.
	Window time.Duration
	// MinWindowBytes is the least a window must carry to count (fewer
	// bytes say nothing about the link's capacity), and every feed within
	// it must have brought some: data flowed throughout.
	MinWindowBytes uint64
	// QueueThreshold is the queueing delay above the floor that marks a
	// window as saturated; BaseWindow is how far back the floor looks.
	QueueThreshold time.Duration
	BaseWindow     time.Duration
	// MaxAge drops passive and train estimates older than this.
	MaxAge time.Duration
	// SaturatedSamples is how many saturated windows the median is over.
	SaturatedSamples int
	// TrainMinPackets is the fewest packets of a train that give a rate.
	TrainMinPackets int
	// TrainTimeout ends a train whose last packets did not come.
	TrainTimeout time.Duration
}

// DefaultRateConfig suits probes every 100 ms and feeds of the data path's
// counters every 100 ms.
func DefaultRateConfig() RateConfig {
	return RateConfig{
		Window:           500 * time.Millisecond,
		MinWindowBytes:   64 << 10,
		QueueThreshold:   2 * time.Millisecond,
		BaseWindow:       30 * time.Second,
		MaxAge:           2 * time.Minute,
		SaturatedSamples: 5,
		TrainMinPackets:  8,
		TrainTimeout:     time.Second,
	}
}

// IPUDPOverhead is added to every datagram's payload when counting train
// bytes: the IPv4 and UDP headers, which the bottleneck also carries.
const IPUDPOverhead = 28

// RateEstimator estimates the available throughput of one directed link
// at its receiver. It is pure: callers pass the current time in.
type RateEstimator struct {
	cfg RateConfig

	// The open passive window.
	winStart time.Time
	winBytes uint64 // the counter at winStart
	winIdle  bool   // a feed in the window brought nothing
	// winProbes counts the window's probes measured against a floor, and
	// winLow is how far the lowest of them was above it.
	winProbes int
	winLow    time.Duration
	lastTotal uint64
	fed       bool

	// floor keeps the lowest delay of each BaseWindow/floorBuckets.
	floor [floorBuckets]floorBucket

	saturated []RateEstimate // newest last
	lower     RateEstimate   // the highest recent lower bound
	train     RateEstimate

	rx trainRx
	// lastPackets and lastCount describe the last train ended.
	lastPackets, lastCount int
}

const floorBuckets = 6

type floorBucket struct {
	start time.Time
	min   time.Duration
	ok    bool
}

// trainRx is a train being received.
type trainRx struct {
	id          uint32
	active      bool
	first, last time.Time
	packets     int
	bytes       int // after the first packet
	count       int
}

// NewRateEstimator returns an estimator with nothing known.
func NewRateEstimator(cfg RateConfig) *RateEstimator { return &RateEstimator{cfg: cfg} }

// Reset forgets everything, as when the peer restarted.
func (r *RateEstimator) Reset() { *r = RateEstimator{cfg: r.cfg} }

// OnBytes feeds the counter of data bytes received over the link (a total
// that only grows; a smaller value restarts the count) at now.
func (r *RateEstimator) OnBytes(now time.Time, total uint64) {
	if !r.fed || total < r.lastTotal {
		r.fed, r.lastTotal = true, total
		r.openWindow(now, total)
		return
	}
	if total == r.lastTotal {
		r.winIdle = true
	}
	r.lastTotal = total
	dt := now.Sub(r.winStart)
	if dt < r.cfg.Window {
		return
	}
	bytes := total - r.winBytes
	if !r.winIdle && bytes >= r.cfg.MinWindowBytes {
		rate := float64(bytes) * 8 / dt.Seconds()
		if r.winQueued() {
			r.addSaturated(RateEstimate{Rate: rate, Kind: RateSaturated, At: now})
		} else if rate >= r.lower.Rate || now.Sub(r.lower.At) >= r.cfg.MaxAge {
			r.lower = RateEstimate{Rate: rate, Kind: RateLowerBound, At: now}
		}
	}
	r.openWindow(now, total)
}

func (r *RateEstimator) openWindow(now time.Time, total uint64) {
	r.winStart, r.winBytes, r.winIdle, r.winProbes, r.winLow = now, total, false, 0, 0
}

// winQueued reports whether the open window saw a standing queue: at
// least two probes, every one of them QueueThreshold or more above the
// floor. A flow that fills the link keeps its queue from one probe to the
// next; one probe delayed now and then (by the sender's or the path's
// scheduling) is jitter, and a window it marked would give as the link's
// rate whatever detour's traffic happened to carry in it.
func (r *RateEstimator) winQueued() bool {
	return r.winProbes >= 2 && r.winLow >= r.cfg.QueueThreshold
}

func (r *RateEstimator) addSaturated(e RateEstimate) {
	r.saturated = append(r.saturated, e)
	if k := len(r.saturated) - max(r.cfg.SaturatedSamples, 1); k > 0 {
		r.saturated = slices.Delete(r.saturated, 0, k)
	}
}

// OnDelay feeds the offset-shifted one-way delay of a probe that came over
// the link at now, for the floor of the last BaseWindow and the queue the
// open window shows above it (winQueued).
func (r *RateEstimator) OnDelay(now time.Time, d time.Duration) {
	span := r.cfg.BaseWindow / floorBuckets
	if span <= 0 {
		span = time.Second
	}
	floor, ok := r.floorAt(now)
	k := now.UnixNano() / int64(span)
	b := &r.floor[((k%floorBuckets)+floorBuckets)%floorBuckets]
	start := time.Unix(0, k*int64(span))
	if !b.ok || !b.start.Equal(start) {
		*b = floorBucket{start: start, min: d, ok: true}
	} else if d < b.min {
		b.min = d
	}
	if ok {
		if rise := d - floor; r.winProbes == 0 || rise < r.winLow {
			r.winLow = rise
		}
		r.winProbes++
	}
}

// floorAt is the lowest delay of the buckets within BaseWindow of now.
func (r *RateEstimator) floorAt(now time.Time) (time.Duration, bool) {
	var f time.Duration
	ok := false
	for _, b := range r.floor {
		if b.ok && now.Sub(b.start) < r.cfg.BaseWindow && (!ok || b.min < f) {
			f, ok = b.min, true
		}
	}
	return f, ok
}

// OnTrain takes packet index (of count) of train id, of size bytes on the
// wire, received at now. It returns the train's rate when this packet
// completes it; a packet of another train ends the one in progress.
func (r *RateEstimator) OnTrain(now time.Time, id uint32, index, count, size int) (RateEstimate, bool) {
	var done RateEstimate
	var ok bool
	if r.rx.active && r.rx.id != id {
		done, ok = r.finishTrain()
	}
	if !r.rx.active {
		r.rx = trainRx{id: id, active: true, first: now, last: now, packets: 1, count: count}
	} else {
		r.rx.last = now
		r.rx.packets++
		r.rx.bytes += size
	}
	if index >= count-1 {
		return r.finishTrain()
	}
	return done, ok
}

// Expire ends a train whose last packet has not come for TrainTimeout,
// returning its rate if enough of it arrived.
func (r *RateEstimator) Expire(now time.Time) (RateEstimate, bool) {
	if r.rx.active && now.Sub(r.rx.last) >= r.cfg.TrainTimeout {
		return r.finishTrain()
	}
	return RateEstimate{}, false
}

// LastTrain returns how many packets of the last train ended arrived, of
// how many sent.
func (r *RateEstimator) LastTrain() (packets, count int) { return r.lastPackets, r.lastCount }

// TrainID returns the train being received, if any.
func (r *RateEstimator) TrainID() (uint32, bool) { return r.rx.id, r.rx.active }

func (r *RateEstimator) finishTrain() (RateEstimate, bool) {
	t := r.rx
	r.rx = trainRx{}
	r.lastPackets, r.lastCount = t.packets, t.count
	dt := t.last.Sub(t.first)
	if t.packets < max(r.cfg.TrainMinPackets, 2) || dt <= 0 {
		return RateEstimate{}, false
	}
	e := RateEstimate{Rate: float64(t.bytes) * 8 / dt.Seconds(), Kind: RateTrain, At: t.last}
	r.train = e
	return e, true
}

// Estimate returns the current estimate: the median of the recent
// saturated windows if there are any, else the latest train, else the
// lower bound. A newer lower bound above the chosen rate raises it (the
// link carried more since), keeping the kind.
func (r *RateEstimator) Estimate(now time.Time) RateEstimate {
	fresh := func(e RateEstimate) bool { return e.Valid() && now.Sub(e.At) < r.cfg.MaxAge }
	var e RateEstimate
	var rates []float64
	for _, s := range r.saturated {
		if fresh(s) {
			rates = append(rates, s.Rate)
			e.At = s.At
		}
	}
	switch {
	case len(rates) > 0:
		slices.Sort(rates)
		e.Rate, e.Kind = rates[len(rates)/2], RateSaturated
	case fresh(r.train):
		e = r.train
	case fresh(r.lower):
		return r.lower
	default:
		return RateEstimate{}
	}
	if fresh(r.lower) && r.lower.At.After(e.At) && r.lower.Rate > e.Rate {
		e.Rate, e.At = r.lower.Rate, r.lower.At
	}
	return e
}
