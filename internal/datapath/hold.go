package datapath

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// Reorder-free path switching.
//
// When the path to a destination gets shorter by Δ, a packet sent on the
// new path right after the switch would overtake packets still in flight on
// the old one, and TCP would read that as loss. Δ is known exactly without
// synchronised clocks: it is the difference of two offset-shifted path
// delays between the same endpoints. So the source holds packets for the
// destination until Δ has passed since the last packet it sent on the old
// path, then sends them on the new path: each arrives just after its
// predecessor, never later than it would have on the old path. A flow that
// was idle for longer than Δ is not held at all. When the new path is
// longer nothing needs to wait.

// maxHeld bounds the packets held for one destination or flow. A hold
// that fills it ends early (Stats.HoldOverflows): the held packets are
// sent at once, in order, and so is the one that found the queue full. A
// flow fast enough to fill it during the hold may then see a few packets
// overtake the last ones of the old path, which costs it far less than
// losing everything beyond the bound (a 100 kpps flood moved under a
// 100 ms hold lost 44,000 datagrams that way, docs/peers.md).
const maxHeld = 4096

// dest is the egress state towards one destination site.
type dest struct {
	path    [wire.MaxPath]wire.SiteID
	pathLen int
	delay   time.Duration // offset-shifted delay of path when it was chosen
	last    int64         // when the last packet was sent (monotonic ns)
	hold    *holdQueue
}

// samePath reports whether r uses the path last used towards d.
func (d *dest) samePath(r *routing.Route) bool {
	if len(r.Path) != d.pathLen {
		return false
	}
	for i, s := range r.Path {
		if d.path[i] != s {
			return false
		}
	}
	return true
}

// holdTime returns how long after d.last a packet on r's path must wait.
func (d *dest) holdTime(r *routing.Route) time.Duration {
	if d.pathLen == 0 {
		return 0
	}
	gain := d.delay - r.Delay
	if prev := r.PrevPath; len(prev) == d.pathLen {
		same := true
		for i, s := range prev {
			same = same && d.path[i] == s
		}
		if same {
			// The gain measured on one matrix at the moment of the
			// switch is exact; prefer it.
			gain = r.PrevDelay - r.Delay
		}
	}
	return max(gain, 0)
}

// use records that packets now go on r's path.
func (d *dest) use(r *routing.Route) {
	d.pathLen = copy(d.path[:], r.Path)
	d.delay = r.Delay
}

// holdQueue keeps the packets of one destination during a switch. A timer
// releases them at the deadline; if a packet for the destination comes
// after the deadline first, the egress loop releases them itself, so a
// busy flow never waits for a late timer.
type holdQueue struct {
	// armed mirrors active for the egress loop's check of every packet,
	// which then takes mu only while a hold may be active.
	armed  atomic.Bool
	mu     sync.Mutex
	active bool
	until  int64
	gen    uint64 // counts holds, so a late timer cannot end a later hold
	msgs   []transport.Message
}

// lateRelease is how late after its deadline a release counts as late
// (Stats.HoldsLate): the hold margin is 0.5 ms.
const lateRelease = int64(time.Millisecond)

// bufPool recycles the buffers of held packets.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, wire.Headroom+2048+wire.Tailroom); return &b }}

// enqueue copies m into the queue if a hold is active at now and reports
// whether it did. A hold whose deadline has passed, or whose queue is
// full, is released first, and m is then not taken.
func (q *holdQueue) enqueue(e *Engine, m transport.Message, now int64) bool {
	if !q.armed.Load() {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.active {
		return false
	}
	if now >= q.until {
		q.flush(e, now)
		return false
	}
	if len(q.msgs) >= maxHeld {
		e.stats.HoldOverflows.Add(1)
		q.flush(e, q.until) // early, not late
		return false
	}
	bp := bufPool.Get().(*[]byte)
	b := append((*bp)[:0], m.Buf[:m.N]...)
	q.msgs = append(q.msgs, transport.Message{Buf: b, N: m.N, Addr: m.Addr})
	e.stats.Held.Add(1)
	return true
}

// deadline returns when the active hold ends (monotonic ns), or 0 when
// none is active.
func (q *holdQueue) deadline() int64 {
	if !q.armed.Load() {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.active {
		return 0
	}
	return q.until
}

// start activates the queue until the monotonic time until and arms the
// timer that releases it.
func (q *holdQueue) start(e *Engine, now, until int64) {
	q.mu.Lock()
	q.active, q.until = true, until
	q.armed.Store(true)
	q.gen++
	gen := q.gen
	q.mu.Unlock()
	e.stats.Holds.Add(1)
	time.AfterFunc(time.Duration(until-now), func() { q.release(e, gen) })
}

// release ends hold number gen, if it is still active.
func (q *holdQueue) release(e *Engine, gen uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.active && q.gen == gen {
		q.flush(e, e.now())
	}
}

// flush sends the held packets, in order, and deactivates the queue. The
// caller holds q.mu.
func (q *holdQueue) flush(e *Engine, now int64) {
	if now-q.until > lateRelease {
		e.stats.HoldsLate.Add(1)
	}
	if len(q.msgs) > 0 {
		e.send(q.msgs)
	}
	for i := range q.msgs {
		b := q.msgs[i].Buf[:0]
		bufPool.Put(&b)
		q.msgs[i] = transport.Message{}
	}
	q.msgs = q.msgs[:0]
	q.active = false
	q.armed.Store(false)
}
