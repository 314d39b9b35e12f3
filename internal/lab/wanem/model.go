// Package wanem is detour's user-space WAN emulator. The kernel of the
// testbed machine has no netem, so every packet between sites passes
// through this process: it reads IP packets from each site's underlay TUN
// device, delays them as the directed link between the two sites says, and
// writes them to the destination site's TUN device.
//
// The package has two layers. The link model (this file) is pure: it does
// no I/O and takes the time as an argument, so it is tested
// deterministically. The I/O shell (emulator.go and what it uses) owns the
// TUN devices, the packet scheduler and the control socket.
//
// Times in the model are nanoseconds on a monotonic clock, as int64.
package wanem

import (
	"math/rand/v2"
	"time"

	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// Pipe is a FIFO transmitter of a given rate with a finite drop-tail
// queue in front of it. A packet offered at time now waits until the
// packets before it have been sent (queueing delay = queued bytes / rate)
// and then takes size/rate to send. A zero rate is unlimited.
type Pipe struct {
	rate scenario.Rate
	// limit is the queue capacity expressed as the time the rate needs to
	// send it, in nanoseconds.
	limit int64
	// busyUntil is when the last accepted packet has been fully sent.
	busyUntil int64
}

// NewPipe returns a pipe of the given rate whose queue holds limit bytes.
func NewPipe(rate scenario.Rate, limit int64) *Pipe {
	p := &Pipe{}
	p.Set(rate, limit)
	return p
}

// Set changes the rate and the queue size. Packets already accepted keep
// their schedule; the next packet starts after them.
func (p *Pipe) Set(rate scenario.Rate, limit int64) {
	p.rate = rate
	p.limit = 0
	if rate > 0 {
		p.limit = txTime(rate, int(limit))
	}
}

// txTime is the time, in nanoseconds, to send size bytes at rate.
func txTime(rate scenario.Rate, size int) int64 {
	if rate == 0 {
		return 0
	}
	return int64(float64(size) * 8e9 / float64(rate))
}

// Offer queues a packet of size bytes at time now and returns when its
// last bit leaves the pipe, or false when the queue is full.
func (p *Pipe) Offer(now int64, size int) (int64, bool) {
	if p.rate == 0 {
		return now, true
	}
	start := max(now, p.busyUntil)
	tx := txTime(p.rate, size)
	// Drop-tail: the bytes still queued plus this packet must fit.
	if start-now+tx > p.limit {
		return 0, false
	}
	p.busyUntil = start + tx
	return p.busyUntil, true
}

// Backlog returns how long a packet offered at now would wait before it
// starts being sent: the queueing delay.
func (p *Pipe) Backlog(now int64) time.Duration {
	if p.busyUntil <= now {
		return 0
	}
	return time.Duration(p.busyUntil - now)
}

// Link is one directed link between two sites: random loss, a rate limit
// with a drop-tail queue, propagation delay and jitter. Unless reordering
// is allowed, a packet never arrives before one sent earlier on the same
// link: arrival = max(computed, previous arrival). That rule also keeps
// order when the delay is made shorter at run time.
type Link struct {
	props scenario.LinkProps
	pipe  Pipe
	rng   *rand.Rand
	// last is the latest arrival time handed out.
	last int64
	// onset is when the latest load began to queue (see Onset); run is
	// when the current run of packets waiting QueueOnset or more began
	// (zero: the last packet waited less), and high when a packet last
	// waited QueueLoad or more.
	onset, run, high int64
	// Counters.
	Offered, Lost, QueueDrops uint64
}

// A load on a link is a run of packets each waiting QueueOnset or more
// that reaches QueueLoad; its onset is the first packet of that run. A
// queue that only blips up to a few milliseconds is no load, and one that
// drains for a moment (a TCP flow at each loss) is the same load until no
// packet has waited QueueLoad for IdleReset.
const (
	QueueOnset = 5 * time.Millisecond
	QueueLoad  = 20 * time.Millisecond
	IdleReset  = time.Second
)

// Onset returns when the latest load on the link began to queue, and
// whether there was one.
func (l *Link) Onset() (int64, bool) { return l.onset, l.onset != 0 }

// NewLink returns a link with the given properties whose random choices
// (loss, jitter) come from a generator seeded with seed.
func NewLink(p scenario.LinkProps, seed uint64) *Link {
	l := &Link{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	l.Set(p)
	return l
}

// Props returns the link's current properties.
func (l *Link) Props() scenario.LinkProps { return l.props }

// Set changes the link's properties. Packets already on the link keep
// their arrival times, and later packets do not overtake them.
func (l *Link) Set(p scenario.LinkProps) {
	l.props = p
	l.pipe.Set(p.Rate, p.Queue.Limit(p.Rate))
}

// Offer sends a packet of size bytes into the link at time now and
// returns when it arrives at the far end, or false if it is lost (random
// loss or a full queue).
func (l *Link) Offer(now int64, size int) (int64, bool) {
	l.Offered++
	if l.props.Loss > 0 && l.rng.Float64() < l.props.Loss {
		l.Lost++
		return 0, false
	}
	l.trackOnset(now)
	sent, ok := l.pipe.Offer(now, size)
	if !ok {
		l.QueueDrops++
		return 0, false
	}
	t := sent + int64(l.delaySample())
	if !l.props.Reorder {
		t = max(t, l.last)
	}
	l.last = max(l.last, t)
	return t, true
}

// trackOnset updates the onset for a packet offered at now.
func (l *Link) trackOnset(now int64) {
	wait := l.pipe.Backlog(now)
	if wait < QueueOnset {
		l.run = 0
		return
	}
	if l.run == 0 {
		l.run = now
	}
	if wait < QueueLoad {
		return
	}
	if l.high == 0 || now-l.high > int64(IdleReset) {
		l.onset = l.run
	}
	l.high = now
}

// delaySample is the propagation delay plus a jitter drawn uniformly from
// [-jitter, +jitter], never below zero.
func (l *Link) delaySample() time.Duration {
	d := l.props.Delay
	if j := l.props.Jitter; j > 0 {
		d += time.Duration((l.rng.Float64()*2 - 1) * float64(j))
	}
	return max(d, 0)
}

// Expected returns the one-way delay a packet of size bytes entering the
// link at now would see, without jitter: queueing + sending + propagation.
func (l *Link) Expected(now int64, size int) time.Duration {
	return l.pipe.Backlog(now) + time.Duration(txTime(l.props.Rate, size)) + l.props.Delay
}

// Backlog returns the link's current queueing delay.
func (l *Link) Backlog(now int64) time.Duration { return l.pipe.Backlog(now) }

// Network is the model of a whole scenario: a Link for every directed
// pair of sites and, for sites with access capacity, an uplink and a
// downlink Pipe shared by all of the site's paths. A packet from a to b
// crosses a's uplink, the link a->b (queue, then propagation) and b's
// downlink. A site relaying traffic receives it on its downlink and sends
// it again on its uplink, so it uses its access link twice.
//
// A Network is not safe for concurrent use; the I/O shell serialises
// access to each link and each access pipe.
type Network struct {
	links    [][]*Link
	up, down []*Pipe
}

// NewNetwork builds the model of a scenario. Each link's random generator
// is seeded from the scenario's seed and the link's position.
func NewNetwork(s *scenario.Scenario) *Network {
	n := len(s.Sites)
	nw := &Network{links: make([][]*Link, n), up: make([]*Pipe, n), down: make([]*Pipe, n)}
	for a := range n {
		nw.links[a] = make([]*Link, n)
		for b := range n {
			if a != b {
				nw.links[a][b] = NewLink(s.Link(a, b), s.Seed*1000003+uint64(a*n+b))
			}
		}
		if acc := s.Sites[a].Access; acc != nil {
			if acc.Up > 0 {
				nw.up[a] = NewPipe(acc.Up, acc.Queue.Limit(acc.Up))
			}
			if acc.Down > 0 {
				nw.down[a] = NewPipe(acc.Down, acc.Queue.Limit(acc.Down))
			}
		}
	}
	return nw
}

// Sites returns the number of sites.
func (nw *Network) Sites() int { return len(nw.links) }

// Link returns the directed link from site a to site b.
func (nw *Network) Link(a, b int) *Link { return nw.links[a][b] }

// HasDownlink reports whether site b has a limited downlink, i.e. whether
// a packet arriving at b must be passed to Downlink at its arrival time.
func (nw *Network) HasDownlink(b int) bool { return nw.down[b] != nil }

// Uplink passes a packet of size bytes from site a through a's uplink at
// time now and returns when it leaves (now when a has none).
func (nw *Network) Uplink(now int64, a, size int) (int64, bool) {
	if nw.up[a] == nil {
		return now, true
	}
	return nw.up[a].Offer(now, size)
}

// Downlink passes a packet that reached site b at time now through b's
// downlink and returns when it is delivered. It must be called in the
// order in which packets reach b, i.e. at their arrival times.
func (nw *Network) Downlink(now int64, b, size int) (int64, bool) {
	if nw.down[b] == nil {
		return now, true
	}
	return nw.down[b].Offer(now, size)
}

// Ingress sends a packet from a to b at time now through a's uplink and
// the link a->b, and returns when it reaches b (before b's downlink).
func (nw *Network) Ingress(now int64, a, b, size int) (int64, bool) {
	t, ok := nw.Uplink(now, a, size)
	if !ok {
		return 0, false
	}
	return nw.links[a][b].Offer(t, size)
}
