// Package measure turns probe exchanges into per-link estimates: the
// offset-shifted one-way delay of a directed link, its round-trip time,
// loss, jitter and whether it is up.
//
// Clocks are not synchronised. A probe sent at t1 on the prober's clock and
// received at t2 on the responder's clock gives t2 − t1 = d + o(p) − o(r),
// the offset-shifted one-way delay: meaningful only in sums and differences
// of paths between the same two sites, and possibly negative. The filters
// here are therefore translation-invariant: a quantile over a window and a
// step detector with absolute thresholds. They never clamp a sample or
// compare it with a percentage of itself.
//
// The round trip (t4 − t1) − (t3 − t2), the prober's elapsed time minus the
// responder's hold time, is free of offsets. An absolute one-way delay can
// only be estimated: this package reports RTT/2 for each direction, and the
// truth lies anywhere in (0, RTT) depending on the unknowable asymmetry.
//
// Clock skew of ±50 ppm moves an offset-shifted delay by 50 µs per second;
// windows keep samples at most a few seconds old so that the error stays a
// small fraction of a millisecond.
//
// The package is pure: callers pass the current time in.
package measure

import (
	"slices"
	"time"
)

// FilterConfig tunes a Filter.
type FilterConfig struct {
	// Window is the number of samples kept.
	Window int
	// MaxAge drops samples older than this.
	MaxAge time.Duration
	// The estimate is the mean of the window's samples ranked between
	// TrimLow and KeepTo, as fractions of the window, lowest first: a
	// trimmed mean ignores queueing spikes (the samples above KeepTo) and
	// varies less than a single order statistic. Trimming as much from
	// the bottom as from the top makes it read the mean of symmetric
	// jitter: the mean of the lowest half alone reads 1 ms of uniform
	// jitter half a millisecond low, and a path of k links k times that,
	// which makes relays look better than they are. The default, the
	// middle half, also keeps a standing queue that saw-tooths (a TCP
	// flow filling a link) in the estimate: a brief lull in it moves the
	// lowest samples to the idle delay but the middle half far less.
	TrimLow, KeepTo float64
	// StepCount consecutive samples on the same side of the estimate,
	// each farther than the step threshold, restart the window from those
	// samples, so that a lasting change is followed within StepCount
	// samples.
	StepCount int
	// MinStep is the smallest step threshold. The threshold is the larger
	// of MinStep and SpreadFactor times the window's 10–90 % spread, so
	// that jitter alone never triggers it.
	MinStep      time.Duration
	SpreadFactor float64
	// RiseOnly follows steps up only: a fall is followed as the samples
	// before it age out of the window.
	RiseOnly bool
	// ConfirmRise is the least rise above the estimate for which
	// Undecided asks for the samples that decide it at once. Samples
	// sent at one moment all read a hiccup of that moment (the hosts'
	// CPUs busy for a few milliseconds); a smaller rise is decided by
	// samples as they come, a probe interval apart, so that such a
	// hiccup moves no route, while a queue that costs more than it is
	// left within a round trip.
	ConfirmRise time.Duration
}

// DefaultFilterConfig suits probes every 100 ms.
func DefaultFilterConfig() FilterConfig {
	return FilterConfig{
		Window:       48,
		MaxAge:       5 * time.Second,
		TrimLow:      0.25,
		KeepTo:       0.75,
		StepCount:    3,
		MinStep:      time.Millisecond,
		SpreadFactor: 2,
		ConfirmRise:  10 * time.Millisecond,
	}
}

type sample struct {
	at time.Time
	v  time.Duration
}

// InbandFilterConfig suits the samples of data packets (measure.Link's
// AddInband), up to one in 5 ms: a window of 2 s, a rise followed after
// four samples, a fall only as the window ages. The estimate is the mean
// of the lowest three quarters: a loaded link's queue saw-tooths, and a
// drain of a few hundred milliseconds moves it by a fraction of the
// queue, where the lower half would drop to the drain's level. Stats
// takes it only where it is above the probes' estimate, so reading a
// little low under jitter moves no route.
func InbandFilterConfig() FilterConfig {
	return FilterConfig{
		Window:       512,
		MaxAge:       2 * time.Second,
		KeepTo:       0.75,
		StepCount:    4,
		MinStep:      time.Millisecond,
		SpreadFactor: 2,
		RiseOnly:     true,
	}
}

