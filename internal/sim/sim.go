// Package sim is a deterministic discrete-event fake network that runs
// several sites in one process: per directed link delay, jitter and loss,
// per-site clock offsets and skew, killing, restarting and partitioning
// sites, changing links at run time and injecting garbage. Whole
// multi-site scenarios run in milliseconds of real time, and the same seed
// always gives the same run.
//
// Each site is the same site core (package site) that the agent drives:
// the simulator is its shell, as the agent is on a gateway. A network made
// with Sealed seals all control traffic in real Noise sessions, with keys
// and randomness drawn from the seed; otherwise the sites run in the
// clear, which is several times faster for the large scenarios.
//
// Each site sees its own clock: local = global + offset + skew × (global −
// start). The network records every route change of every site.
package sim

import (
	"container/heap"
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/lab/scenario"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/site"
	"github.com/detour-overlay/detour/internal/wire"
)

// Link holds the properties of one directed link.
type Link struct {
	Delay  time.Duration
	Jitter time.Duration // uniform in [0, Jitter), added to Delay
	Loss   float64
	Down   bool
	// Rate, when not zero, makes the link a FIFO transmitter of Rate
	// bits per second (as the lab's WAN emulator models one): a datagram
	// of n bytes (IP and UDP headers, 28 bytes, included) waits for those
	// before it and takes 8n/Rate to send, then Delay to arrive. The
	// queue has no limit.
	Rate float64
}

// Site is one simulated site.
type Site struct {
	Name   string
	ID     wire.SiteID
	Addr   netip.AddrPort
	Offset time.Duration
	Skew   float64 // e.g. 50e-6 for +50 ppm
	Config control.Config
	// Key is the site's private key (on a sealed network).
	Key keys.PrivateKey
	// Cert is the site's certificate on a SealedCA network; nil means one
	// made by Certify at its start.
	Cert []byte
	// Core is the site's core; Node is its control node, for the views.
	Core *site.Core
	Node *control.Node
	// Switches are the path changes the core handed out (its Ready's, which
	// the agent logs), oldest first; tests may clear it.
	Switches []routing.Switch
	// HandleLag is how long after a datagram is read its site's shell
	// hands it to the core (with the time it was read), as the control
	// loop of a busy gateway does; ticks due meanwhile run first.
	HandleLag time.Duration
	// pausedUntil is the end of a Pause: until then the site handles
	// nothing.
	pausedUntil time.Time
	Alive       bool
	index       int
	starts      uint64 // how many times the site was started
	wakeAt      time.Time
	table       *routing.Table
	nat         *NAT // nil: the site is reachable at Addr
}

// RouteChange records a change of one site's path to one destination.
type RouteChange struct {
	At       time.Time // global time
	Site     string
	Dest     wire.SiteID
	From, To []wire.SiteID // nil when there was no route / is none
	// Reason is the router's reason for the switch ("" for a first
	// route or a route lost).
	Reason string
}

// Net is the simulated network.
type Net struct {
	start  time.Time
	now    time.Time
	seed   uint64
	sealed bool
	caKey  ed25519.PrivateKey // the overlay CA of a SealedCA network
	rng    *rand.Rand
	// trainRng draws the loss and jitter of packet trains in the clear
	// (on links with a rate), so that adding them left the draws of
	// every other datagram, on which seeded scenarios depend, as they
	// were.
	trainRng *rand.Rand
	sites    []*Site
	byAddr   map[netip.AddrPort]*Site
	byName   map[string]*Site
	links    map[[2]int]Link
	busy     map[[2]int]time.Time // when each rated link finishes its last datagram
	queue    eventQueue
	seq      uint64
	Changes  []RouteChange
	// Undeliverable counts datagrams sent to an address no site has.
	Undeliverable int
	// Filtered counts datagrams a site's NAT did not let in.
	Filtered int
	// Sent counts the datagrams sites sent; Lost those a down or lossy
	// link dropped.
	Sent, Lost int
	// TrainsDropped counts the packet-train datagrams (in the clear)
	// dropped because their link has no rate: the dispersion of a train
	// on an unlimited link says nothing, and without them the scenarios
	// of links without rates run as they did before trains existed.
	TrainsDropped int
	// Tap, when set, sees every datagram a site sends (pkt is only valid
	// during the call: receivers open sealed datagrams in place).
	Tap func(from, to netip.AddrPort, pkt []byte)
	// Drop, when set, loses every datagram it returns true for, beside
	// the links' own loss (a test's targeted loss).
	Drop func(from, to netip.AddrPort, pkt []byte) bool
	// Events counts the events processed.
	Events int
	// trafficRng draws the jitter and loss of stamped data (traffic.go)
	// and stamps holds what each site's data path kept of each source's
	// stamps, by [receiver, source] index.
	trafficRng *rand.Rand
	stamps     map[[2]int]*stampBuf
}

