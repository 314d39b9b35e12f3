// Package linkstate keeps the matrix of measured links that every site
// floods, so that all sites route on the same data.
//
// Each site (an origin) reports its outgoing links: for each peer, the
// offset-shifted one-way delay, the round trip, loss, jitter and whether the
// link is up. Reporting outgoing links means that a dead site's stale report
// can never keep a path through it alive: the link into any site on a path
// is reported by the site before it, which is alive or itself reported dead
// by its own predecessor, back to the source.
//
// An origin's messages are ordered by (incarnation, sequence number). The
// Originator decides when this site sends its own: at once after a
// significant change (absolute thresholds on offset-shifted delays,
// relative ones only on round trips), and otherwise every refresh interval.
// Entries of an origin that has not been heard from for ExpireAfter are
// dropped.
//
// The package is pure: callers pass the current time in.
package linkstate

import (
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Link is one directed link as reported by its origin (From).
type Link struct {
	From, To wire.SiteID
	// seq is the sequence number of the message that last set this
	// entry: a delta message updates only entries older than itself.
	seq uint32
	Up  bool
	// Flapping says the link came up less than FlapWindow after it went
	// down (this site's knowledge, like UpSince below).
	Flapping bool
	// RevRateKind says what RevRate rests on (wire.RateKind*, zero when
	// nothing is known).
	RevRateKind uint8
	// Delay is the offset-shifted one-way delay.
	Delay  time.Duration
	RTT    time.Duration
	Jitter time.Duration
	// Loss is the fraction of the origin's probes on this link that did
	// not arrive, over LossSamples probes (0 if the origin did not say).
	Loss        float64
	LossSamples int
	// UpSince is when this site first held the link up in its current up
	// period (its own clock; zero while down). It is this site's
	// knowledge, not carried on the wire.
	UpSince time.Time
	// DriftPPM is how fast the origin sees Delay move with the clocks'
	// skew, in parts per million: DelayAt extrapolates by it.
	DriftPPM int
	// RevRate is the available throughput of the reverse link, To →
	// From, in bits per second, as From (that link's receiver) estimates
	// it, and RevRateAge how old the estimate was at At (see RateAge).
	RevRate    float64
	RevRateAge time.Duration
	// RateAt is when the message that carried the rate was received
	// (local clock; zero: At), for a rate kept from an earlier message
	// by one without a rate section.
	RateAt time.Time
	// At is when this value was measured or received (local clock).
	At time.Time
}

// DelayAt returns the delay extrapolated to now by the drift: between two
// reports the offset-shifted delay of a link between clocks that run at
// different rates moves by DriftPPM microseconds a second.
func (l Link) DelayAt(now time.Time) time.Duration {
	if l.DriftPPM == 0 || l.At.IsZero() {
		return l.Delay
	}
	return l.Delay + time.Duration(float64(now.Sub(l.At))*float64(l.DriftPPM)/1e6)
}

// RateAge returns how old the reverse rate estimate is at now.
func (l Link) RateAge(now time.Time) time.Duration {
	at := l.RateAt
	if at.IsZero() {
		at = l.At
	}
	if at.IsZero() {
		return l.RevRateAge
	}
	return l.RevRateAge + now.Sub(at)
}

// RateKnown reports whether the link carries a rate estimate of its
// reverse link (RevRate).
func (l *Link) RateKnown() bool { return l.RevRateKind != wire.RateKindNone && l.RevRate > 0 }

// keepRate gives l, from a message without a rate section, the rate
// that p (the entry it replaces, if any) holds.
func (l *Link) keepRate(p Link, had bool) {
	if !had {
		return
	}
	l.RevRate, l.RevRateKind, l.RevRateAge, l.RateAt = p.RevRate, p.RevRateKind, p.RevRateAge, p.RateAt
	if l.RateAt.IsZero() {
		l.RateAt = p.At
	}
}

// FlapWindow is how soon after going down a link that comes back up is
// taken to flap rather than to come up anew.
const FlapWindow = time.Minute

// Origin is the latest report of one site.
type Origin struct {
	ID          wire.SiteID
	Incarnation uint64
	Seq         uint32
	// Received is when the latest message was accepted (local clock).
	Received time.Time
	// Vouched is when the origin itself was last heard directly (a
	// probe or a reply from it; local clock): see DB.Vouch.
	Vouched time.Time
	// Links are the reported links, sorted by To, at most one per
	// destination. A slice, not a map: every route computation reads
	// every origin's links, N² of them.
	Links []Link
	// Version changes whenever Links do, and no two reports held by one
	// DB ever share it: a reader that remembers it knows whether the
	// links it read are still the latest.
	Version uint64
}

// Link returns the link to to of the report.
func (o *Origin) Link(to wire.SiteID) (Link, bool) {
	if o == nil {
		return Link{}, false
	}
	if i, ok := o.find(to); ok {
		return o.Links[i], true
	}
	return Link{}, false
}

// find returns where the link to to is or would be in Links.
// (A search by hand: slices.BinarySearchFunc would copy a Link per
// comparison.)
func (o *Origin) find(to wire.SiteID) (int, bool) {
	lo, hi := 0, len(o.Links)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if o.Links[mid].To < to {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(o.Links) && o.Links[lo].To == to
}

// put stores l in place of the link to l.To, keeping Links sorted.
// Entries usually come in order, so appending is the common case.
func (o *Origin) put(l Link) {
	if n := len(o.Links); n == 0 || o.Links[n-1].To < l.To {
		o.Links = append(o.Links, l)
		return
	}
	i, ok := o.find(l.To)
	if ok {
		o.Links[i] = l
		return
	}
	o.Links = slices.Insert(o.Links, i, l)
}

// DB holds the latest report of every origin, this site's own included.
type DB struct {
	expireAfter time.Duration
	origins     map[wire.SiteID]*Origin
	// downAt holds when each link last went down, for FlapWindow.
	downAt map[[2]wire.SiteID]time.Time
	// version is the latest Origin.Version given.
	version uint64
}

// NewDB returns an empty database whose entries expire after expireAfter
// without news from their origin.
func NewDB(expireAfter time.Duration) *DB {
	return &DB{expireAfter: expireAfter, origins: map[wire.SiteID]*Origin{}, downAt: map[[2]wire.SiteID]time.Time{}}
}

// Outcome says what Apply did with a message.
type Outcome int

// Apply outcomes.
const (
	Accepted Outcome = iota // newer than what we had: stored, flood it on
	Stale                   // same or older: ignored
)

// Apply stores a received link-state message if it is newer than the one
// held for its origin.
func (db *DB) Apply(now time.Time, ls *wire.LinkState) Outcome {
	if ls.Delta {
		return db.applyDelta(now, ls)
	}
	o := db.origins[ls.Origin]
	if o != nil && !newer(ls.Incarnation, ls.Seq, o.Incarnation, o.Seq) {
		return Stale
	}
	old := o
	o = &Origin{ID: ls.Origin, Incarnation: ls.Incarnation, Seq: ls.Seq, Received: now,
		Links: make([]Link, 0, len(ls.Entries))}
	for i := range ls.Entries {
		l := FromWire(ls.Origin, &ls.Entries[i])
		l.seq, l.At = ls.Seq, now
		if !ls.Rates && old != nil && old.Incarnation == ls.Incarnation {
			l.keepRate(old.Link(l.To))
		}
		o.put(l)
	}
	db.replace(now, old, o)
	return Accepted
}

// applyDelta applies a delta message: a newer incarnation starts the
// origin's row afresh with the entries carried; within the incarnation
// each entry replaces the one held if the message is newer than the
// message that set it, so that reordered messages cannot roll an entry
// back. The report is updated in place. The message is Stale when it
// changed nothing (a copy already applied, or an older incarnation).
func (db *DB) applyDelta(now time.Time, ls *wire.LinkState) Outcome {
	o := db.origins[ls.Origin]
	if o != nil && ls.Incarnation < o.Incarnation {
		return Stale
	}
	if o == nil || ls.Incarnation > o.Incarnation {
		fresh := &Origin{ID: ls.Origin, Incarnation: ls.Incarnation, Seq: ls.Seq, Received: now,
			Links: make([]Link, 0, len(ls.Entries))}
		for i := range ls.Entries {
			l := FromWire(ls.Origin, &ls.Entries[i])
			l.seq, l.At = ls.Seq, now
			fresh.put(l)
		}
		db.replace(now, o, fresh)
		return Accepted
	}
	applied := int32(ls.Seq-o.Seq) > 0
	for i := range ls.Entries {
		l := FromWire(ls.Origin, &ls.Entries[i])
		l.seq, l.At = ls.Seq, now
		p, had := o.Link(l.To)
		if had && int32(ls.Seq-p.seq) <= 0 {
			continue
		}
		if !ls.Rates {
			l.keepRate(p, had)
		}
		applied = true
		key := [2]wire.SiteID{o.ID, l.To}
		switch {
		case l.Up && had && p.Up:
			l.UpSince, l.Flapping = p.UpSince, p.Flapping
		case l.Up:
			down, ok := db.downAt[key]
			l.UpSince, l.Flapping = now, ok && now.Sub(down) < FlapWindow
		case had && p.Up:
			db.downAt[key] = now
		}
		o.put(l)
	}
	if !applied {
		return Stale
	}
	if int32(ls.Seq-o.Seq) > 0 {
		o.Seq = ls.Seq
	}
	o.Received = now
	o.Version = db.nextVersion()
	return Accepted
}

// replace makes o the report of its origin in place of old (nil if none),
// carrying over when each link came up and noting when links went down.
func (db *DB) replace(now time.Time, old, o *Origin) {
	for i := range o.Links {
		l := &o.Links[i]
		if !l.Up {
			continue
		}
		if p, ok := old.Link(l.To); ok && p.Up {
			l.UpSince, l.Flapping = p.UpSince, p.Flapping
		} else {
			down, ok := db.downAt[[2]wire.SiteID{o.ID, l.To}]
			l.UpSince, l.Flapping = now, ok && now.Sub(down) < FlapWindow
		}
	}
	db.wentDown(now, old, o)
	o.Version = db.nextVersion()
	db.origins[o.ID] = o
}

// nextVersion returns a version no report of the DB had.
func (db *DB) nextVersion() uint64 {
	db.version++
	return db.version
}

// wentDown records the links up in old and not in o (nil: none are) as
// down at now, and forgets the down times older than FlapWindow.
func (db *DB) wentDown(now time.Time, old, o *Origin) {
	if old == nil {
		return
	}
	for _, p := range old.Links {
		if l, ok := o.Link(p.To); p.Up && (!ok || !l.Up) {
			db.downAt[[2]wire.SiteID{old.ID, p.To}] = now
		}
	}
	if len(db.downAt) > 4*len(db.origins)*len(db.origins)+64 {
		for k, t := range db.downAt {
			if now.Sub(t) >= FlapWindow {
				delete(db.downAt, k)
			}
		}
	}
}

// newer orders (incarnation, seq) pairs; sequence numbers compare with
// serial-number arithmetic so that wrap-around is harmless.
func newer(inc uint64, seq uint32, oldInc uint64, oldSeq uint32) bool {
	if inc != oldInc {
		return inc > oldInc
	}
	return int32(seq-oldSeq) > 0
}

// SetOwn replaces this site's own report, which comes straight from its
// measurements rather than from the wire.
func (db *DB) SetOwn(now time.Time, self wire.SiteID, inc uint64, links []Link) {
	o := &Origin{ID: self, Incarnation: inc, Received: now, Links: make([]Link, 0, len(links))}
	old := db.origins[self]
	if old != nil {
		o.Seq = old.Seq
	}
	for _, l := range links {
		o.put(l)
	}
	db.replace(now, old, o)
}

// Link returns the link from → to as reported by from.
func (db *DB) Link(from, to wire.SiteID) (Link, bool) {
	return db.origins[from].Link(to)
}

// ReportsUp reports whether from's latest report says from → to is up.
func (db *DB) ReportsUp(from, to wire.SiteID) bool {
	o := db.origins[from]
	if o == nil {
		return false
	}
	i, ok := o.find(to)
	return ok && o.Links[i].Up
}

// Cursor answers ReportsUp for one origin and destinations asked in
// ascending order, each with a step along the origin's links instead of
// a search: flooding asks it for every member, for every report.
type Cursor struct {
	links []Link
	j     int
}

// Cursor returns a cursor over from's latest report. It must not be used
// after the database changes.
func (db *DB) Cursor(from wire.SiteID) Cursor {
	if o := db.origins[from]; o != nil {
		return Cursor{links: o.Links}
	}
	return Cursor{}
}

// Up reports whether the origin's latest report says its link to to is
// up. Asked out of order, it starts its walk over.
func (c *Cursor) Up(to wire.SiteID) bool {
	if c.j > 0 && c.links[c.j-1].To >= to {
		c.j = 0
	}
	for c.j < len(c.links) && c.links[c.j].To < to {
		c.j++
	}
	return c.j < len(c.links) && c.links[c.j].To == to && c.links[c.j].Up
}

// Origin returns the latest report of a site.
func (db *DB) Origin(id wire.SiteID) (*Origin, bool) {
	o, ok := db.origins[id]
	return o, ok
}

// Origins returns the IDs of all origins held, sorted.
func (db *DB) Origins() []wire.SiteID {
	ids := make([]wire.SiteID, 0, len(db.origins))
	for id := range db.origins {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Drop forgets an origin (a site that left or restarted). Links of other
// origins towards it are kept; routing ignores them while it is not a live
// member.
func (db *DB) Drop(id wire.SiteID) { db.DropAt(time.Time{}, id) }

// DropAt is Drop at a known time: the origin's links that were up count
// as gone down then.
func (db *DB) DropAt(now time.Time, id wire.SiteID) {
	if !now.IsZero() {
		db.wentDown(now, db.origins[id], nil)
	}
	delete(db.origins, id)
}

// Expire drops origins (other than self) not heard from for ExpireAfter
// (Fresh) and returns their IDs.
func (db *DB) Expire(now time.Time, self wire.SiteID) []wire.SiteID {
	var gone []wire.SiteID
	for id, o := range db.origins {
		if id != self && now.Sub(o.heard()) > db.expireAfter {
			gone = append(gone, id)
			db.wentDown(now, o, nil)
			delete(db.origins, id)
		}
	}
	slices.Sort(gone)
	return gone
}

// Retime replaces the time each origin was last heard from by f of it:
// a node that was not running for a while moves these times on, so that
// reports do not expire for the silence it could not observe.
func (db *DB) Retime(f func(time.Time) time.Time) {
	for _, o := range db.origins {
		o.Received = f(o.Received)
		if !o.Vouched.IsZero() {
			o.Vouched = f(o.Vouched)
		}
	}
}

// Vouch records that the origin id was heard directly at now: a site
// heard alive keeps its latest report fresh. Its reports come every
// second or so over the same path as its probes and replies, and on a
// lossy Internet several in a row are lost now and then somewhere in a
// large overlay (docs/loss.md); expiring the report then would take
// every link of a live relay out of the routes for a moment, and move
// the routes through it to worse paths and back. What changes in its
// links comes in its next report; a site that dies is no longer heard,
// and its report expires ExpireAfter after it last was.
func (db *DB) Vouch(id wire.SiteID, now time.Time) {
	if o := db.origins[id]; o != nil && now.After(o.Vouched) {
		o.Vouched = now
	}
}

// heard is when the origin was last heard from: its latest report, or
// itself directly.
func (o *Origin) heard() time.Time {
	if o.Vouched.After(o.Received) {
		return o.Vouched
	}
	return o.Received
}

// Fresh reports whether an origin's report was received, or the origin
// heard directly (Vouch), within ExpireAfter.
func (db *DB) Fresh(now time.Time, id wire.SiteID) bool {
	o := db.origins[id]
	return o != nil && now.Sub(o.heard()) <= db.expireAfter
}

// FromWire converts a wire entry of origin from.
func FromWire(from wire.SiteID, e *wire.LinkEntry) Link {
	l := Link{From: from, To: e.Peer, Up: e.Up(), Delay: time.Duration(e.Delay),
		RTT: wire.MicrosFromWire(e.RTT), Jitter: wire.MicrosFromWire(uint32(e.Jitter)),
		Loss: wire.LossFromWire(e.Loss), LossSamples: int(e.LossSamples), DriftPPM: int(e.Drift)}
	if e.RevRateKind != wire.RateKindNone && e.RevRate > 0 {
		l.RevRate, l.RevRateKind = float64(e.RevRate)*1e3, e.RevRateKind
		l.RevRateAge = time.Duration(e.RevRateAge) * time.Second
	}
	return l
}

// Rate returns the available throughput of the link from → to, in bits
// per second, as to (its receiver) reported it, with what it rests on and
// its age at now; ok is false when nothing is known.
func (db *DB) Rate(now time.Time, from, to wire.SiteID) (rate float64, kind uint8, age time.Duration, ok bool) {
	l, found := db.Link(to, from)
	if !found || !l.RateKnown() {
		return 0, 0, 0, false
	}
	return l.RevRate, l.RevRateKind, l.RateAge(now), true
}

// ToWire converts a link to its wire entry.
func ToWire(l Link) wire.LinkEntry {
	e := wire.LinkEntry{Peer: l.To, Loss: wire.LossToWire(l.Loss), RTT: wire.MicrosToWire(l.RTT),
		Jitter: uint16(min(wire.MicrosToWire(l.Jitter), 0xFFFF)), LossSamples: uint16(min(max(l.LossSamples, 0), 0xFFFF)),
		Delay: int64(l.Delay), Drift: int8(min(max(l.DriftPPM, -127), 127))}
	if l.Up {
		e.Flags |= wire.LinkFlagUp
	}
	if l.RevRateKind != wire.RateKindNone && l.RevRate >= 500 {
		e.RevRate = uint32(min(l.RevRate/1e3+0.5, float64(^uint32(0))))
		e.RevRateKind = l.RevRateKind
		e.RevRateAge = uint8(min(max(l.RevRateAge/time.Second, 0), 255))
	}
	return e
}