// Filter is a robust estimator of one series of samples.
type Filter struct {
	cfg     FilterConfig
	samples []sample // oldest first
	sorted  []time.Duration
	est     time.Duration
	mean    time.Duration // plain mean of the window
	spread  time.Duration
	jitter  time.Duration
	last    time.Duration
	hasLast bool
	run     int // consecutive samples beyond the step threshold
	runSign int
	runPrev time.Duration // the run's previous sample
	steps   int
	// undecided is what Undecided reports for the latest sample; asked
	// is set once it asked for the samples that decide the current run.
	undecided int
	asked     bool
}

// NewFilter returns an empty filter. Its buffers grow with the samples it
// holds: a link's in-band filter, 512 samples long, stays empty on a link
// that carries no traffic.
func NewFilter(cfg FilterConfig) *Filter {
	return &Filter{cfg: cfg}
}

// Reset forgets every sample.
func (f *Filter) Reset() {
	f.samples = f.samples[:0]
	f.sorted = f.sorted[:0]
	f.hasLast, f.run, f.runSign, f.asked, f.jitter = false, 0, 0, false, 0
}

// Add records a sample taken at now.
func (f *Filter) Add(now time.Time, v time.Duration) {
	f.undecided = 0
	f.trackJitter(v)
	f.expire(now)
	if len(f.samples) > 0 {
		f.detectStep(v)
	}
	if len(f.samples) == f.cfg.Window {
		f.removeSorted(f.samples[0].v)
		copy(f.samples, f.samples[1:])
		f.samples = f.samples[:len(f.samples)-1]
	}
	f.samples = append(f.samples, sample{now, v})
	f.insertSorted(v)
	f.summarise()
}

// insertSorted and removeSorted keep f.sorted in step with f.samples in
// linear time.
func (f *Filter) insertSorted(v time.Duration) {
	i, _ := slices.BinarySearch(f.sorted, v)
	f.sorted = slices.Insert(f.sorted, i, v)
}

func (f *Filter) removeSorted(v time.Duration) {
	if i, ok := slices.BinarySearch(f.sorted, v); ok {
		f.sorted = slices.Delete(f.sorted, i, i+1)
	}
}

// trackJitter keeps the RFC 3550 style smoothed mean of the absolute
// difference between consecutive samples (an offset-free quantity).
func (f *Filter) trackJitter(v time.Duration) {
	if f.hasLast {
		d := v - f.last
		if d < 0 {
			d = -d
		}
		f.jitter += (d - f.jitter) / 16
	}
	f.last, f.hasLast = v, true
}

// detectStep counts samples beyond the threshold on one side and restarts
// the window when the run is long enough and its last two samples agree
// (within the threshold): a lasting change of the path settles at once
// (after at most one transitional sample, such as a probe queued behind
// older packets), while a stalled host, its probes stamped late all at
// once, gives a burst that decays by a probe interval per sample and must
// not move the estimate. A run that lasts twice as long restarts the
// window whatever its samples.
func (f *Filter) detectStep(v time.Duration) {
	th := max(f.cfg.MinStep, time.Duration(f.cfg.SpreadFactor*float64(f.spread)))
	sign := 0
	switch {
	case v > f.est+th:
		sign = 1
	case v < f.est-th && !f.cfg.RiseOnly:
		sign = -1
	}
	if sign == 0 || sign != f.runSign {
		f.run, f.runSign, f.runPrev, f.asked = 0, sign, v, false
	}
	if sign == 0 {
		return
	}
	f.run++
	settled := (v - f.runPrev).Abs() <= th
	f.runPrev = v
	switch {
	case sign < 0 || v-f.est < f.cfg.ConfirmRise:
	case f.run < f.cfg.StepCount && !f.asked:
		f.undecided, f.asked = f.cfg.StepCount-f.run, true
	case f.run == f.cfg.StepCount && !settled:
		f.undecided = f.cfg.StepCount
	}
	if f.run >= f.cfg.StepCount && (settled || f.run >= 2*f.cfg.StepCount) {
		// The current sample is appended next. Samples may have expired
		// during the run, so fewer than StepCount-1 may be left.
		keep := min(f.cfg.StepCount-1, len(f.samples))
		f.samples = append(f.samples[:0], f.samples[len(f.samples)-keep:]...)
		f.recompute()
		f.run, f.runSign = 0, 0
		f.steps++
	}
}