// Start is the global time every simulation starts at.
var Start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// New returns an empty network seeded with seed.
func New(seed uint64) *Net {
	return &Net{start: Start, now: Start, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		trainRng: rand.New(rand.NewPCG(seed, seed^0x7a41)),
		byAddr:   map[netip.AddrPort]*Site{}, byName: map[string]*Site{}, links: map[[2]int]Link{}, busy: map[[2]int]time.Time{}}
}

// Sealed returns an empty network seeded with seed whose sites seal their
// control traffic: every site gets a key drawn from the seed and accepts
// every other site's.
func Sealed(seed uint64) *Net {
	n := New(seed)
	n.sealed = true
	return n
}

// seeded returns a randomness source drawn from the network's seed and the
// given labels, so that keys and handshakes repeat with the seed.
func (n *Net) seeded(labels ...uint64) *rand.ChaCha8 {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[0:], n.seed)
	for i, l := range labels[:min(len(labels), 3)] {
		binary.LittleEndian.PutUint64(s[8*(i+1):], l)
	}
	return rand.NewChaCha8(s)
}

// Now returns the global time.
func (n *Net) Now() time.Time { return n.now }

// Elapsed returns the global time since the start.
func (n *Net) Elapsed() time.Duration { return n.now.Sub(n.start) }

// AddrOf returns the underlay address given to the i-th site.
func AddrOf(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), 4789)
}

// AddSite adds a site (not started) whose configuration is the default one
// for its name and address, with the given bootstrap addresses, modified
// by configure if not nil.
func (n *Net) AddSite(name string, offset time.Duration, bootstrap []netip.AddrPort, configure func(*control.Config)) *Site {
	i := len(n.sites)
	s := &Site{Name: name, ID: wire.SiteIDFromName(name), Addr: AddrOf(i), Offset: offset, index: i}
	s.Config = control.DefaultConfig(name, s.Addr, bootstrap...)
	if configure != nil {
		configure(&s.Config)
	}
	if n.sealed {
		k, err := keys.Generate(n.seeded(1, uint64(i)))
		if err != nil {
			panic("sim: " + err.Error()) // a ChaCha8 stream does not fail
		}
		s.Key = k
	}
	n.sites = append(n.sites, s)
	n.byAddr[s.Addr] = s
	n.byName[name] = s
	return s
}

// Site returns a site by name; it panics on an unknown name (a test bug).
func (n *Net) Site(name string) *Site {
	s, ok := n.byName[name]
	if !ok {
		panic("sim: no site " + name)
	}
	return s
}

// Sites returns all sites in the order added.
func (n *Net) Sites() []*Site { return n.sites }

// SetLink sets the directed link a → b.
func (n *Net) SetLink(a, b string, l Link) { n.links[[2]int{n.Site(a).index, n.Site(b).index}] = l }

// LinkOf returns the directed link a → b.
func (n *Net) LinkOf(a, b string) Link { return n.links[[2]int{n.Site(a).index, n.Site(b).index}] }

// Partition cuts both directions between a and b (down = true) or heals them.
func (n *Net) Partition(a, b string, down bool) {
	for _, k := range [][2]string{{a, b}, {b, a}} {
		l := n.LinkOf(k[0], k[1])
		l.Down = down
		n.SetLink(k[0], k[1], l)
	}
}

// Local converts a global time to a site's clock.
func (s *Site) Local(g time.Time) time.Time {
	return g.Add(s.Offset + time.Duration(s.Skew*float64(g.Sub(Start))))
}

// global converts a site's local time back to global time.
func (s *Site) global(l time.Time) time.Time {
	d := l.Sub(Start) - s.Offset
	return Start.Add(time.Duration(float64(d) / (1 + s.Skew)))
}

