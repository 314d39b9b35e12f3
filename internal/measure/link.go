package measure

import (
	"errors"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Config tunes the measurement of a link.
type Config struct {
	// DownAfter declares a link down when no reply has arrived for this
	// long.
	DownAfter time.Duration
	// LossWindow is the number of recent probes loss is computed over.
	LossWindow int
	Filter     FilterConfig
}

// DefaultConfig suits probes every 100 ms: a link is down after 5 missed
// probes, and loss is measured over the last 50 (5 s), in steps of 2 %.
func DefaultConfig() Config {
	return Config{DownAfter: 500 * time.Millisecond, LossWindow: 50, Filter: DefaultFilterConfig()}
}

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

// Link measures the outgoing link from this site to one peer, from this
// site's probes and the peer's replies.
type Link struct {
	cfg       Config
	seq       uint32
	ring      [ringLen]sentProbe
	sent      int // probes sent since the last reset
	delay     *Filter
	rtt       *Filter
	lastReply time.Time
	replies   uint64
}

// NewLink returns a link with no samples; it is down until a reply arrives.
func NewLink(cfg Config) *Link {
	return &Link{cfg: cfg, delay: NewFilter(cfg.Filter), rtt: NewFilter(cfg.Filter)}
}

// Reset forgets all samples, as when the peer restarted.
func (l *Link) Reset() {
	l.delay.Reset()
	l.rtt.Reset()
	l.ring = [ringLen]sentProbe{}
	l.sent = 0
	l.lastReply = time.Time{}
}

// Probe records a probe sent at now and returns its sequence number and
// send timestamp (nanoseconds on this site's clock).
func (l *Link) Probe(now time.Time) (seq uint32, stamp int64) {
	l.seq++
	stamp = now.UnixNano()
	l.ring[l.seq%ringLen] = sentProbe{seq: l.seq, at: now, stamp: stamp}
	l.sent++
	return l.seq, stamp
}

// MaxRestamp is how much later than recorded by Probe the echoed send
// time t1 of a reply may be: the sender's I/O shell restamps each probe
// just before it leaves (wire.Restamp), so that the time a busy sender
// took to send it is not measured as delay.
const MaxRestamp = time.Second

// OnReply takes a reply received at now and adds its samples: the
// offset-shifted one-way delay t2 − t1 and the round trip
// (t4 − t1) − (t3 − t2), with t1 as echoed by the reply (the restamped
// send time, within MaxRestamp of the recorded one).
func (l *Link) OnReply(now time.Time, r *wire.ProbeReply) error {
	p := &l.ring[r.Seq%ringLen]
	late := time.Duration(r.ProbeSendTime - p.stamp)
	if p.seq != r.Seq || late < 0 || late > MaxRestamp || p.at.IsZero() {
		return ErrUnknownProbe
	}
	if p.replied {
		return ErrDuplicate
	}
	hold := time.Duration(r.ReplySendTime - r.ProbeRecvTime)
	rtt := now.Sub(p.at.Add(late)) - hold
	if hold < 0 || rtt < 0 {
		return ErrBadTimes
	}
	p.replied = true
	l.delay.Add(now, time.Duration(r.ProbeRecvTime-r.ProbeSendTime))
	l.rtt.Add(now, rtt)
	l.lastReply = now
	l.replies++
	return nil
}

// Up reports whether a reply arrived within DownAfter.
func (l *Link) Up(now time.Time) bool {
	return !l.lastReply.IsZero() && now.Sub(l.lastReply) < l.cfg.DownAfter
}

// SetDownAfter changes the time without a reply after which the link is
// down (the control plane scales it with the probe interval).
func (l *Link) SetDownAfter(d time.Duration) { l.cfg.DownAfter = d }

// LastReply returns when the last valid reply arrived (zero if none).
func (l *Link) LastReply() time.Time { return l.lastReply }

// Loss returns the fraction of the last LossWindow probes that got no
// reply, counting only probes older than a grace period of twice the RTT
// plus 500 ms (one second before the RTT is known): a reply held up by a
// busy responder is late, not lost. Failures are caught sooner by Up.
func (l *Link) Loss(now time.Time) float64 {
	grace := time.Second
	if rtt, ok := l.rtt.Estimate(now); ok {
		grace = 2*rtt + 500*time.Millisecond
	}
	total, lost := 0, 0
	for i := uint32(0); i < ringLen && total < l.cfg.LossWindow && int(i) < l.sent; i++ {
		p := &l.ring[(l.seq-i)%ringLen]
		if p.seq != l.seq-i || p.at.IsZero() {
			break
		}
		if now.Sub(p.at) < grace {
			continue
		}
		total++
		if !p.replied {
			lost++
		}
	}
	if total == 0 {
		return 0
	}
	return float64(lost) / float64(total)
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
	Loss   float64
	// Age is the time since the newest sample.
	Age time.Duration
}

// Stats returns the link's current estimates.
func (l *Link) Stats(now time.Time) Stats {
	s := Stats{Up: l.Up(now), Loss: l.Loss(now), Jitter: l.delay.Jitter()}
	d, ok1 := l.delay.Estimate(now)
	r, ok2 := l.rtt.Estimate(now)
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
