// Package control is a site's control-plane state machine: membership,
// measurement, link state and routing, combined in a Node that an I/O
// shell drives.
//
// The Node is pure, in the manner of the etcd raft library: it owns no
// goroutines, timers or sockets and never reads the clock. The shell
//
//   - calls Receive for every control datagram (any detour datagram that is
//     not data),
//   - calls Tick at NextDeadline (earlier is harmless),
//   - after each call, sends every datagram of Outbox, and
//   - publishes Table to the data path whenever its pointer changes.
//
// Times passed in must come from a clock that is never stepped or slewed
// (a monotonic clock, e.g. a fixed wall time plus time.Since a start
// instant); they need not agree between sites. Calls must not overlap: one
// goroutine owns the node (package site's Core wraps it).
//
// Membership has no central server. A site joins by saying hello to any
// bootstrap address; the member answers with its member list, and the
// newcomer says hello to each. Lists are also gossiped, one member per
// second. Every pair probes each other every ProbeInterval (longer when
// the members outnumber what MaxProbeRate allows; see timers.go); a site reports
// its outgoing links in its link state, which every site floods. A member
// is live while this site hears it directly, or while a live member reports
// a working link to it (so a site behind a dead direct link stays a member
// and is reached through a relay). Leave sends a leave to every member,
// which drops the site at once; a restart is a new incarnation, accepted
// in place of the old one.
//
// Restarts. A restart needs no special mode. A clean stop (SIGTERM) sends
// a leave and the others drop the site at once; a crash (SIGKILL) is
// silence, and the site is down within DownAfter plus a flood. Either way
// the restarted agent's hello (a higher incarnation: its start time) is
// accepted at once, its links are probed again and its routes come back
// after one probe exchange; the data path relearns addresses by flooding
// and restarts the sequence windows, and encrypted sessions re-handshake.
// Hosts' TCP connections ride over the gap with their own retransmissions
// (test/failover_test.go restarts a gateway under a flow).
//
// Failover. An own link without a reply for SuspectAfter is marked suspect
// in the matrix given to the router, which gives every route over it (or
// relayed by the site it leads to) a backup path avoiding it; the data
// path sends on both until the link is confirmed (a reply: the backup is
// dropped) or declared down (the route switches at once).
//
// Every message is built by the build* functions in messages.go and leaves
// through Node.emit into the outbox; the site core (package site), which
// the agent and the simulator drive, restamps and seals what it takes from
// the outbox.
package control