// Start starts (or restarts, with a new incarnation) a site's core now.
func (n *Net) Start(name string) error {
	s := n.Site(name)
	s.starts++
	core, err := site.New(n.siteConfig(s), s.Local(n.now))
	if err != nil {
		return err
	}
	s.Core, s.Node, s.Alive, s.table = core, core.Control(), true, nil
	n.after(s)
	return nil
}

// siteConfig returns a site's core configuration: its control
// configuration and, on a sealed network, its keys, every other site's
// public key, and the addresses of its bootstrap sites (the others it
// learns, as an agent does).
func (n *Net) siteConfig(s *Site) site.Config {
	cfg := site.Config{Control: s.Config}
	if !n.sealed {
		return cfg
	}
	if n.caKey != nil {
		cfg.Secure = n.caSecure(s)
		return cfg
	}
	sec := &site.Secure{Private: s.Key, Peers: map[wire.SiteID]keys.PublicKey{}, Addrs: map[wire.SiteID]netip.AddrPort{},
		Rand: n.seeded(2, uint64(s.index), s.starts)}
	for _, o := range n.sites {
		if o == s {
			continue
		}
		sec.Peers[o.ID] = o.Key.Public()
		if slices.Contains(s.Config.Bootstrap, o.Addr) {
			sec.Addrs[o.ID] = o.Addr
		}
	}
	cfg.Secure = sec
	return cfg
}

// StartAll starts every site.
func (n *Net) StartAll() error {
	for _, s := range n.sites {
		if err := n.Start(s.Name); err != nil {
			return err
		}
	}
	return nil
}

// Kill stops a site abruptly: it sends nothing more and receives nothing.
func (n *Net) Kill(name string) {
	s := n.Site(name)
	s.Alive = false
	s.wakeAt = time.Time{}
}

// Pause stops a site for d, as a stopped process or virtual machine: its
// datagrams wait, with the times they were read, and its timers are late;
// at the end it handles what waited, datagrams first, and runs again.
func (n *Net) Pause(name string, d time.Duration) {
	s := n.Site(name)
	s.pausedUntil = n.now.Add(d)
}

// Leave makes a site leave cleanly and then stops it.
func (n *Net) Leave(name string) {
	s := n.Site(name)
	s.Core.Leave(s.Local(n.now))
	n.drain(s)
	n.Kill(name)
}

// Inject delivers a datagram to a site now, as if from the given address.
func (n *Net) Inject(to string, from netip.AddrPort, pkt []byte) {
	n.push(&event{at: n.now, rx: n.now, site: n.Site(to), from: from, pkt: slices.Clone(pkt)})
}

// Do runs f on a site's core at the current time (for operator calls) and
// sends what it produced.
func (n *Net) Do(name string, f func(core *site.Core, local time.Time)) {
	s := n.Site(name)
	f(s.Core, s.Local(n.now))
	n.after(s)
}

// RunFor advances the simulation by d.
func (n *Net) RunFor(d time.Duration) { n.RunUntil(n.now.Add(d), nil) }

// RunUntil runs until global time end or until cond (checked after every
// event) returns true; it reports whether cond stopped it.
func (n *Net) RunUntil(end time.Time, cond func() bool) bool {
	for n.queue.Len() > 0 && !n.queue[0].at.After(end) {
		ev := heap.Pop(&n.queue).(*event)
		n.now = ev.at
		n.handle(ev)
		if cond != nil && cond() {
			return true
		}
	}
	n.now = end
	return false
}

func (n *Net) handle(ev *event) {
	if ev.call != nil {
		ev.call()
		return
	}
	s := ev.site
	if !s.Alive {
		return
	}
	if n.now.Before(s.pausedUntil) {
		n.postpone(s, ev)
		return
	}
	n.Events++
	if ev.pkt == nil {
		if !ev.at.Equal(s.wakeAt) {
			return // superseded wake-up
		}
		s.wakeAt = time.Time{}
		s.Core.Tick(s.Local(n.now))
	} else {
		s.Core.Receive(s.Local(ev.rx), ev.from, ev.pkt)
	}
	n.after(s)
}

