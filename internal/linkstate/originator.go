package linkstate

import (
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// OriginatorConfig sets when a site sends its own link state.
type OriginatorConfig struct {
	// Refresh is the longest time between two messages.
	Refresh time.Duration
	// MinInterval is the shortest time between two messages, so that a
	// burst of changes costs one message.
	MinInterval time.Duration
	// DelayChange is the smallest change of an offset-shifted delay that
	// is sent at once (an absolute threshold: a percentage of an
	// offset-shifted value would be meaningless).
	DelayChange time.Duration
	// RTTChange and RTTFraction: a round-trip change of at least
	// max(RTTChange, RTTFraction × RTT) is sent at once.
	RTTChange   time.Duration
	RTTFraction float64
	// LossChange is the smallest change of loss sent at once.
	LossChange float64
	// Delta sends only what changed (BuildDelta): a link is sent when it
	// moved from what was last sent by DeltaDelay or more (or in state,
	// round trip or loss as above), then repeated in the next Repeats
	// messages in case one is lost (a repeat alone does not make a
	// message due: it waits for the next one, at most Refresh later); every message also carries a share
	// of the other links, oldest sent first, so that each is sent again
	// at least every FullRefresh. Refresh is then the longest time
	// between two messages (which keeps the report fresh at the
	// receivers), and carries the share due.
	Delta       bool
	DeltaDelay  time.Duration
	Repeats     int
	FullRefresh time.Duration
}

// DefaultOriginatorConfig refreshes every second and sends changes of
// 1 ms, 5 % of the RTT or 5 % loss at once, at most every 100 ms. Smaller
// drifts wait for the refresh: they are below what routing switches for
// (0.5 ms at least, held for 300 ms), and sending them at once floods
// the overlay with the noise of busy hosts.
func DefaultOriginatorConfig() OriginatorConfig {
	return OriginatorConfig{
		Refresh:     time.Second,
		MinInterval: 100 * time.Millisecond,
		DelayChange: time.Millisecond,
		RTTChange:   time.Millisecond,
		RTTFraction: 0.05,
		LossChange:  0.05,
	}
}

// Originator builds this site's link-state messages.
type Originator struct {
	cfg         OriginatorConfig
	self        wire.SiteID
	incarnation uint64
	seq         uint32
	last        map[wire.SiteID]Link
	lastAt      time.Time
	// sent holds, in delta mode, what was last sent of each link.
	sent map[wire.SiteID]*sentLink
	// ratesSent holds the links as the last whole row with its rate
	// section carried them, and ratesAt when (see Build).
	ratesSent map[wire.SiteID]Link
	ratesAt   time.Time
}

// sentLink is what an originator in delta mode last sent of one link:
// the value, when, and how many more messages must repeat it.
type sentLink struct {
	link    Link
	at      time.Time
	repeats int
}

// NewOriginator returns an originator for site self.
func NewOriginator(cfg OriginatorConfig, self wire.SiteID, incarnation uint64) *Originator {
	return &Originator{cfg: cfg, self: self, incarnation: incarnation, last: map[wire.SiteID]Link{},
		sent: map[wire.SiteID]*sentLink{}, ratesSent: map[wire.SiteID]Link{}}
}

// SetFullRefresh changes the longest time between two sendings of one
// link in delta mode.
func (o *Originator) SetFullRefresh(d time.Duration) { o.cfg.FullRefresh = d }

// SetMinInterval changes the shortest time between two messages.
func (o *Originator) SetMinInterval(d time.Duration) { o.cfg.MinInterval = d }

// Due reports whether a message should be sent now for the given current
// links: the refresh interval has passed, or a link changed significantly
// and MinInterval has passed.
func (o *Originator) Due(now time.Time, links []Link) bool {
	if o.lastAt.IsZero() || now.Sub(o.lastAt) >= o.cfg.Refresh {
		return true
	}
	if now.Sub(o.lastAt) < o.cfg.MinInterval {
		return false
	}
	return o.changed(links)
}

// NextDue returns the time of the next refresh.
func (o *Originator) NextDue() time.Time { return o.lastAt.Add(o.cfg.Refresh) }

func (o *Originator) changed(links []Link) bool {
	if o.cfg.Delta {
		for _, l := range links {
			if p, ok := o.sent[l.To]; !ok || o.moved(p.link, l) {
				return true // repeats alone wait for the next message
			}
		}
		return false
	}
	if len(links) != len(o.last) {
		return true
	}
	for _, l := range links {
		p, ok := o.last[l.To]
		if !ok || o.significant(p, l) {
			return true
		}
	}
	return false
}

// significant compares a link with what was last sent.
func (o *Originator) significant(p, l Link) bool {
	if p.Up != l.Up {
		return true
	}
	if abs(l.Delay-p.DelayAt(l.At)) >= o.cfg.DelayChange || rateMoved(p, l) {
		return true
	}
	rttTh := max(o.cfg.RTTChange, time.Duration(o.cfg.RTTFraction*float64(p.RTT)))
	if abs(l.RTT-p.RTT) >= rttTh {
		return true
	}
	d := l.Loss - p.Loss
	return d >= o.cfg.LossChange || -d >= o.cfg.LossChange
}

// Build returns the next messages carrying links and records them as
// sent. A row that fits in one message with its rate section
// (wire.MaxRatedLinkEntries links) is sent whole, replacing what receivers
// hold. A longer row that fits without it (wire.MaxLinkEntries) is sent
// whole without rates, which receivers then keep from the last message
// that carried them, except when rates are due (ratesDue): rates change
// slowly, and sending them with every report would split every report
// of an overlay of 51 to 58 sites in two, doubling the messages every
// site receives and floods. A row too long for either is split, sorted
// by peer ID, into delta messages, each with its own sequence number and
// rates, that receivers apply entry by entry (as the delta scheme's rows
// are): a whole row cut short would make every receiver drop the links
// beyond it, and note them as gone down.
func (o *Originator) Build(now time.Time, links []Link) []wire.LinkState {
	o.lastAt = now
	clear(o.last)
	for _, l := range links {
		o.last[l.To] = l
	}
	rates := len(links) <= wire.MaxRatedLinkEntries || len(links) > wire.MaxLinkEntries || o.ratesDue(now, links)
	if rates {
		o.ratesAt = now
		clear(o.ratesSent)
		for _, l := range links {
			o.ratesSent[l.To] = l
		}
	}
	limit := wire.MaxLinkEntries
	if rates {
		limit = wire.MaxRatedLinkEntries
	}
	return o.chunks(links, len(links) > limit, rates)
}

// rateResend is the longest time between two whole rows with their
// rates, for a row sent without them in between (Build). A receiver that
// joined meanwhile gets the rates from Full.
const rateResend = 10 * time.Second

// ratesDue reports whether the next whole row must carry its rates: it
// never did, rateResend has passed, a link appeared or vanished, or a
// rate moved since the last row that carried them (rateMoved).
func (o *Originator) ratesDue(now time.Time, links []Link) bool {
	if o.ratesAt.IsZero() || now.Sub(o.ratesAt) >= rateResend || len(links) != len(o.ratesSent) {
		return true
	}
	for _, l := range links {
		if p, ok := o.ratesSent[l.To]; !ok || rateMoved(p, l) {
			return true
		}
	}
	return false
}

// Seq returns the sequence number of the last message built.
func (o *Originator) Seq() uint32 { return o.seq }

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// pending reports whether a link must go into the next delta message: it
// was never sent, it moved from what was sent, or a repeat is due.
func (o *Originator) pending(l Link) bool {
	p, ok := o.sent[l.To]
	return !ok || p.repeats > 0 || o.moved(p.link, l)
}

// rateChange is the relative change of a reverse rate estimate that is
// sent at once: less is within the noise of the estimators.
const rateChange = 0.2

// rateMoved reports whether the reverse rate estimate changed in kind or
// by rateChange or more.
func rateMoved(p, l Link) bool {
	if p.RevRateKind != l.RevRateKind {
		return true
	}
	return l.RevRateKind != wire.RateKindNone && abs64(l.RevRate-p.RevRate) >= rateChange*max(l.RevRate, p.RevRate)
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// lossMoved reports whether a lossy link's sample count doubled or halved
// since it was sent, which changes its confidence interval at the
// receivers.
func lossMoved(p, l Link) bool {
	if l.Loss == 0 && p.Loss == 0 {
		return false
	}
	return l.LossSamples >= 2*p.LossSamples || 2*l.LossSamples <= p.LossSamples
}

// BuildDelta returns the next delta messages for the current links and
// records what they carry as sent: the links pending (new, moved, or
// repeated), and the share of the others due for refresh, oldest sent
// first: len(links) × the time since the last message / FullRefresh,
// rounded up. Links beyond wire.MaxRatedLinkEntries go into further messages,
// each with its own sequence number. With nothing to carry it returns
// one empty message, which keeps the report fresh.
func (o *Originator) BuildDelta(now time.Time, links []Link) []wire.LinkState {
	since := o.cfg.Refresh
	if !o.lastAt.IsZero() {
		since = now.Sub(o.lastAt)
	}
	o.lastAt = now
	var carry, rest []Link
	for _, l := range links {
		if o.pending(l) {
			carry = append(carry, l)
		} else {
			rest = append(rest, l)
		}
	}
	share := 0
	if o.cfg.FullRefresh > 0 {
		share = int((int64(len(links))*int64(since) + int64(o.cfg.FullRefresh) - 1) / int64(o.cfg.FullRefresh))
	}
	slices.SortFunc(rest, func(a, b Link) int {
		if c := o.sent[a.To].at.Compare(o.sent[b.To].at); c != 0 {
			return c
		}
		return int(int64(a.To) - int64(b.To))
	})
	carry = append(carry, rest[:min(share, len(rest))]...)
	for _, l := range carry {
		p := o.sent[l.To]
		switch {
		case p == nil:
			p = &sentLink{repeats: o.cfg.Repeats}
			o.sent[l.To] = p
		case p.repeats > 0 && !o.moved(p.link, l):
			p.repeats--
		case o.moved(p.link, l):
			p.repeats = o.cfg.Repeats
		}
		p.link, p.at = l, now
	}
	return o.chunks(carry, true, true)
}

// moved reports whether a link differs from what was sent by enough to
// be sent (and repeated) again.
// The delay is compared with what the receivers extrapolate from the
// value sent and its drift; a new estimate of the drift alone is not sent
// (it goes with the next value), since what matters is whether the
// receivers' extrapolation is still right.
func (o *Originator) moved(p, l Link) bool {
	return o.significant(p, l) || abs(l.Delay-p.DelayAt(l.At)) >= o.cfg.DeltaDelay || lossMoved(p, l)
}

// Full returns the whole row as delta messages under the latest sequence
// number, for a member that has none of it (it just joined or came
// back); nothing is recorded as sent.
func (o *Originator) Full(links []Link) []wire.LinkState {
	seq := o.seq
	o.seq--
	out := o.chunks(links, true, true)
	o.seq = seq
	for i := range out {
		out[i].Seq = seq
	}
	return out
}

// chunks puts links, sorted by peer ID, into messages of at most
// wire.MaxRatedLinkEntries entries with the rate section
// (wire.MaxLinkEntries without), each with the next sequence number (one
// empty message when there are none).
func (o *Originator) chunks(links []Link, delta, rates bool) []wire.LinkState {
	sorted := slices.Clone(links)
	slices.SortFunc(sorted, func(a, b Link) int { return int(int64(a.To) - int64(b.To)) })
	limit := wire.MaxLinkEntries
	if rates {
		limit = wire.MaxRatedLinkEntries
	}
	var out []wire.LinkState
	for first := true; first || len(sorted) > 0; first = false {
		k := min(len(sorted), limit)
		o.seq++
		ls := wire.LinkState{Origin: o.self, Incarnation: o.incarnation, Seq: o.seq, Delta: delta, Rates: rates,
			Entries: make([]wire.LinkEntry, 0, k)}
		for _, l := range sorted[:k] {
			ls.Entries = append(ls.Entries, ToWire(l))
		}
		out = append(out, ls)
		sorted = sorted[k:]
	}
	return out
}
