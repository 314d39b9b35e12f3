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
}

// NewOriginator returns an originator for site self.
func NewOriginator(cfg OriginatorConfig, self wire.SiteID, incarnation uint64) *Originator {
	return &Originator{cfg: cfg, self: self, incarnation: incarnation, last: map[wire.SiteID]Link{}}
}

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
	if abs(l.Delay-p.Delay) >= o.cfg.DelayChange {
		return true
	}
	rttTh := max(o.cfg.RTTChange, time.Duration(o.cfg.RTTFraction*float64(p.RTT)))
	if abs(l.RTT-p.RTT) >= rttTh {
		return true
	}
	d := l.Loss - p.Loss
	return d >= o.cfg.LossChange || -d >= o.cfg.LossChange
}

// Build returns the next message carrying links and records it as sent.
// Links beyond wire.MaxLinkEntries are left out (sorted by peer ID).
func (o *Originator) Build(now time.Time, links []Link) wire.LinkState {
	o.seq++
	o.lastAt = now
	clear(o.last)
	sorted := slices.Clone(links)
	slices.SortFunc(sorted, func(a, b Link) int { return int(int64(a.To) - int64(b.To)) })
	if len(sorted) > wire.MaxLinkEntries {
		sorted = sorted[:wire.MaxLinkEntries]
	}
	ls := wire.LinkState{Origin: o.self, Incarnation: o.incarnation, Seq: o.seq,
		Entries: make([]wire.LinkEntry, 0, len(sorted))}
	for _, l := range sorted {
		o.last[l.To] = l
		ls.Entries = append(ls.Entries, ToWire(l))
	}
	return ls
}

// Seq returns the sequence number of the last message built.
func (o *Originator) Seq() uint32 { return o.seq }

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