// postpone moves an event of a paused site to the end of its pause: a
// datagram keeps the time it was read; a wake-up goes after the
// datagrams that waited, as the agent runs a tick after the datagrams
// already read.
func (n *Net) postpone(s *Site, ev *event) {
	if ev.pkt != nil {
		n.push(&event{at: s.pausedUntil, rx: ev.rx, site: s, from: ev.from, pkt: ev.pkt})
		return
	}
	if !ev.at.Equal(s.wakeAt) {
		return // superseded wake-up
	}
	s.wakeAt = s.pausedUntil.Add(time.Nanosecond)
	n.push(&event{at: s.wakeAt, site: s})
}

// after does what a site's core asks (sends its datagrams, records its
// route changes) and schedules its next wake-up.
func (n *Net) after(s *Site) {
	n.drain(s)
	if !s.Alive {
		return
	}
	dl := s.Core.NextDeadline()
	if dl.IsZero() {
		return
	}
	at := s.global(dl)
	for s.Local(at).Before(dl) { // rounding with skew: never wake early
		at = at.Add(time.Nanosecond)
	}
	if at.Before(n.now) {
		at = n.now
	}
	if s.wakeAt.IsZero() || at.Before(s.wakeAt) {
		s.wakeAt = at
		n.push(&event{at: at, site: s})
	}
}

// drain takes a site's Ready: it puts the datagrams on the network and
// records the route changes of a new table.
func (n *Net) drain(s *Site) {
	rd := s.Core.Ready(s.Local(n.now))
	for _, o := range rd.Send {
		if n.unmeasurable(s, o) {
			n.TrainsDropped++
			continue
		}
		n.Sent++
		from := s.Addr
		if s.nat != nil {
			from = n.natOut(s, o.To)
		}
		if n.Tap != nil {
			n.Tap(from, o.To, o.Payload)
		}
		dst, ok := n.byAddr[o.To]
		if !ok {
			n.Undeliverable++
			continue
		}
		if dst.nat != nil && !n.natAdmits(dst, o.To, from) {
			n.Filtered++
			continue
		}
		l := n.links[[2]int{s.index, dst.index}]
		rng := n.rng
		if isTrain(o.Payload) {
			rng = n.trainRng
		}
		if l.Down || (l.Loss > 0 && rng.Float64() < l.Loss) || (n.Drop != nil && n.Drop(from, o.To, o.Payload)) {
			n.Lost++
			continue
		}
		d := l.Delay + n.transmit(s.index, dst.index, l, len(o.Payload))
		if l.Jitter > 0 {
			d += time.Duration(rng.Int64N(int64(l.Jitter)))
		}
		rx := n.now.Add(d)
		n.push(&event{at: rx.Add(dst.HandleLag), rx: rx, site: dst, from: from, pkt: o.Payload})
	}
	s.Switches = append(s.Switches, rd.Switches...)
	if rd.Table != nil {
		n.recordRoutes(s, rd.Table)
	}
}

// isTrain reports whether a datagram is a packet train's or its report,
// in the clear.
func isTrain(pkt []byte) bool {
	return len(pkt) > wire.CommonHeaderLen && wire.Type(pkt[2]) == wire.TypeTrain
}

// unmeasurable reports whether datagram o from s is a train packet (not
// a report) in the clear on a link without a rate. Such a link is
// unlimited: the train's dispersion on it would be its jitter, not a
// rate. Dropped before anything else sees it, it leaves the scenarios of
// links without rates as they ran before trains existed.
func (n *Net) unmeasurable(s *Site, o site.Datagram) bool {
	if !isTrain(o.Payload) || o.Payload[3]&wire.TrainFlagReport != 0 {
		return false
	}
	dst, ok := n.byAddr[o.To]
	return ok && n.links[[2]int{s.index, dst.index}].Rate <= 0
}

// transmit returns how long a datagram of size bytes (payload) entering
// link (a, b) now waits and takes to be sent: zero on a link without a
// rate.
func (n *Net) transmit(a, b int, l Link, size int) time.Duration {
	if l.Rate <= 0 {
		return 0
	}
	k := [2]int{a, b}
	start := n.busy[k]
	if start.Before(n.now) {
		start = n.now
	}
	done := start.Add(time.Duration(float64(size+28) * 8 / l.Rate * 1e9))
	n.busy[k] = done
	return done.Sub(n.now)
}