import (
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/linkstate"
	"github.com/detour-overlay/detour/internal/measure"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// Outgoing is a datagram for the shell to send.
type Outgoing struct {
	To      netip.AddrPort
	Payload []byte
}

// Errors returned by Receive; all of them mean the datagram was dropped and
// counted.
var (
	ErrNotControl   = errors.New("control: not a control datagram")
	ErrMisdirected  = errors.New("control: datagram for another site")
	ErrUnknownSite  = errors.New("control: unknown site")
	ErrIDCollision  = errors.New("control: site ID collision")
	ErrIDMismatch   = errors.New("control: site ID does not match its name")
	ErrStale        = errors.New("control: stale incarnation or departed site")
	ErrStaleReply   = errors.New("control: reply to an unknown or old probe")
	ErrLeft         = errors.New("control: this site has left")
	ErrUnknownType  = errors.New("control: unknown message type")
	ErrNotMemberArg = errors.New("control: not a member")
)

// Node is one site's control plane.
type Node struct {
	cfg      Config
	self     wire.SiteID
	inc      uint64
	members  map[wire.SiteID]*member
	db       *linkstate.DB
	orig     *linkstate.Originator
	router   *routing.Router
	outbox   []Outgoing
	counters Counters
	started  time.Time
	last     time.Time // the latest time passed in
	left     bool

	nextGossip    time.Time
	gossipCursor  wire.SiteID
	nextBootstrap time.Time
	helloSent     map[netip.AddrPort]time.Time // rate limit for hellos to unknown senders
	lossSlots     map[wire.SiteID][]lossSlot   // loss estimates of reported links, by origin
	mx            matrixState                  // the routing matrix, kept between route computations
	// zeroLossMemo holds the loss of a link that lost nothing, by sample
	// count, at the charge quantile zeroLossZ (zeroLoss).
	zeroLossMemo  []routing.Loss
	zeroLossZ     float64
	refreshCost   time.Duration // a route computation's smoothed wall time (Stopwatch)
	scratch       wire.LinkState
	timers        timers
	lastRefresh   time.Time // when refresh last ran
	refreshDue    time.Time // when a deferred refresh must run (zero: none)
	deadline      time.Time // NextDeadline's cached answer
	deadlineStale bool      // deadline must be recomputed
	// memberDue is the earliest liveness timer of a member (suspect, down,
	// silent) that had not fired when refreshNeeded last looked at them
	// all, at memberDueAt; memberDueOK is cleared when a timer may have
	// moved earlier (timersMoved).
	memberDue, memberDueAt time.Time
	memberDueOK            bool
	// probeDue is the earliest probe due, as probe last found it;
	// probeDueOK is cleared by timersMoved.
	probeDue   time.Time
	probeDueOK bool
	// promised is NextDeadline's last answer: a Tick much later than it
	// finds the node woken late (see resume).
	promised time.Time
	sorted   []*member        // sortedMembers' cache; nil when stale
	switches []routing.Switch // path changes not yet taken by Switches
	// The probe budget's token bucket (bytes, last filled at tokensAt)
	// and the last train's ID (throughput.go).
	tokens   float64
	tokensAt time.Time
	trainSeq uint32
	// inbandOut and inbandIn are the in-band reports being built and
	// parsed (inband.go).
	inbandOut, inbandIn wire.Inband
	// confirmTokens is the confirmation probes' token bucket, last
	// filled at confirmAt (confirm.go).
	confirmTokens float64
	confirmAt     time.Time
	// resumedAt is when the node last found itself woken late (resume).
	resumedAt time.Time
}

// maxPendingSwitches bounds the path changes kept for Switches between two
// calls; older ones are dropped (they are still counted).
const maxPendingSwitches = 256

// New returns a node for cfg, started at now.
func New(cfg Config, now time.Time) (*Node, error) {
	if cfg.Economy {
		cfg = economize(cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	inc := cfg.Incarnation
	if inc == 0 {
		inc = uint64(now.UnixNano())
	}
	self := wire.SiteIDFromName(cfg.Name)
	n := &Node{
		cfg:       cfg,
		self:      self,
		inc:       inc,
		members:   map[wire.SiteID]*member{},
		db:        linkstate.NewDB(cfg.ExpireAfter),
		orig:      linkstate.NewOriginator(cfg.LinkState, self, inc),
		router:    routing.NewRouter(cfg.Routing, self),
		started:   now,
		helloSent: map[netip.AddrPort]time.Time{},
		lossSlots: map[wire.SiteID][]lossSlot{},
	}
	n.timers = scaledTimers(&cfg, 0)
	n.Tick(now)
	return n, nil
}

// ID returns this site's wire ID.
func (n *Node) ID() wire.SiteID { return n.self }

// Name returns this site's name.
func (n *Node) Name() string { return n.cfg.Name }

// Incarnation returns this run's incarnation.
func (n *Node) Incarnation() uint64 { return n.inc }

// Table returns the current routing snapshot; a new pointer means a change.
func (n *Node) Table() *routing.Table { return n.router.Table() }

// Outbox returns and clears the datagrams to send.
func (n *Node) Outbox() []Outgoing {
	out := n.outbox
	n.outbox = nil
	return out
}

// Switches returns and clears the changes of existing paths made since the
// last call (at most maxPendingSwitches, the latest), for the caller to
// log. First routes are not included.
func (n *Node) Switches() []routing.Switch {
	out := n.switches
	n.switches = nil
	return out
}

// Left reports whether Leave was called.
func (n *Node) Left() bool { return n.left }

// emit queues a datagram and counts it: the one exit of every message.
func (n *Node) emit(to netip.AddrPort, payload []byte) {
	if len(payload) < wire.CommonHeaderLen || !to.IsValid() {
		return
	}
	n.counters.countOut(wire.Type(payload[2]), len(payload))
	n.outbox = append(n.outbox, Outgoing{To: to, Payload: payload})
}

// Tick runs the timers: probes, failure detection, link-state origination
// and refresh, gossip, expiry and route selection.
func (n *Node) Tick(now time.Time) {
	n.resume(now, true)
	n.observe(now)
	n.deadlineStale = true
	if n.left {
		return
	}
	n.bootstrap(now)
	n.probe(now)
	n.expireTrains(now)
	n.trains(now)
	if need, urgent := n.refreshNeeded(now); urgent && (n.cfg.Economy || n.paced()) {
		n.refresh(now) // a link turned suspect or down: its routes move now
	} else if need {
		n.refreshSoon(now)
	}
	n.gossip(now)
	n.forget(now)
}

// observe records the latest time seen, so that NextDeadline never returns
// a time already past, after checking for a pause (see resume).
func (n *Node) observe(now time.Time) {
	n.resume(now, false)
	if now.After(n.last) {
		n.last = now
	}
}

// refreshNeeded reports whether a Tick at now must refresh: a deferred
// refresh is due, or a timer that changes state fired since the last one:
// a link turning suspect or down, a member falling silent, the link-state
// refresh (every second, which also carries small drifts of this site's
// own measurements into its link state and routes), a held route switch.
// Ticks for probes alone then cost no route computation; a probe reply
// that moves an estimate asks for a refresh itself (ownLinkChange). A
// member's timer (suspect, down, silent) is urgent: the economy, whose
// batch interval is long, then refreshes at once.
func (n *Node) refreshNeeded(now time.Time) (need, urgent bool) {
	if n.lastRefresh.IsZero() {
		return true, false
	}
	if !n.refreshDue.IsZero() && !now.Before(n.refreshDue) {
		return true, false
	}
	fired := func(at time.Time) bool { return at.After(n.lastRefresh) && !at.After(now) }
	if fired(n.orig.NextDue()) || fired(n.router.NextDeadline()) {
		return true, false
	}
	if n.memberTimerFired(now) {
		return true, true
	}
	return false, false
}

// memberRecheck bounds how long refreshNeeded trusts its memory of the
// earliest member timer: a link's down timer can also shrink as its loss
// estimate falls, which nothing announces.
const memberRecheck = 50 * time.Millisecond

// memberGrain is the resolution of the member timers: they are looked at
// no more often than this, so a timer fires up to memberGrain late. With
// a reply pushing some member's timer back every few milliseconds at
// 300 sites, the earliest timer is passed (and every member looked at)
// as often as replies arrive otherwise.
const memberGrain = 10 * time.Millisecond

// memberTimerFired reports whether a member's liveness timer (suspect,
// down, silent) fired since the last refresh. Looking at every member is
// O(N) and a site ticks for every probe it sends, so the earliest timer
// still to come is remembered (no earlier than memberGrain from now), and
// until it (or memberRecheck) passes, or timersMoved, the members are not
// looked at again.
func (n *Node) memberTimerFired(now time.Time) bool {
	if n.memberDueOK && now.Before(n.memberDue) && now.Sub(n.memberDueAt) < memberRecheck {
		return false
	}
	var due time.Time
	for _, m := range n.members {
		if m.state != StateAlive {
			continue
		}
		lr := m.link.LastReply()
		for _, at := range [3]time.Time{m.lastHeard.Add(n.downAfter(m)), afterReply(lr, m.link.DownAfter()), afterReply(lr, n.suspectAfter(m))} {
			switch {
			case at.IsZero() || !at.After(n.lastRefresh):
			case !at.After(now):
				n.memberDueOK = false
				return true
			case due.IsZero() || at.Before(due):
				due = at
			}
		}
	}
	if !due.IsZero() {
		due = maxTime(due, now.Add(memberGrain))
	}
	n.memberDue, n.memberDueAt, n.memberDueOK = due, now, !due.IsZero()
	return false
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// afterReply is the time d after a link's last reply lr, or zero when
// there was none or d is not positive (the timer is off).
func afterReply(lr time.Time, d time.Duration) time.Time {
	if lr.IsZero() || d <= 0 {
		return time.Time{}
	}
	return lr.Add(d)
}

// timersMoved says that a timer may have moved earlier (a member joined or
// changed state, routes or probe rates changed, the node resumed): the
// deadline and the memory of the earliest member timer are recomputed.
func (n *Node) timersMoved() {
	n.deadlineStale, n.memberDueOK, n.probeDueOK = true, false, false
}

// refreshSoon runs refresh now, or, if the last one ran less than a batch
// interval ago, at the end of that interval: a burst of probe replies and
// link-state reports then costs one route computation, not one each.
func (n *Node) refreshSoon(now time.Time) {
	if due := n.refreshDue; !due.IsZero() && !now.Before(due) {
		n.refresh(now) // a deferred refresh is due (refreshUrgent may have set it early)
		return
	}
	if b := n.batch(); !n.lastRefresh.IsZero() && now.Sub(n.lastRefresh) < b {
		if n.refreshDue.IsZero() {
			n.refreshDue = n.lastRefresh.Add(b)
		}
		return
	}
	n.refresh(now)
}

// refreshUrgent runs refresh now rather than at the end of the batch
// interval, or minBatch after the last one if that was sooner: a link
// that a route's traffic crosses got slower by enough to collapse the
// route, and every moment the traffic stays on it costs the rise (the
// batch interval is up to 250 ms in a large overlay). Such rises are
// rare; a rise of every link at once still costs one computation per
// minBatch at most.
func (n *Node) refreshUrgent(now time.Time) {
	if n.lastRefresh.IsZero() || now.Sub(n.lastRefresh) >= minBatch {
		n.refresh(now)
		return
	}
	n.refreshDue = earliest(n.refreshDue, n.lastRefresh.Add(minBatch))
}

// refresh recomputes liveness, this site's link state, and the routes.
func (n *Node) refresh(now time.Time) {
	if sw := n.cfg.Stopwatch; sw != nil {
		start := sw()
		defer func() { n.timeRefresh(sw().Sub(start)) }()
	}
	n.lastRefresh, n.refreshDue = now, time.Time{}
	n.counters.Refreshes++
	n.timersMoved()
	n.db.Expire(now, n.self)
	n.scaleTimers()
	n.updateLiveness(now)
	n.originate(now)
	n.route(now)
}

// Leave says goodbye to every member; afterwards the node is inert.
func (n *Node) Leave(now time.Time) {
	if n.left {
		return
	}
	for _, m := range n.sortedMembers() {
		if m.state != StateLeft {
			n.emit(m.addr, buildLeave(n.self, n.inc))
		}
	}
	n.left = true
}

// NextDeadline returns when Tick should run next; a time not after the
// latest time passed in means at once. The answer is cached: it is
// recomputed (O(members)) only after a Tick or a change that can bring a
// deadline forward (a refresh, a member learned or changing state), not
// after every probe and reply. Messages only move the other deadlines
// later, so a cached one is at worst early, and an early Tick is
// harmless.
func (n *Node) NextDeadline() time.Time {
	if n.deadlineStale {
		n.deadline, n.deadlineStale = n.computeDeadline(), false
	}
	n.promised = n.deadline
	if !n.refreshDue.IsZero() && (n.deadline.IsZero() || n.refreshDue.Before(n.deadline)) {
		n.promised = n.refreshDue
	}
	return n.promised
}

// resume handles an event far later than the deadline this node gave: a
// Tick more than a probe interval late, or a datagram read that long
// after the deadline without a Tick since. The node was not running (its
// process or its machine was stopped, or starved of CPU): it could
// neither send probes nor read replies, and the silence of that time
// says nothing about its links. Every silence timer (a member last heard,
// a link's last reply, an origin's last report) moves on by the delay, so
// that failure detection counts only the time the node ran: a link that
// did fail meanwhile is found down a delay later, and one that did not
// stays up instead of every route moving at once.
//
// Any other event (a datagram, at the time it was read, or the data
// path's byte counts) may come in the middle of the pause: the delay up
// to it is moved on, and what follows is measured from it. A Tick ends
// the measure, so that a caller that ticks without asking NextDeadline is
// never taken for a late one.
func (n *Node) resume(t time.Time, tick bool) {
	p := n.promised
	if tick {
		n.promised = time.Time{}
	}
	if p.IsZero() || t.Sub(p) <= n.timers.probe {
		return
	}
	if !tick {
		n.promised = t
	}
	n.counters.LateWakes++
	n.resumedAt = t
	n.counters.LateWakeMs += uint64(t.Sub(p) / time.Millisecond)
	for _, m := range n.members {
		m.lastHeard = measure.Resumed(m.lastHeard, p, t)
		m.link.Pause(p, t)
	}
	n.db.Retime(func(at time.Time) time.Time { return measure.Resumed(at, p, t) })
	n.timersMoved()
}

// computeDeadline is the earliest timer after the latest time seen.
func (n *Node) computeDeadline() time.Time {
	var t time.Time
	earlier := func(x time.Time) {
		if !x.IsZero() && x.After(n.last) && (t.IsZero() || x.Before(t)) {
			t = x
		}
	}
	earlier(n.nextGossip)
	// The earliest probe and member timer as probe and refreshNeeded
	// last found them, while that is still good; else every member.
	probes := n.probeDueOK && n.probeDue.After(n.last)
	timers := n.memberDueOK && n.memberDue.After(n.last) && n.last.Sub(n.memberDueAt) < memberRecheck
	if probes {
		earlier(n.probeDue)
	}
	if timers {
		earlier(n.memberDue)
	}
	for _, m := range n.members {
		if probes && timers {
			break
		}
		if m.state == StateLeft {
			continue
		}
		if !probes {
			earlier(m.nextProbe)
		}
		if m.state == StateAlive && !timers {
			lr := m.link.LastReply()
			earlier(m.lastHeard.Add(n.downAfter(m)))
			earlier(afterReply(lr, m.link.DownAfter()))
			earlier(afterReply(lr, n.suspectAfter(m)))
		}
	}
	earlier(n.orig.NextDue())
	earlier(n.router.NextDeadline())
	if len(n.cfg.Bootstrap) > 0 && !n.anyAlive() {
		earlier(n.nextBootstrap)
	}
	return t
}

// bootstrap says hello to the bootstrap addresses while no member is live.
func (n *Node) bootstrap(now time.Time) {
	if len(n.cfg.Bootstrap) == 0 || now.Before(n.nextBootstrap) || n.anyAlive() {
		return
	}
	n.nextBootstrap = now.Add(n.cfg.BootstrapInterval)
	for _, a := range n.cfg.Bootstrap {
		if a != n.cfg.Advertise {
			n.emit(a, n.buildHello(wire.HelloFlagReply))
		}
	}
}

// probe sends the probes that are due.
func (n *Node) probe(now time.Time) {
	if n.probeDueOK && now.Before(n.probeDue) {
		return
	}
	var due time.Time
	for _, m := range n.sortedMembers() {
		if m.state == StateLeft {
			continue
		}
		if now.Before(m.nextProbe) {
			due = earliest(due, m.nextProbe)
			continue
		}
		iv := n.probeInterval(m)
		// Keep a steady cadence but never fall behind by more than a tick.
		m.nextProbe = m.nextProbe.Add(iv)
		if m.nextProbe.Before(now) {
			m.nextProbe = now.Add(iv)
		}
		n.takeAlt(now, m)
		seq, stamp := m.link.Probe(now)
		n.emit(m.addr, buildProbe(n.self, m.id, seq, stamp))
		due = earliest(due, m.nextProbe)
	}
	n.probeDue, n.probeDueOK = due, !due.IsZero()
}

// earliest returns the earlier of t and x, zero meaning none.
func earliest(t, x time.Time) time.Time {
	if t.IsZero() || (!x.IsZero() && x.Before(t)) {
		return x
	}
	return t
}

// originate updates this site's own link state and floods it when due.
func (n *Node) originate(now time.Time) {
	links := n.ownLinks(now)
	n.db.SetOwn(now, n.self, n.inc, links)
	if n.cfg.Economy {
		n.originateDelta(now, links)
		return
	}
	if !n.orig.Due(now, links) {
		return
	}
	n.sendOwn(n.orig.Build(now, links))
}

// sendOwn sends this site's link-state messages to every alive or joining
// member.
func (n *Node) sendOwn(msgs []wire.LinkState) {
	for _, ls := range msgs {
		b, err := buildLinkState(&ls)
		if err != nil {
			panic("control: own link state does not encode: " + err.Error())
		}
		for _, m := range n.sortedMembers() {
			if m.state == StateAlive || m.state == StateJoining {
				n.emit(m.addr, b)
			}
		}
	}
}

// ownLinks returns this site's measured outgoing links to non-departed
// members.
func (n *Node) ownLinks(now time.Time) []linkstate.Link {
	var out []linkstate.Link
	for _, m := range n.sortedMembers() {
		if m.state == StateLeft {
			continue
		}
		s := m.link.Stats(now)
		if !s.Valid && m.state != StateAlive {
			continue
		}
		l := linkstate.Link{From: n.self, To: m.id, Up: s.Up, Delay: s.Delay, RTT: s.RTT, Jitter: s.Jitter,
			Loss: s.Loss.Rate, LossSamples: s.Loss.Samples, At: now}
		if m.rate != nil {
			if e := m.rate.Estimate(now); e.Valid() {
				l.RevRate, l.RevRateKind, l.RevRateAge = e.Rate, uint8(e.Kind), now.Sub(e.At)
			}
		}
		if n.cfg.Economy && s.Valid {
			l.DriftPPM = m.drift.update(now, s.Delay-s.RTT/2)
			l.Delay = m.smooth.update(now, s.Delay, l.DriftPPM)
		}
		m.reported = l
		out = append(out, l)
	}
	return out
}

// settleTime is how long a link's estimates take to fill their window
// after it comes up: the delay filter's longest sample age and a second
// for link state to bring them.
func (n *Node) settleTime() time.Duration { return n.cfg.Filter.MaxAge + time.Second }

// legacyLossSamples is the number of probes a link's loss is taken to be
// over when its origin does not say (a site of an earlier version, which
// counted the last 20 probes).
const legacyLossSamples = 20

// lossSlot remembers the loss estimate of the link at one position of an
// origin's report, with what it was computed from. A route computation
// (and the Links view) estimates N² links; most did not change since the
// last one, and comparing a slot is cheaper than hashing a key (a memo
// map was a fifth of the agent's time at 54 sites).
type lossSlot struct {
	to      wire.SiteID
	rate    float64
	samples int
	chargeZ float64
	loss    routing.Loss
	set     bool
}

// slotLoss returns the loss estimate of l, the link at position k of its
// origin's report, from slots (the origin's remembered estimates).
func (n *Node) slotLoss(slots []lossSlot, k int, l *linkstate.Link, chargeZ float64) routing.Loss {
	if l.Loss == 0 {
		return n.zeroLoss(l, chargeZ)
	}
	s := &slots[k]
	if !s.set || s.to != l.To || s.rate != l.Loss || s.samples != l.LossSamples || s.chargeZ != chargeZ {
		*s = lossSlot{to: l.To, rate: l.Loss, samples: l.LossSamples, chargeZ: chargeZ, loss: n.computeLoss(l, chargeZ), set: true}
	}
	return s.loss
}

// originSlots returns the loss slots of an origin's report of k links,
// and forgets the slots of origins no longer live now and then.
func (n *Node) originSlots(id wire.SiteID, k, live int) []lossSlot {
	if len(n.lossSlots) > 2*live+8 {
		clear(n.lossSlots)
	}
	slots := n.lossSlots[id]
	if len(slots) != k {
		slots = make([]lossSlot, k)
		n.lossSlots[id] = slots
	}
	return slots
}

// zeroLossMemo bounds the sample counts whose zero-loss intervals a node
// remembers: a window of 10 minutes at 10 probes a second.
const zeroLossMemo = 6001

// zeroLoss is computeLoss for a link that lost nothing, remembered by
// its sample count: most links of an overlay lose nothing, and the same
// few hundred counts recur in every origin's report, so they need neither
// a slot of their own nor the interval computed again.
func (n *Node) zeroLoss(l *linkstate.Link, chargeZ float64) routing.Loss {
	k := l.LossSamples
	if k < 0 || k >= zeroLossMemo {
		return n.computeLoss(l, chargeZ)
	}
	if n.zeroLossZ != chargeZ || n.zeroLossMemo == nil {
		n.zeroLossMemo, n.zeroLossZ = make([]routing.Loss, zeroLossMemo), chargeZ
	}
	if n.zeroLossMemo[k].High == 0 { // never zero once computed: 1 at 0 samples
		n.zeroLossMemo[k] = n.computeLoss(l, chargeZ)
	}
	return n.zeroLossMemo[k]
}

// computeLoss returns a reported link's loss with its interval, as every
// site computes it from the report, and the lower bound routing charges,
// at the confidence chargeZ that holds over all the overlay's links.
func (n *Node) computeLoss(l *linkstate.Link, chargeZ float64) routing.Loss {
	k := l.LossSamples
	if k == 0 && l.Loss > 0 {
		k = legacyLossSamples
	}
	e := measure.NewLossEstimate(l.Loss, k, n.cfg.Loss.Z)
	charge, _ := measure.WilsonInterval(e.Rate, e.Samples, chargeZ)
	return routing.Loss{Rate: e.Rate, Low: e.Low, High: e.High, Samples: e.Samples, ChargeLow: charge}
}

// chargeZ is the quantile of the lower bound charged for loss in an
// overlay of sites live members: measure.ChargeZ over its links.
func (n *Node) chargeZ(sites int) float64 {
	return measure.ChargeZ(n.cfg.Loss.ChargeAlpha, sites*(sites-1))
}

// gossip sends the member list to the next member, round robin.
func (n *Node) gossip(now time.Time) {
	if now.Before(n.nextGossip) {
		return
	}
	n.nextGossip = now.Add(n.gossipInterval())
	var first, next *member
	for _, m := range n.sortedMembers() {
		if m.state != StateAlive {
			continue
		}
		if first == nil {
			first = m
		}
		if next == nil && m.id > n.gossipCursor {
			next = m
		}
	}
	if next == nil {
		next = first
	}
	if next == nil {
		return
	}
	n.gossipCursor = next.id
	n.sendMembers(next.addr)
}

// route recomputes the routes on the current matrix.
func (n *Node) route(now time.Time) {
	live := []wire.SiteID{n.self}
	addrs := map[wire.SiteID]netip.AddrPort{}
	for _, m := range n.members {
		if m.state == StateAlive {
			live = append(live, m.id)
			addrs[m.id] = m.addr
		}
	}
	sw := n.router.Update(now, n.matrix(now, live), addrs)
	n.timersMoved() // held switches have deadlines; hot members have shorter timers
	if n.cfg.Economy {
		n.markHot(now)
	}
	for _, s := range sw {
		if s.From != nil {
			n.counters.Switches++
			n.switches = append(n.switches, s)
		}
	}
	if k := len(n.switches) - maxPendingSwitches; k > 0 {
		n.switches = append(n.switches[:0], n.switches[k:]...)
	}
}

// suspect reports whether this site's link to m has missed replies for
// SuspectAfter (it is in doubt, not yet down).
func (n *Node) suspect(now time.Time, m *member) bool {
	if m == nil || n.suspectAfter(m) <= 0 {
		return false
	}
	lr := m.link.LastReply()
	return !lr.IsZero() && now.Sub(lr) >= n.suspectAfter(m)
}

// sortedMembers returns the members in ID order (so that a node's output
// is deterministic). The slice is cached until a member is added or
// removed; callers must not keep it across such a change.
func (n *Node) sortedMembers() []*member {
	if n.sorted != nil && len(n.sorted) == len(n.members) {
		return n.sorted
	}
	out := make([]*member, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *member) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	n.sorted = out
	return out
}

func (n *Node) anyAlive() bool {
	for _, m := range n.members {
		if m.state == StateAlive {
			return true
		}
	}
	return false
}

// liveCount is the number of live sites, this one included.
func (n *Node) liveCount() int {
	k := 1
	for _, m := range n.members {
		if m.state == StateAlive {
			k++
		}
	}
	return k
}
