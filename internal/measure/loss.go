package measure

import (
	"math"
	"time"
)

// Loss at the rates of long Internet paths (0.1–1 %) cannot be told from a
// few dozen probes: one lost probe in 50 reads 2 %, none reads 0. A
// LossWindow therefore counts probes and losses in buckets of a few
// seconds over up to ten minutes and estimates over the newest buckets
// that hold enough losses for the rate being estimated (a heavy loss is
// known within seconds, a light one over minutes), with a Wilson score
// interval around the estimate. A lasting change of the rate restarts the
// window, so that a link that heals, or starts losing, is not judged by
// the minutes before.

// LossConfig tunes a LossWindow.
type LossConfig struct {
	// Bucket is the time one bucket of counts covers.
	Bucket time.Duration
	// Span is the longest window: buckets older than this are dropped.
	Span time.Duration
	// Events is how many losses make a window long enough: the estimate
	// is over the newest buckets that hold this many losses (all the
	// buckets within Span if they hold fewer).
	Events int
	// Recent is how far back the newest buckets reach that are compared
	// with the older ones when a bucket closes: if their intervals at
	// ChangeZ do not overlap, the rate has changed and the older buckets
	// are dropped.
	Recent time.Duration
	// Z is the normal quantile of the reported interval (1.96: 95 %).
	Z float64
	// ChangeZ is the normal quantile of the change test; it is wide, so
	// that a constant rate is taken for a change only rarely.
	ChangeZ float64
	// ChargeAlpha is the chance allowed, at any moment, that some link of
	// the whole overlay is charged for loss it does not have: the lower
	// bound that routing charges is taken at the one-sided confidence
	// 1 − ChargeAlpha/L for an overlay of L links (see ChargeZ). With
	// thousands of links, a 95 % bound on every one of them is above the
	// floor on a few at any time by chance alone.
	ChargeAlpha float64
}

// DefaultLossConfig suits probes every 100 ms or slower: 5 s buckets, up to
// 10 minutes, 50 losses, changes tested over the last 30 s at 99.9 %.
func DefaultLossConfig() LossConfig {
	return LossConfig{Bucket: 5 * time.Second, Span: 10 * time.Minute, Events: 50,
		Recent: 30 * time.Second, Z: 1.96, ChangeZ: 3.29, ChargeAlpha: 0.05}
}

// ChargeZ returns the normal quantile at which each of links simultaneous
// one-sided tests is made so that any of them errs with probability at
// most alpha (Bonferroni): 1.96 for the 2 links of 2 sites, 2.39 for the
// 6 of 3 sites, 3.65 for 380 (20 sites), 4.14 for 2,862 (54 sites). It is
// never below the one-sided 95 % quantile 1.645.
func ChargeZ(alpha float64, links int) float64 {
	if alpha <= 0 || alpha >= 1 {
		return 1.645
	}
	return max(1.645, math.Sqrt2*math.Erfinv(1-2*alpha/float64(max(links, 1))))
}

// LossEstimate is a loss rate with its confidence interval.
type LossEstimate struct {
	// Rate is the fraction of Samples that was lost.
	Rate float64
	// Low and High bound the true rate at the configured confidence
	// (Wilson score interval); with no samples they are 0 and 1.
	Low, High float64
	// Samples is the number of packets the estimate is over.
	Samples int
}

// NewLossEstimate returns the estimate of rate over samples packets with
// its Wilson interval at normal quantile z. Sites rebuild the interval
// this way from the rate and sample count that link state carries.
func NewLossEstimate(rate float64, samples int, z float64) LossEstimate {
	rate = min(max(rate, 0), 1)
	samples = max(samples, 0)
	lo, hi := WilsonInterval(rate, samples, z)
	return LossEstimate{Rate: rate, Low: lo, High: hi, Samples: samples}
}

// WilsonInterval returns the Wilson score interval of a proportion p
// observed in n trials at normal quantile z. Unlike p ± z·√(p(1−p)/n) it
// stays inside [0, 1] and is not empty at p = 0: no loss in 300 probes
// still allows 1.3 % at 95 %.
func WilsonInterval(p float64, n int, z float64) (low, high float64) {
	if n <= 0 {
		return 0, 1
	}
	fn := float64(n)
	z2 := z * z
	centre := (p + z2/(2*fn)) / (1 + z2/fn)
	half := z / (1 + z2/fn) * math.Sqrt(p*(1-p)/fn+z2/(4*fn*fn))
	return max(centre-half, 0), min(centre+half, 1)
}

// lossBucket counts the packets sent and lost in one bucket. Counts are
// signed: a reordered report can make one bucket's count of losses
// negative and the next one's too high, and only sums are meaningful.
type lossBucket struct {
	start      time.Time
	sent, lost int64
}

