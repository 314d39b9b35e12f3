package wanem

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// Port is one site's end of the underlay: a file descriptor that reads and
// writes whole IP packets (a TUN device, or a datagram socket in tests),
// and the underlay address of the site's gateway.
type Port struct {
	FD   int
	Addr netip.Addr
}

// Emulator carries packets between the ports of a scenario's sites.
type Emulator struct {
	sc     *scenario.Scenario
	nw     *Network
	ports  []Port
	links  [][]*linkState
	sched  []*scheduler
	byAddr map[netip.Addr]int
	clock  func() int64
	start  time.Time
	pool   sync.Pool
	stop   chan struct{}
	wg     sync.WaitGroup

	// Counters of packets dropped before reaching a link.
	unroutable atomic.Uint64
	writeErrs  atomic.Uint64
}

// linkState wraps a model Link with the lock that serialises the reader
// that feeds it and the control socket that changes it, and with the
// measurements of the delays packets actually got.
type linkState struct {
	mu       sync.Mutex
	link     *Link
	inflight atomic.Int64
	// Measured one-way delay (write time - read time), smoothed with a
	// time constant of smoothTau, and the last sample.
	ewma, lastDelay float64 // nanoseconds
	lastAt          int64
	delivered       uint64
	downDrops       uint64
	// late counts packets written more than lateWrite after they were
	// due: stalls of the emulator itself.
	late uint64
}

// lateWrite is how late after its due time a packet counts as late.
const lateWrite = int64(time.Millisecond)

// smoothTau is the time constant of the measured-delay average.
const smoothTau = 200 * time.Millisecond

// observe records that a packet read at arrived and due at due was
// written at now.
func (ls *linkState) observe(arrived, due, now int64) {
	d := float64(now - arrived)
	ls.mu.Lock()
	if now-due > lateWrite {
		ls.late++
	}
	if ls.delivered == 0 {
		ls.ewma = d
	} else {
		a := 1 - math.Exp(-float64(now-ls.lastAt)/float64(smoothTau))
		ls.ewma += a * (d - ls.ewma)
	}
	ls.lastDelay, ls.lastAt = d, now
	ls.delivered++
	ls.mu.Unlock()
}

// New prepares an emulator for scenario sc whose site i is reached
// through ports[i]. Start starts it.
func New(sc *scenario.Scenario, ports []Port) (*Emulator, error) {
	if len(ports) != len(sc.Sites) {
		return nil, fmt.Errorf("wanem: %d ports for %d sites", len(ports), len(sc.Sites))
	}
	e := &Emulator{
		sc: sc, nw: NewNetwork(sc), ports: ports, start: time.Now(),
		byAddr: map[netip.Addr]int{}, stop: make(chan struct{}),
	}
	e.clock = monoClock(e.start)
	bufSize := max(sc.UnderlayMTU, 1500) + 64
	e.pool.New = func() any { return &packet{buf: make([]byte, bufSize)} }
	n := len(sc.Sites)
	e.links = make([][]*linkState, n)
	for a := range n {
		if _, dup := e.byAddr[ports[a].Addr]; dup {
			return nil, fmt.Errorf("wanem: address %v given to two sites", ports[a].Addr)
		}
		e.byAddr[ports[a].Addr] = a
		if ports[a].Addr.Is4() {
			e.byAddr[IPv6Of(ports[a].Addr)] = a // see ipv6.go
		}
		e.links[a] = make([]*linkState, n)
		for b := range n {
			if a != b {
				e.links[a][b] = &linkState{link: e.nw.Link(a, b)}
			}
		}
	}
	for b := range n {
		s, err := newScheduler(func(p *packet, now int64) { e.deliver(b, p, now) })
		if err != nil {
			return nil, err
		}
		e.sched = append(e.sched, s)
	}
	return e, nil
}

// Start launches one reader per port and one scheduler per site.
func (e *Emulator) Start() {
	for i := range e.ports {
		e.wg.Add(2)
		go func() { defer e.wg.Done(); e.sched[i].run(e.clock, e.stop) }()
		go func() { defer e.wg.Done(); e.read(i) }()
	}
}

// Stop stops the schedulers. Readers stop when their descriptors are
// closed by the caller (a blocked read cannot be interrupted otherwise).
func (e *Emulator) Stop() {
	close(e.stop)
	for _, s := range e.sched {
		s.wake()
	}
}

