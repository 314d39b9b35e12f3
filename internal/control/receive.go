package control

import (
	"errors"
	"math"
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/linkstate"
	"github.com/detour-overlay/detour/internal/measure"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// Receive handles one control datagram from the underlay address from,
// read at rx. It never panics: a datagram that cannot be used is dropped,
// counted by reason, and reported as an error (which callers may ignore).
// pkt is not retained.
//
// rx may be earlier than a time the node has already been given, when a
// shell reads a datagram before a tick and hands it over after: the
// measurements (a probe's arrival, a reply's round trip, a train's
// dispersion) take rx, when the datagram really came, and everything else
// takes the latest time the node has seen, so that its clock never goes
// back. Clamping rx instead would add the time the datagram waited in the
// shell to every sample, and give a train that waited behind a tick the
// same time for all its packets.
func (n *Node) Receive(rx time.Time, from netip.AddrPort, pkt []byte) error {
	n.observe(rx)
	err := n.receive(n.last, rx, from, pkt)
	if err != nil {
		n.counters.Dropped[dropKind(err)]++
	}
	return err
}

func (n *Node) receive(now, rx time.Time, from netip.AddrPort, pkt []byte) error {
	t, _, err := wire.ParseCommon(pkt)
	if err != nil {
		return err
	}
	n.counters.countIn(t, len(pkt))
	if n.left {
		return ErrLeft
	}
	switch t {
	case wire.TypeProbe:
		return n.onProbe(now, rx, from, pkt)
	case wire.TypeProbeReply:
		return n.onProbeReply(now, rx, pkt)
	case wire.TypeLinkState:
		return n.onLinkState(now, from, pkt)
	case wire.TypeHello:
		return n.onHello(now, from, pkt)
	case wire.TypeMembers:
		return n.onMembers(now, from, pkt)
	case wire.TypeLeave:
		return n.onLeave(now, pkt)
	case wire.TypeTrain:
		return n.onTrain(now, rx, pkt)
	case wire.TypeInband:
		return n.onInband(now, pkt)
	case wire.TypeData:
		return ErrNotControl
	}
	return ErrUnknownType
}

func dropKind(err error) Drop {
	switch {
	case errors.Is(err, wire.ErrTruncated):
		return DropTruncated
	case errors.Is(err, wire.ErrBadMagic):
		return DropBadMagic
	case errors.Is(err, wire.ErrBadVersion):
		return DropBadVersion
	case errors.Is(err, ErrNotControl):
		return DropData
	case errors.Is(err, ErrUnknownType):
		return DropUnknownType
	case errors.Is(err, ErrMisdirected):
		return DropMisdirected
	case errors.Is(err, ErrUnknownSite):
		return DropUnknownSender
	case errors.Is(err, ErrStaleReply):
		return DropStaleReply
	case errors.Is(err, ErrIDMismatch):
		return DropIDMismatch
	case errors.Is(err, ErrIDCollision):
		return DropIDCollision
	case errors.Is(err, ErrStale):
		return DropStale
	case errors.Is(err, ErrLeft):
		return DropLeft
	}
	return DropMalformed
}

// onProbe answers a probe from a member. A probe from an unknown site gets
// a hello instead, so that a restarted site is found again by the members
// that still probe it.
func (n *Node) onProbe(now, rx time.Time, from netip.AddrPort, pkt []byte) error {
	var p wire.Probe
	if err := wire.ParseProbe(pkt, &p); err != nil {
		return err
	}
	if p.Receiver != n.self {
		return ErrMisdirected
	}
	m := n.members[p.Sender]
	if m == nil || m.state == StateLeft {
		n.helloUnknown(now, from)
		return ErrUnknownSite
	}
	n.heard(now, m)
	m.probesIn++
	m.probeShift, m.probeShiftAt = rx.UnixNano()-p.SendTime, now
	n.onProbeDelay(now, rx, m, p.SendTime)
	// The reply says when the probe came and when it leaves (about now),
	// so that the prober takes the time it waited here out of the round
	// trip.
	n.emit(m.addr, buildProbeReply(n.self, &p, rx.UnixNano(), now.UnixNano(), m.probesIn))
	return nil
}

// helloUnknown says hello to an address that sent us something we could
// not place, at most once per DownProbeInterval per address.
func (n *Node) helloUnknown(now time.Time, to netip.AddrPort) {
	if last, ok := n.helloSent[to]; ok && now.Sub(last) < n.cfg.DownProbeInterval {
		return
	}
	if len(n.helloSent) > 4096 { // bound the memory garbage can claim
		clear(n.helloSent)
	}
	n.helloSent[to] = now
	n.emit(to, n.buildHello(wire.HelloFlagReply))
}

func (n *Node) onProbeReply(now, rx time.Time, pkt []byte) error {
	var r wire.ProbeReply
	if err := wire.ParseProbeReply(pkt, &r); err != nil {
		return err
	}
	m, err := n.sender(r.Sender, r.Receiver)
	if err != nil {
		return err
	}
	wasUp, wasSuspect := m.link.Up(now), n.suspect(now, m)
	if err := m.link.OnReply(now, rx, &r); err != nil {
		if errors.Is(err, measure.ErrBadTimes) {
			return wire.ErrMalformed
		}
		return ErrStaleReply
	}
	n.heard(now, m)
	n.confirm(now, m)
	moved, rose := n.ownLinkChange(now, m)
	switch {
	case rose:
		n.refreshUrgent(now)
	case !wasUp || wasSuspect || moved:
		// A link came up or is confirmed (tell the others, drop backups),
		// or its estimate moved.
		n.refreshSoon(now)
	}
	return nil
}

// sender returns the member that sent a message from sender to receiver,
// or why the message is not for this node from a member: misdirected, or
// from a site that is not a member (or has left).
func (n *Node) sender(sender, receiver wire.SiteID) (*member, error) {
	if receiver != n.self {
		return nil, ErrMisdirected
	}
	m := n.members[sender]
	if m == nil || m.state == StateLeft {
		return nil, ErrUnknownSite
	}
	return m, nil
}

// ownLinkChange compares this site's link to m as it now measures with
// what its link state last said. moved: materially different (the test
// material applies to received reports). rose: at least
// routing.CollapseFloor slower while it carries the first hop of one of
// this site's routes, a route that may have collapsed and waits for no
// batch (refreshUrgent). It reads the link's estimates once: it runs for
// every probe reply and in-band report.
func (n *Node) ownLinkChange(now time.Time, m *member) (moved, rose bool) {
	s := m.link.Stats(now)
	if !s.Valid {
		return false, false
	}
	r := m.reported
	th := materialDelay
	if n.cfg.Economy {
		th = smoothJump // smaller moves are averaged over seconds anyway
	}
	d := s.Delay - r.DelayAt(now)
	moved = s.Up != r.Up || d.Abs() >= th || materialLoss(r.Loss, s.Loss.Rate)
	return moved, r.Up && d >= routing.CollapseFloor && n.startsARoute(m.id)
}

// startsARoute reports whether id is the first hop of one of this site's
// routes.
func (n *Node) startsARoute(id wire.SiteID) bool {
	for _, r := range n.router.Table().Routes() {
		if len(r.Path) > 0 && r.Path[0] == id {
			return true
		}
	}
	return false
}

// onLinkState stores a newer report and floods it on to the members the
// origin cannot reach directly.
func (n *Node) onLinkState(now time.Time, from netip.AddrPort, pkt []byte) error {
	ls := &n.scratch
	if err := wire.ParseLinkState(pkt, ls); err != nil {
		return err
	}
	if ls.Origin == n.self {
		return nil // our own report, flooded back
	}
	o := n.members[ls.Origin]
	if o == nil {
		return ErrUnknownSite
	}
	if o.state == StateLeft || ls.Incarnation != o.inc {
		return ErrStale
	}
	if from == o.addr {
		n.heard(now, o)
	}
	old, _ := n.db.Origin(o.id)
	deltaMoved := ls.Delta && n.deltaMaterial(ls)
	if n.db.Apply(now, ls) != linkstate.Accepted {
		return nil
	}
	n.flood(o, pkt)
	if cur, _ := n.db.Origin(o.id); old == nil || deltaMoved || (!ls.Delta && material(old.Links, cur.Links)) {
		n.refreshSoon(now) // reroute now; a mere refresh waits for the next tick
	}
	return nil
}

// materialDelay is the smallest change of a link's delay that calls for
// recomputing routes at once.
const materialDelay = 100 * time.Microsecond

// materialReport is the smallest change of a link's delay in a received
// report that calls for recomputing routes at once: the least gain routing
// switches for (the 0.5 ms floor of its threshold). Smaller drifts, which
// every report carries when estimates jitter, wait for the next refresh
// (at most a link-state refresh interval, 1 s, away), as they would wait
// for a route switch's hold anyway. At 0.1 ms every report was material
// and 54 sites recomputed their routes 16 times a second each; at 0.5 ms
// 2.7 times, with the same routes and reroute times (docs/scaling.md).
const materialReport = 500 * time.Microsecond

// materialLoss reports whether a link's loss rate moved from a to b by at
// least a percentage point, or to or from zero: a change that may move
// routes at once. Smaller drifts, as the window of a steady rate slides,
// wait for the next refresh.
func materialLoss(a, b float64) bool {
	return (a == 0) != (b == 0) || math.Abs(a-b) >= 0.01
}

// material reports whether a new report differs from the old one enough to
// recompute routes at once: a link appeared, vanished or changed state,
// its loss moved (materialLoss), or its delay by materialReport or more.
// Both reports are sorted by destination.
func material(old, cur []linkstate.Link) bool {
	if len(old) != len(cur) {
		return true
	}
	for i := range cur {
		o, c := &old[i], &cur[i]
		if o.To != c.To || o.Up != c.Up || (c.Delay-o.Delay).Abs() >= materialReport || materialLoss(o.Loss, c.Loss) {
			return true
		}
	}
	return false
}

// deltaMaterial reports whether a delta message changes a link it
// carries as much as material means (a delta updates the report in
// place, so the test is made before it is applied).
func (n *Node) deltaMaterial(ls *wire.LinkState) bool {
	if o, ok := n.db.Origin(ls.Origin); !ok || o.Incarnation != ls.Incarnation {
		return true
	}
	for i := range ls.Entries {
		c := linkstate.FromWire(ls.Origin, &ls.Entries[i])
		o, ok := n.db.Link(ls.Origin, c.To)
		if !ok || o.Up != c.Up || (c.Delay-o.Delay).Abs() >= materialReport || materialLoss(o.Loss, c.Loss) {
			return true
		}
	}
	return false
}

// floodFanout is how many sites forward an origin's report to a member
// the origin does not reach directly.
const floodFanout = 2

// flood forwards an origin's report to the members that the origin does
// not report a working link to: only they may have missed it. Of all the
// sites that could forward it, only the floodFanout with the lowest IDs
// that the origin reaches and that reach the member do (by everyone's
// link state, so every site decides alike): with every site forwarding,
// one report of a site whose links are still coming up would cost N²
// datagrams, and a loaded overlay would feed its own overload. Sequence
// numbers stop the copies.
func (n *Node) flood(o *member, pkt []byte) {
	if !n.db.ReportsUp(o.id, n.self) {
		return // not heard directly: a designated forwarder must be us
	}
	var cp []byte
	up := n.db.Cursor(o.id) // members come sorted by ID, as the report's links
	for _, m := range n.sortedMembers() {
		if m.id == o.id || (m.state != StateAlive && m.state != StateJoining) || up.Up(m.id) {
			continue
		}
		if !n.db.ReportsUp(n.self, m.id) || !n.designatedForwarder(o.id, m.id) {
			continue
		}
		if cp == nil {
			cp = append([]byte(nil), pkt...)
		}
		n.emit(m.addr, cp)
	}
}

// designatedForwarder reports whether this site is among the floodFanout
// sites with the lowest IDs that origin reports a working link to and
// that report a working link to target.
func (n *Node) designatedForwarder(origin, target wire.SiteID) bool {
	lower := 0
	up := n.db.Cursor(origin) // members come sorted by ID
	for _, c := range n.sortedMembers() {
		if c.id >= n.self || lower >= floodFanout {
			break
		}
		if c.id != origin && c.id != target && c.state == StateAlive &&
			up.Up(c.id) && n.db.ReportsUp(c.id, target) {
			lower++
		}
	}
	return lower < floodFanout
}

// onHello learns (or re-learns) the sender and answers with the member
// list when asked or when the sender is new.
func (n *Node) onHello(now time.Time, from netip.AddrPort, pkt []byte) error {
	var rec wire.Member
	flags, err := wire.ParseHello(pkt, &rec)
	if err != nil {
		return err
	}
	m, fresh, err := n.learn(now, &rec, true)
	if err != nil || m == nil {
		return err
	}
	if fresh || flags&wire.HelloFlagReply != 0 {
		// To where the hello came from: a site behind NAT advertises an
		// address that reaches nothing (the shell then follows its
		// source, see Roam).
		n.sendMembers(from)
	}
	if fresh {
		n.refreshSoon(now)
	}
	return nil
}

// onMembers learns the listed sites and says hello to each new one.
func (n *Node) onMembers(now time.Time, from netip.AddrPort, pkt []byte) error {
	sender, recs, err := wire.ParseMembers(pkt, nil)
	if err != nil {
		return err
	}
	var firstErr error
	changed := false
	for i := range recs {
		if recs[i].ID == sender && recs[i].Addr != from {
			// A site's own record with an address it is not sending
			// from (behind NAT): what it claims counts less than where its
			// datagrams come from (Roam).
			recs[i].Addr = from
		}
		m, fresh, err := n.learn(now, &recs[i], recs[i].ID == sender && recs[i].Addr == from)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if fresh && m != nil {
			changed = true
			n.emit(m.addr, n.buildHello(0))
		}
	}
	if changed {
		n.refreshSoon(now)
	}
	if errors.Is(firstErr, ErrIDMismatch) || errors.Is(firstErr, ErrIDCollision) {
		return firstErr // a list with a bad record is counted, the rest is used
	}
	return nil
}

func (n *Node) onLeave(now time.Time, pkt []byte) error {
	var l wire.Leave
	if err := wire.ParseLeave(pkt, &l); err != nil {
		return err
	}
	m := n.members[l.Sender]
	if m == nil {
		return ErrUnknownSite
	}
	if l.Incarnation < m.inc {
		return ErrStale
	}
	n.depart(now, m)
	n.refreshSoon(now)
	return nil
}