// LossWindow estimates the loss rate of one direction of a link.
type LossWindow struct {
	cfg     LossConfig
	buckets []lossBucket // ring, oldest at head
	head, n int
	// cached is the last estimate, good until cachedUntil (when its
	// oldest bucket leaves the span) or the next change of the counts.
	cached      LossEstimate
	cachedUntil time.Time
}

// NewLossWindow returns an empty window.
func NewLossWindow(cfg LossConfig) *LossWindow {
	return &LossWindow{cfg: cfg, buckets: make([]lossBucket, min(initialBuckets, maxBuckets(cfg)))}
}

// initialBuckets is the ring's first size. It grows to maxBuckets as the
// window fills, so that a site with hundreds of links pays for the
// history each link has, not for the longest possible one.
const initialBuckets = 8

// maxBuckets is the number of buckets a window of cfg can hold at once.
func maxBuckets(cfg LossConfig) int { return int(cfg.Span/cfg.Bucket) + 1 }

// grow doubles the ring, up to maxBuckets, keeping the buckets in order.
func (w *LossWindow) grow() {
	k := min(2*len(w.buckets), maxBuckets(w.cfg))
	if k <= len(w.buckets) {
		return
	}
	b := make([]lossBucket, k)
	for i := range w.n {
		b[i] = *w.at(i)
	}
	w.buckets, w.head = b, 0
}

// Reset forgets every count.
func (w *LossWindow) Reset() { w.head, w.n, w.cachedUntil = 0, 0, time.Time{} }

// at returns the i-th bucket, oldest first.
func (w *LossWindow) at(i int) *lossBucket { return &w.buckets[(w.head+i)%len(w.buckets)] }

// Add counts sent packets of which lost were lost, at now.
func (w *LossWindow) Add(now time.Time, sent, lost int) {
	if w.n == 0 || now.Sub(w.at(w.n-1).start) >= w.cfg.Bucket {
		w.open(now)
	}
	b := w.at(w.n - 1)
	b.sent += int64(sent)
	b.lost += int64(lost)
	w.cachedUntil = time.Time{}
}

// open closes the newest bucket (testing for a change of rate), drops
// buckets older than Span, and opens a bucket at now.
func (w *LossWindow) open(now time.Time) {
	if w.n > 0 {
		w.testChange()
	}
	for w.n > 0 && now.Sub(w.at(0).start) >= w.cfg.Span {
		w.drop(1)
	}
	if w.n == len(w.buckets) {
		w.grow()
	}
	if w.n == len(w.buckets) {
		w.drop(1)
	}
	w.n++
	*w.at(w.n - 1) = lossBucket{start: now}
}

func (w *LossWindow) drop(k int) {
	w.head = (w.head + k) % len(w.buckets)
	w.n -= k
}

// testChange compares the buckets within Recent of the newest one with
// all older ones and drops the older ones if the two rates differ at
// ChangeZ.
func (w *LossWindow) testChange() {
	newest := w.at(w.n - 1).start
	var rs, rl, os, ol int64
	split := w.n
	for i := w.n - 1; i >= 0; i-- {
		b := w.at(i)
		if newest.Sub(b.start) < w.cfg.Recent {
			rs, rl, split = rs+b.sent, rl+b.lost, i
		} else {
			os, ol = os+b.sent, ol+b.lost
		}
	}
	const enough = 50
	if rs < enough || os < enough {
		return
	}
	rlo, rhi := WilsonInterval(ratio(rl, rs), int(rs), w.cfg.ChangeZ)
	olo, ohi := WilsonInterval(ratio(ol, os), int(os), w.cfg.ChangeZ)
	if rhi < olo || rlo > ohi {
		w.drop(split)
	}
}

// Estimate returns the rate at now over the newest buckets that hold
// Events losses (or all of those within Span), with its interval.
// The estimate is kept until the counts change or its oldest bucket
// leaves the span, so that asking for it on every probe reply costs
// nothing.
func (w *LossWindow) Estimate(now time.Time) LossEstimate {
	if now.Before(w.cachedUntil) {
		return w.cached
	}
	var sent, lost int64
	until := now.Add(w.cfg.Span)
	for i := w.n - 1; i >= 0 && lost < int64(w.cfg.Events); i-- {
		b := w.at(i)
		if now.Sub(b.start) >= w.cfg.Span {
			break
		}
		sent, lost = sent+b.sent, lost+b.lost
		until = b.start.Add(w.cfg.Span)
	}
	w.cached, w.cachedUntil = NewLossEstimate(0, 0, w.cfg.Z), until
	if sent > 0 {
		w.cached = NewLossEstimate(ratio(lost, sent), int(sent), w.cfg.Z)
	}
	return w.cached
}

// ratio is lost/sent clamped to [0, 1].
func ratio(lost, sent int64) float64 {
	if sent <= 0 || lost <= 0 {
		return 0
	}
	return min(float64(lost)/float64(sent), 1)
}
