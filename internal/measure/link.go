package measure

import (
	"errors"
	"math"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Config tunes the measurement of a link.
type Config struct {
	// DownAfter declares a link down when no reply has arrived for this
	// long: BaseMisses probe intervals. A lossy link is given more, so
	// that a run of lost probes that its loss makes likely is not taken
	// for an outage (see Link.DownAfter).
	DownAfter time.Duration
	// Loss tunes the loss estimate of each direction.
	Loss   LossConfig
	Filter FilterConfig
}

// DefaultConfig suits probes every 100 ms: a link is down after 5 missed
// probes.
func DefaultConfig() Config {
	return Config{DownAfter: 500 * time.Millisecond, Loss: DefaultLossConfig(), Filter: DefaultFilterConfig()}
}

// BaseMisses is the number of probe intervals that Config.DownAfter is
// taken to be.
const BaseMisses = 5

// falseDown is the probability, per probe, with which a link that loses
// probes or replies at its measured rate may be declared down by a run of
// losses alone: at ten probes a second on the 380 links of 20 sites, about
// ten false outages a month in the whole overlay.
const falseDown = 1e-9

// Errors returned by Link.OnReply.
var (
	ErrUnknownProbe = errors.New("measure: reply to an unknown or expired probe")
	ErrDuplicate    = errors.New("measure: duplicate reply")
	ErrBadTimes     = errors.New("measure: reply with impossible timestamps")
)

const ringLen = 64

type sentProbe struct {
	seq     uint32
	at      time.Time
	stamp   int64
	replied bool
}

// Link measures the link to one peer, in both directions, from this
// site's probes and the peer's replies.
type Link struct {
	cfg       Config
	seq       uint32
	ring      [ringLen]sentProbe
	delay     *Filter
	rtt       *Filter
	inband    *Filter // the data packets' samples (AddInband)
	lastReply time.Time
	replies   uint64
	// out and back estimate the loss of the outgoing direction (probes)
	// and of the return direction (replies).
	out, back *LossWindow
	// ref is the newest reply that loss has been counted up to.
	ref lossRef
	// downAfter is DownAfter stretched for the link's loss.
	downAfter time.Duration
	// confirm is what Confirm reports for the latest reply or in-band
	// samples.
	confirm int
}

// lossRef is the point up to which a link's losses are counted: the
// newest reply's probe sequence number, the responder's count of probes
// received that it carried, and how many replies had arrived by then.
type lossRef struct {
	valid   bool
	seq     uint32
	recv    uint32
	replies uint64
}

// NewLink returns a link with no samples; it is down until a reply arrives.
func NewLink(cfg Config) *Link {
	return &Link{cfg: cfg, delay: NewFilter(cfg.Filter), rtt: NewFilter(cfg.Filter), inband: NewFilter(InbandFilterConfig()),
		out: NewLossWindow(cfg.Loss), back: NewLossWindow(cfg.Loss), downAfter: cfg.DownAfter}
}

// Reset forgets all samples, as when the peer restarted.
func (l *Link) Reset() {
	l.delay.Reset()
	l.rtt.Reset()
	l.inband.Reset()
	l.ring = [ringLen]sentProbe{}
	l.lastReply = time.Time{}
	l.out.Reset()
	l.back.Reset()
	l.ref = lossRef{}
	l.downAfter = l.cfg.DownAfter
}

// Probe records a probe sent at now and returns its sequence number and
// send timestamp (nanoseconds on this site's clock).
func (l *Link) Probe(now time.Time) (seq uint32, stamp int64) {
	l.seq++
	stamp = now.UnixNano()
	l.ring[l.seq%ringLen] = sentProbe{seq: l.seq, at: now, stamp: stamp}
	return l.seq, stamp
}

// MaxRestamp is how much later than recorded by Probe the echoed send
// time t1 of a reply may be: the sender's I/O shell restamps each probe
// just before it leaves (wire.Restamp), so that the time a busy sender
// took to send it is not measured as delay.
const MaxRestamp = time.Second

// OnReply takes a reply read at rx and handled at now (rx is t4, and may
// be earlier than times already given) and adds its samples, at now: the
// offset-shifted one-way delay t2 − t1 and the round trip
// (t4 − t1) − (t3 − t2), with t1 as echoed by the reply (the restamped
// send time, within MaxRestamp of the recorded one).
func (l *Link) OnReply(now, rx time.Time, r *wire.ProbeReply) error {
	l.confirm = 0
	p := &l.ring[r.Seq%ringLen]
	late := time.Duration(r.ProbeSendTime - p.stamp)
	if p.seq != r.Seq || late < 0 || late > MaxRestamp || p.at.IsZero() {
		return ErrUnknownProbe
	}
	if p.replied {
		return ErrDuplicate
	}
	hold := time.Duration(r.ReplySendTime - r.ProbeRecvTime)
	rtt := rx.Sub(p.at.Add(late)) - hold
	if hold < 0 || rtt < 0 {
		return ErrBadTimes
	}
	p.replied = true
	l.delay.Add(now, time.Duration(r.ProbeRecvTime-r.ProbeSendTime))
	l.confirm = l.delay.Undecided()
	l.rtt.Add(now, rtt)
	l.countLoss(now, r)
	l.stretchDownAfter(now)
	l.lastReply = now
	l.replies++
	return nil
}

// AddInband adds samples of the link's offset-shifted delay taken by data
// packets at the far end (on the scale of the probes' t2 − t1), at now. A
// link that is down takes none: its probes decide when it is up. It
// reports whether the samples were taken.
//
// The samples have their own filter (InbandFilterConfig), which follows a
// rise within a few samples and a fall only as its window ages; Stats
// reports it while it is fresh and higher than the probes' estimate. So a
// link whose queue fills under traffic is seen at once, and one whose
// queue saw-tooths under a TCP flow (draining for a moment at each
// loss) is not taken for idle at every drain.
func (l *Link) AddInband(now time.Time, delays []int64) bool {
	l.confirm = 0
	if !l.Up(now) {
		return false
	}
	began := false
	for _, d := range delays {
		l.inband.Add(now, time.Duration(d))
		began = began || l.inband.Undecided() > 0
	}
	if began && l.inband.Rising() && !l.delay.Rising() {
		l.confirm = l.cfg.Filter.StepCount
	}
	return true
}

// Confirm returns how many probes the prober should send at once, after
// the latest reply (OnReply) or in-band samples (AddInband), to learn
// within a round trip whether the link got slower: the probes' filter
// needs that many more samples to decide a rise the reply began or left
// unsettled (Filter.Undecided), or in-band samples began a rise that the
// probes have not seen yet. Zero means none.
func (l *Link) Confirm() int { return l.confirm }

// countLoss counts the probes and replies lost since the last reference
// reply, given a new valid reply r (not yet counted in l.replies), and
// makes r the reference if it is newer. Probes sent after the newest reply
// are not counted yet: they may still be answered. A gap of more than
// DownAfter without replies is an outage, which Up reports; it is not
// counted as loss. Neither is anything across a restart of the responder
// (its count goes back) or a reply whose count is impossible.
func (l *Link) countLoss(now time.Time, r *wire.ProbeReply) {
	replies := l.replies + 1
	ref := l.ref
	next := lossRef{valid: true, seq: r.Seq, recv: r.Received, replies: replies}
	if ref.valid && int32(r.Seq-ref.seq) <= 0 {
		return // an older probe's reply: counted when the next newer one comes
	}
	l.ref = next
	if !ref.valid || l.lastReply.IsZero() || now.Sub(l.lastReply) > l.downAfter {
		return
	}
	sent := int64(r.Seq - ref.seq)
	arrived := int64(replies - ref.replies)
	if !r.HasReceived {
		// Only the round trip is known: charge it to the outgoing
		// direction, the one this site reports.
		l.out.Add(now, int(sent), int(max(sent-arrived, 0)))
		return
	}
	got := int64(int32(r.Received - ref.recv))
	if got < 0 || got > sent {
		return
	}
	l.out.Add(now, int(sent), int(sent-got))
	l.back.Add(now, int(got), int(got-arrived))
}

// Up reports whether a reply arrived within DownAfter.
func (l *Link) Up(now time.Time) bool {
	return !l.lastReply.IsZero() && now.Sub(l.lastReply) < l.downAfter
}

// DownAfter returns how long the link may go without a reply before it is
// down: Config.DownAfter (BaseMisses probe intervals), or more on a link
// whose measured round-trip loss p makes a run of BaseMisses losses
// likelier than falseDown: then as many intervals k as make p^k smaller
// than falseDown (6 at 2 %, 9 at 10 %).
func (l *Link) DownAfter() time.Duration { return l.downAfter }

// stretchDownAfter recomputes DownAfter from the loss estimates at now.
func (l *Link) stretchDownAfter(now time.Time) {
	out, back := l.Loss(now)
	p := 1 - (1-out.Rate)*(1-back.Rate)
	l.downAfter = l.cfg.DownAfter
	if p <= 0 || p >= 1 {
		return
	}
	k := math.Ceil(math.Log(falseDown) / math.Log(p))
	if k > BaseMisses {
		l.downAfter = time.Duration(float64(l.cfg.DownAfter) * min(k, 4*BaseMisses) / BaseMisses)
	}
}

// SetDownAfter changes the time without a reply after which the link is
// down (the control plane scales it with the probe interval); the
// stretch for loss is applied again at the next reply.
func (l *Link) SetDownAfter(d time.Duration) { l.cfg.DownAfter, l.downAfter = d, d }

// Pause tells the link that its prober was not running from "from" to
// "to": the silence it could not observe does not count towards
// DownAfter, and its samples do not age meanwhile (see Resumed).
func (l *Link) Pause(from, to time.Time) {
	l.lastReply = Resumed(l.lastReply, from, to)
	l.delay.Pause(from, to)
	l.rtt.Pause(from, to)
	l.inband.Pause(from, to)
}

// Resumed returns at, the time of a last sign of life, moved on by the
// length of its observer's pause from "from" to "to", but never past
// "to": the silence that counts is the time the observer ran. The zero
// time stays zero, and a time not before "to" stays as it is.
func Resumed(at, from, to time.Time) time.Time {
	if at.IsZero() || !at.Before(to) {
		return at
	}
	return minTime(at.Add(to.Sub(from)), to)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// LastReply returns when the last valid reply arrived (zero if none).
func (l *Link) LastReply() time.Time { return l.lastReply }

// Loss returns the loss estimates of the outgoing direction (probes that
// did not reach the peer) and of the return direction (replies that did
// not come back).
func (l *Link) Loss(now time.Time) (out, back LossEstimate) {
	return l.out.Estimate(now), l.back.Estimate(now)
}

// Stats is a snapshot of a link's estimates.
type Stats struct {
	Up bool
	// Valid is true once there are samples; the values below are zero
	// otherwise.
	Valid bool
	// Delay is the offset-shifted one-way delay d + o(from) − o(to).
	Delay time.Duration
	// RTT is the round trip between the two sites, offset-free.
	RTT time.Duration
	// OneWayEstimate is RTT/2, an estimate of the absolute one-way delay;
	// the truth lies in (0, RTT).
	OneWayEstimate time.Duration
	// MeanDelay is the plain mean of the window's offset-shifted one-way
	// samples: what a packet typically sees, queueing included (Delay is
	// the robust floor that routing compares).
	MeanDelay time.Duration
	// Jitter is the smoothed mean difference between consecutive one-way
	// samples.
	Jitter time.Duration
	// Loss is the outgoing direction's loss with its interval, and
	// ReturnLoss the return direction's.
	Loss, ReturnLoss LossEstimate
	// Age is the time since the newest sample.
	Age time.Duration
}

// Stats returns the link's current estimates.
func (l *Link) Stats(now time.Time) Stats {
	s := Stats{Up: l.Up(now), Jitter: l.delay.Jitter()}
	s.Loss, s.ReturnLoss = l.Loss(now)
	d, ok1 := l.delay.Estimate(now)
	r, ok2 := l.rtt.Estimate(now)
	if in, ok := l.inband.Estimate(now); ok && ok1 && in > d {
		d = in
	}
	if ok1 && ok2 {
		s.Valid, s.Delay, s.RTT, s.OneWayEstimate = true, d, r, r/2
		s.MeanDelay, _ = l.delay.Mean(now)
		s.Age = now.Sub(l.lastReply)
	}
	if !s.Valid {
		s.Up = false
	}
	return s
}
