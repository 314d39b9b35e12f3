package control

import (
	"github.com/detour-overlay/detour/internal/linkstate"
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/measure"
	"github.com/detour-overlay/detour/internal/wire"
)

// State is a member's state as seen by this site.
type State int

// Member states.
const (
	StateJoining State = iota // learned from a list, not heard yet
	StateAlive                // heard directly, or reported reachable by a live member
	StateDown                 // silent and reported unreachable
	StateLeft                 // said goodbye
)

func (s State) String() string {
	switch s {
	case StateJoining:
		return "joining"
	case StateAlive:
		return "alive"
	case StateDown:
		return "down"
	case StateLeft:
		return "left"
	}
	return "unknown"
}

type member struct {
	id   wire.SiteID
	name string
	addr netip.AddrPort
	// alt is where a member list says the member is, when that differs
	// from addr while the member is heard from (see relearnAddr).
	alt       netip.AddrPort
	inc       uint64
	state     State
	since     time.Time
	learned   time.Time
	lastHeard time.Time
	link      *measure.Link
	nextProbe time.Time
	// probesIn counts the probes received from the member; replies carry
	// it so that the member can tell the loss of each direction.
	probesIn uint32
	// probeShift is the offset-shifted delay (t2 − t1, ns) of the last
	// probe from the member, received at probeShiftAt: it places the
	// member's data stamps (OnInband).
	probeShift   int64
	probeShiftAt time.Time
	// reported is the link last put in this site's own link state: a
	// probe reply that moves the estimate away from it calls for a
	// refresh.
	reported linkstate.Link
	// hot (Economy) says the member relays one of this site's routes:
	// its link is probed at the full rate so that its failure is covered
	// at once.
	hot bool
	// rowSent (Economy) says the member was sent this site's whole
	// link-state row since it last became alive.
	rowSent bool
	// drift (Economy) estimates how fast the clock offset to the member
	// moves.
	drift drift
	// smooth (Economy) averages the delay estimate over time.
	smooth smoothed
	// rate estimates the available throughput of the link from the
	// member (nil until used; throughput.go), outRate is the rate of the
	// link to it as its last train report said, and lastTrain when this
	// site last sent it a train.
	rate      *measure.RateEstimator
	outRate   measure.RateEstimate
	lastTrain time.Time
}

func (n *Node) measureConfig() measure.Config {
	return measure.Config{DownAfter: n.timers.down, Loss: n.cfg.Loss, Filter: n.cfg.Filter}
}

// learn adds a member or updates a known one from a record heard at now;
// direct is true when the record came from the site itself (a hello). It
// returns the member (nil if the record was refused) and whether it is new
// or a new incarnation.
func (n *Node) learn(now time.Time, rec *wire.Member, direct bool) (*member, bool, error) {
	if rec.ID != wire.SiteIDFromName(rec.Name) {
		return nil, false, ErrIDMismatch
	}
	if rec.ID == n.self {
		if rec.Name != n.cfg.Name {
			return nil, false, ErrIDCollision
		}
		return nil, false, nil // ourselves, maybe an old incarnation: ignore
	}
	m := n.members[rec.ID]
	if m != nil && m.name != rec.Name {
		return nil, false, ErrIDCollision
	}
	if m != nil && rec.Incarnation < m.inc {
		return nil, false, ErrStale
	}
	if m != nil && rec.Incarnation == m.inc {
		if m.state == StateLeft {
			return nil, false, ErrStale
		}
		if direct {
			m.addr = rec.Addr
			n.heard(now, m)
		} else {
			n.relearnAddr(now, m, rec)
		}
		return m, false, nil
	}
	if m != nil { // a restart: forget everything about the old run
		n.db.Drop(m.id)
	}
	m = &member{id: rec.ID, name: rec.Name, addr: rec.Addr, inc: rec.Incarnation, state: StateJoining,
		since: now, learned: now, link: measure.NewLink(n.measureConfig()), nextProbe: now}
	n.members[m.id] = m
	n.sorted = nil
	n.timersMoved()
	if direct {
		n.heard(now, m)
	}
	return m, true, nil
}

// heard records direct evidence that m is alive, which also keeps its
// link-state report fresh (linkstate.DB.Vouch).
func (n *Node) heard(now time.Time, m *member) {
	m.lastHeard = now
	n.db.Vouch(m.id, now)
	if m.state != StateAlive && m.state != StateLeft {
		n.setState(now, m, StateAlive)
	}
}

func (n *Node) setState(now time.Time, m *member, s State) {
	if m.state == s {
		return
	}
	m.state, m.since = s, now
	if s == StateAlive {
		m.nextProbe = now
	}
	n.timersMoved()
}

// updateLiveness recomputes who is alive: the members heard within
// DownAfter, then, transitively, those that a live member's fresh link
// state reports a working link to. Starting only from direct evidence
// means dead sites cannot keep each other alive through stale reports.
func (n *Node) updateLiveness(now time.Time) {
	alive := map[wire.SiteID]bool{n.self: true}
	queue := []wire.SiteID{n.self}
	for _, m := range n.members {
		if m.state != StateLeft && !m.lastHeard.IsZero() && now.Sub(m.lastHeard) < n.downAfter(m) {
			alive[m.id] = true
			queue = append(queue, m.id)
		}
	}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		if k != n.self && !n.db.Fresh(now, k) {
			continue
		}
		for _, m := range n.members {
			if !alive[m.id] && m.state != StateLeft && k != n.self && n.db.ReportsUp(k, m.id) {
				alive[m.id] = true
				queue = append(queue, m.id)
			}
		}
	}
	for _, m := range n.members {
		switch {
		case m.state == StateLeft:
		case alive[m.id]:
			n.setState(now, m, StateAlive)
		case m.state == StateJoining && now.Sub(m.learned) < n.cfg.JoinTimeout:
		default:
			n.setState(now, m, StateDown)
		}
	}
}

// forget removes members down or gone for ForgetAfter.
func (n *Node) forget(now time.Time) {
	for id, m := range n.members {
		if (m.state == StateDown || m.state == StateLeft) && now.Sub(m.since) > n.cfg.ForgetAfter {
			delete(n.members, id)
			n.sorted = nil
			n.db.DropAt(now, id)
		}
	}
}

// depart handles a leave from m.
func (n *Node) depart(now time.Time, m *member) {
	n.setState(now, m, StateLeft)
	m.link.Reset()
	n.db.DropAt(now, m.id)
}

// selfRecord describes this site.
func (n *Node) selfRecord() wire.Member {
	return wire.Member{ID: n.self, Incarnation: n.inc, Addr: n.cfg.Advertise, Name: n.cfg.Name}
}

// memberRecords lists this site and the members believed alive.
func (n *Node) memberRecords() []wire.Member {
	recs := []wire.Member{n.selfRecord()}
	for _, m := range n.sortedMembers() {
		if m.state == StateAlive {
			recs = append(recs, wire.Member{ID: m.id, Incarnation: m.inc, Addr: m.addr, Name: m.name})
		}
	}
	return recs
}

// sendMembers sends the member list to one address, split as needed.
func (n *Node) sendMembers(to netip.AddrPort) {
	recs := n.memberRecords()
	for len(recs) > 0 {
		k := wire.SplitMembers(recs)
		b, err := buildMembers(n.self, recs[:k])
		if err != nil {
			panic("control: member list does not encode: " + err.Error())
		}
		n.emit(to, b)
		recs = recs[k:]
	}
}