// Wait waits until the schedulers and the readers have returned: call it
// after Stop, once the readers' descriptors are shut down, before closing
// them (a closed descriptor's number is reused at once).
func (e *Emulator) Wait() { e.wg.Wait() }

func (e *Emulator) getPacket() *packet { return e.pool.Get().(*packet) }

func (e *Emulator) putPacket(p *packet) {
	p.atDownlink = false
	e.pool.Put(p)
}

// read is the loop of one site's reader: it reads packets from the site's
// port, passes them through the model, and either writes them at once
// (nothing to wait for and nothing queued ahead on the link) or hands them
// to the destination's scheduler. It runs on a real-time thread of its
// own (readerPriority).
func (e *Emulator) read(a int) {
	runtime.LockOSThread()
	realTime(readerPriority)
	fd := e.ports[a].FD
	for {
		p := e.getPacket()
		n, err := unix.Read(fd, p.buf)
		if err != nil || n == 0 {
			e.putPacket(p)
			if err != nil && (errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)) {
				continue
			}
			return
		}
		now := e.clock()
		b := e.destination(p.buf[:n])
		if b < 0 || b == a {
			e.unroutable.Add(1)
			e.putPacket(p)
			continue
		}
		p.n, p.from, p.to, p.arrived = n, a, b, now
		e.route(p, now)
	}
}

// route computes when p reaches its destination and delivers or queues it.
func (e *Emulator) route(p *packet, now int64) {
	ls := e.links[p.from][p.to]
	ls.mu.Lock()
	t, ok := e.nw.Ingress(now, p.from, p.to, p.n)
	ls.mu.Unlock()
	if !ok {
		e.putPacket(p)
		return
	}
	p.due = t
	p.atDownlink = e.nw.HasDownlink(p.to)
	if t <= now && !p.atDownlink && ls.inflight.Load() == 0 {
		e.write(p, now)
		return
	}
	ls.inflight.Add(1)
	e.sched[p.to].push(p)
}

// deliver is called by site b's scheduler for a packet that is due.
func (e *Emulator) deliver(b int, p *packet, now int64) {
	if p.atDownlink {
		ls := e.links[p.from][p.to]
		t, ok := e.nw.Downlink(p.due, b, p.n)
		if !ok {
			ls.mu.Lock()
			ls.downDrops++
			ls.mu.Unlock()
			ls.inflight.Add(-1)
			e.putPacket(p)
			return
		}
		p.atDownlink = false
		if t > now {
			p.due = t
			e.sched[b].push(p)
			return
		}
	}
	ls := e.links[p.from][p.to]
	e.write(p, now)
	ls.inflight.Add(-1)
}

// write sends p to its destination's port and records its delay.
func (e *Emulator) write(p *packet, now int64) {
	if _, err := unix.Write(e.ports[p.to].FD, p.buf[:p.n]); err != nil {
		e.writeErrs.Add(1)
	} else {
		e.links[p.from][p.to].observe(p.arrived, p.due, e.clock())
	}
	e.putPacket(p)
}

// destination returns the site whose gateway has the packet's IPv4
// destination address (or IPv6, see ipv6.go), or -1.
func (e *Emulator) destination(pkt []byte) int {
	if len(pkt) > 0 && pkt[0]>>4 == 6 {
		return e.destination6(pkt)
	}
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return -1
	}
	dst := netip.AddrFrom4([4]byte(pkt[16:20]))
	if i, ok := e.byAddr[dst]; ok {
		return i
	}
	return -1
}

// SetLink changes the properties of the directed link a->b. It takes
// effect for the next packet; packets already queued keep their schedule.
func (e *Emulator) SetLink(a, b int, patch scenario.Patch) (scenario.LinkProps, error) {
	if a < 0 || b < 0 || a >= len(e.links) || b >= len(e.links) || a == b {
		return scenario.LinkProps{}, fmt.Errorf("no link %d->%d", a, b)
	}
	if err := scenario.ValidatePatch(patch); err != nil {
		return scenario.LinkProps{}, err
	}
	ls := e.links[a][b]
	ls.mu.Lock()
	defer ls.mu.Unlock()
	p := patch.Apply(ls.link.Props())
	ls.link.Set(p)
	return p, nil
}

// Scenario returns the scenario the emulator runs.
func (e *Emulator) Scenario() *scenario.Scenario { return e.sc }

// Uptime returns how long the emulator has run.
func (e *Emulator) Uptime() time.Duration { return time.Since(e.start) }