// recordRoutes appends the changes between a site's last seen table and
// its new one t.
func (n *Net) recordRoutes(s *Site, t *routing.Table) {
	old := s.table
	s.table = t
	dests := map[wire.SiteID]bool{}
	for _, r := range old.Routes() {
		dests[r.Dest] = true
	}
	for _, r := range t.Routes() {
		dests[r.Dest] = true
	}
	ids := make([]wire.SiteID, 0, len(dests))
	for id := range dests {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		var from, to []wire.SiteID
		if r, ok := old.Lookup(id); ok {
			from = r.Path
		}
		if r, ok := t.Lookup(id); ok {
			to = r.Path
		}
		if !slices.Equal(from, to) {
			c := RouteChange{At: n.now, Site: s.Name, Dest: id, From: from, To: to}
			if from != nil && to != nil && s.Node != nil {
				if sw, ok := s.Node.LastSwitch(id); ok {
					c.Reason = sw.Reason
				}
			}
			n.Changes = append(n.Changes, c)
		}
	}
}

// Path returns the current path of a site to a destination (nil if none).
func (n *Net) Path(src, dst string) []wire.SiteID {
	r, ok := n.Site(src).Node.Table().Lookup(n.Site(dst).ID)
	if !ok {
		return nil
	}
	return r.Path
}

// PathNames returns Path as site names.
func (n *Net) PathNames(src, dst string) []string {
	var out []string
	for _, id := range n.Path(src, dst) {
		out = append(out, n.nameOf(id))
	}
	return out
}

func (n *Net) nameOf(id wire.SiteID) string {
	for _, s := range n.sites {
		if s.ID == id {
			return s.Name
		}
	}
	return id.String()
}

// Mean returns the link's mean one-way delay, its jitter's mean included:
// the delay a packet sees on average, which is what a route should be
// judged by.
func (l Link) Mean() time.Duration { return l.Delay + l.Jitter/2 }

// TrueDelay returns the mean one-way delay (Link.Mean) of a path from
// src; ok is false if a link is down.
func (n *Net) TrueDelay(src string, path []wire.SiteID) (time.Duration, bool) {
	var sum time.Duration
	prev := n.Site(src).index
	for _, id := range path {
		next := -1
		for _, s := range n.sites {
			if s.ID == id {
				next = s.index
			}
		}
		if next < 0 {
			return 0, false
		}
		l := n.links[[2]int{prev, next}]
		if l.Down {
			return 0, false
		}
		sum += l.Mean()
		prev = next
	}
	return sum, true
}

// FromScenario builds a network from a testbed scenario: one site per
// scenario site, links with the scenario's delay, jitter and loss, clock
// offsets from the scenario, every site bootstrapping through the first.
func FromScenario(sc *scenario.Scenario, seed uint64, configure func(*control.Config)) *Net {
	n := New(seed)
	for i, s := range sc.Sites {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(s.Name, time.Duration(s.ClockOffset), boot, configure)
	}
	for i := range sc.Sites {
		for j := range sc.Sites {
			if i != j {
				p := sc.Link(i, j)
				n.links[[2]int{i, j}] = Link{Delay: p.Delay, Jitter: p.Jitter, Loss: p.Loss}
			}
		}
	}
	return n
}

// WithRates gives every link the rate of the scenario's link (FromScenario
// leaves links without one, so that no datagram queues).
func (n *Net) WithRates(sc *scenario.Scenario) *Net {
	for i := range sc.Sites {
		for j := range sc.Sites {
			if l, ok := n.links[[2]int{i, j}]; ok && i != j {
				l.Rate = float64(sc.Link(i, j).Rate)
				n.links[[2]int{i, j}] = l
			}
		}
	}
	return n
}

// String summarises the network.
func (n *Net) String() string { return fmt.Sprintf("sim: %d sites at +%v", len(n.sites), n.Elapsed()) }

type event struct {
	at   time.Time
	seq  uint64
	site *Site
	from netip.AddrPort
	pkt  []byte    // nil for a wake-up
	rx   time.Time // when a datagram was read (global)
	// call, when set, is run at the event's time instead (traffic.go);
	// site is nil then.
	call func()
}

func (n *Net) push(ev *event) {
	n.seq++
	ev.seq = n.seq
	heap.Push(&n.queue, ev)
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	ev := old[len(old)-1]
	*q = old[:len(old)-1]
	return ev
}