// Undecided returns how many more samples would decide a rise once a
// sample of it reads at least ConfirmRise above the estimate: StepCount −
// 1 when the first sample does, fewer when a later one of a run that
// began lower does (once per run), and as many again when the rise is
// unsettled after StepCount samples (up to the run that steps whatever
// its samples); zero otherwise. A prober that sends
// that many probes at once learns within a round trip whether a link got
// slower, instead of after StepCount probe intervals.
func (f *Filter) Undecided() int { return f.undecided }

// Rising reports whether the filter is in a run of samples above its
// estimate that may yet become a step.
func (f *Filter) Rising() bool { return f.run > 0 && f.runSign > 0 }

// Pause moves the samples' times on for a pause of their observer from
// "from" to "to" (see Resumed), so that they do not age while it could
// not take new ones.
func (f *Filter) Pause(from, to time.Time) {
	for i := range f.samples {
		f.samples[i].at = Resumed(f.samples[i].at, from, to)
	}
}

// expire drops samples older than MaxAge.
func (f *Filter) expire(now time.Time) {
	i := 0
	for i < len(f.samples) && now.Sub(f.samples[i].at) > f.cfg.MaxAge {
		i++
	}
	if i > 0 {
		f.samples = append(f.samples[:0], f.samples[i:]...)
		f.recompute()
	}
}

func (f *Filter) recompute() {
	f.sorted = f.sorted[:0]
	for _, s := range f.samples {
		f.sorted = append(f.sorted, s.v)
	}
	slices.Sort(f.sorted)
	f.summarise()
}

// summarise derives the estimate and spread from f.sorted.
func (f *Filter) summarise() {
	if len(f.sorted) == 0 {
		return
	}
	f.est = bandMean(f.sorted, f.cfg.TrimLow, f.cfg.KeepTo)
	f.mean = bandMean(f.sorted, 0, 1)
	f.spread = quantile(f.sorted, 0.9) - quantile(f.sorted, 0.1)
}

// quantile returns the q-quantile of sorted values by nearest rank.
func quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(q * float64(len(s)-1))
	return s[i]
}

// bandMean returns the mean of the sorted values ranked from the fraction
// lo of them up to the fraction hi; a band too narrow to hold a value
// holds the one ranked just below hi.
func bandMean(s []time.Duration, lo, hi float64) time.Duration {
	k := max(1, int(hi*float64(len(s))))
	i := min(int(lo*float64(len(s))), k-1)
	var sum time.Duration
	for _, v := range s[i:k] {
		sum += v - s[0] // sum differences: no overflow with large offsets
	}
	return s[0] + sum/time.Duration(k-i)
}

// Estimate returns the current estimate and whether there is one. The
// estimate lags the newest sample by at most MaxAge.
func (f *Filter) Estimate(now time.Time) (time.Duration, bool) {
	f.expire(now)
	if len(f.samples) == 0 {
		return 0, false
	}
	return f.est, true
}

// Mean returns the plain mean of the samples in the window and whether
// there are any: the delay a packet typically sees, queueing included,
// where Estimate is the robust floor that routing compares.
func (f *Filter) Mean(now time.Time) (time.Duration, bool) {
	f.expire(now)
	if len(f.samples) == 0 {
		return 0, false
	}
	return f.mean, true
}

// Jitter returns the smoothed mean absolute difference between consecutive
// samples.
func (f *Filter) Jitter() time.Duration { return f.jitter }

// Steps returns how many step changes the filter has followed.
func (f *Filter) Steps() int { return f.steps }

// Len returns the number of samples in the window.
func (f *Filter) Len() int { return len(f.samples) }
