package datapath

import (
	"math/rand/v2"
	"time"

	ethframe "github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/wire"
)

// Flow classes.
//
// Every TCP or UDP flow (the 5-tuple inside the frame, frame.ParseFlow)
// that a device loop forwards has an entry in that loop's flow table,
// which counts the bytes the flow sent. A flow is in the latency class
// until it has sent more than FlowConfig.Threshold bytes or one of its
// packets carries a DSCP of FlowConfig.DSCP; it is then bulk for the rest
// of its life. The count halves every flowHalfLife, so that a
// long-lived connection carrying small requests (a ZooKeeper session,
// 10 KB/s for hours) never adds up to the threshold: a flow must send
// Threshold bytes within a few half-lives, that is at more than about
// Threshold / (2 × flowHalfLife) on average. Latency flows, and all
// traffic that is not a TCP or UDP flow, take Route.Path. A bulk flow
// takes Route.Bulk.Path when the route has one, and keeps the path it was given for as long as it lives, as
// long as the routing table still offers that path (as Path or as
// Bulk.Path) to the destination; a path that died or was withdrawn is no
// longer offered, and the flow then moves to the path of its class. A
// move between Route.Path and a bulk path holds the flow's packets for
// the delay difference, and at least for the queue the flow may have
// built on the path it leaves (flowpath.go, hold.go), so no packet of
// the flow overtakes an earlier one. docs/bulk.md has the design and the
// figures.
//
// The table is a set-associative cache: flowSets sets of flowWays slots,
// the set chosen by a seeded hash of the key. A flow idle for longer than
// the idle timeout is gone: its slot is free for another. When every slot
// of a flow's set holds a live flow, the new flow is not tracked: it is
// forwarded in the latency class and counted (flows_untracked). So each
// device loop tracks at most flowSets × flowWays = 4096 live flows, in
// 4096 × ~100 bytes of memory allocated once, and a lookup reads one set.

// Table geometry: 512 sets of 8 slots.
const (
	flowWays = 8
	flowSets = 512
)

// DefaultFlowIdle is how long a flow may be silent before it ends: long
// enough for a TCP connection's retransmission backoff of a few seconds,
// short enough that ports are rarely reused within it.
const DefaultFlowIdle = 15 * time.Second

// A flow that fills its path is bulk too, whatever its byte count: more
// than flowFillShare of the available throughput of Route.Path's
// bottleneck (routing.BulkPath.PathRate) in each of flowFillWindows
// windows of flowRateWindow in a row, that is for a second. Without it, a
// transfer on a link slower than Threshold per few seconds fills the
// link's queue before it has sent Threshold bytes, latency routing then
// moves the route away from the queue, and the transfer with it, onto a
// path that may be far narrower (on lanman2017, LAN to NEU through BOR:
// 2.4 Mbit/s instead of 11). A bulk flow keeps the widest path instead,
// and only the small flows move. A flow that filled its path for one
// window when the route switches under it is bulk at once, so that it
// does not follow the switch only to move back when it is classified.
const (
	flowRateWindow  = 500 * time.Millisecond
	flowFillShare   = 0.5
	flowFillWindows = 2
)

// flowHalfLife is how often a flow's byte count halves.
const flowHalfLife = int64(10 * time.Second)

// DefaultBulkThreshold is the default of FlowConfig.Threshold: 10 MB,
// four seconds of a 20 Mbit/s link (docs/bulk.md).
const DefaultBulkThreshold = 10_000_000

// FlowConfig configures the flow classes of the data path.
type FlowConfig struct {
	// Enabled classifies flows; when false every frame takes Route.Path
	// and no flow is tracked.
	Enabled bool
	// Threshold is how many bytes (of inner Ethernet frames) a flow sends
	// before it becomes bulk.
	Threshold uint64
	// DSCP has bit d set for every DSCP value d (0..63) that makes a
	// flow bulk at once.
	DSCP uint64
	// Idle is how long a flow may be silent before it ends (0 means
	// DefaultFlowIdle).
	Idle time.Duration
}

// DefaultFlowConfig returns flow classes on, a threshold of 10 MB, no
// DSCP marks and the default idle timeout.
func DefaultFlowConfig() FlowConfig {
	return FlowConfig{Enabled: true, Threshold: DefaultBulkThreshold, Idle: DefaultFlowIdle}
}

// idle returns the idle timeout in nanoseconds.
func (c *FlowConfig) idle() int64 {
	if c.Idle <= 0 {
		return int64(DefaultFlowIdle)
	}
	return int64(c.Idle)
}

// flowSlot is one slot of a flowTable.
type flowSlot[K comparable, V any] struct {
	key  K
	used bool
	last int64 // when the flow was last seen (monotonic ns)
	val  V
}

// slotState says how flowTable.get found a slot.
type slotState int

const (
	slotFound   slotState = iota // the flow's own slot
	slotFree                     // an empty slot, now the flow's
	slotExpired                  // the slot of a flow that ended; its val is still the old flow's
)

// flowTable maps flows to values of type V, for one goroutine. Its slots
// are allocated once; nothing else allocates.
type flowTable[K comparable, V any] struct {
	seed  uint64
	slots []flowSlot[K, V]
}

func newFlowTable[K comparable, V any]() *flowTable[K, V] {
	return &flowTable[K, V]{seed: rand.Uint64(), slots: make([]flowSlot[K, V], flowSets*flowWays)}
}

// get returns the slot of key k (whose hash with t.seed is h) seen at now,
// taking a free slot or one whose flow has been idle for longer than idle
// if k has none. It returns nil when the set is full of live flows.
func (t *flowTable[K, V]) get(k *K, h uint64, now, idle int64) (*flowSlot[K, V], slotState) {
	set := t.slots[(h%flowSets)*flowWays : (h%flowSets+1)*flowWays]
	var spare *flowSlot[K, V]
	for i := range set {
		s := &set[i]
		if s.used && s.key == *k {
			s.last = now
			return s, slotFound
		}
		if spare == nil && (!s.used || now-s.last > idle) {
			spare = s
		}
	}
	if spare == nil {
		return nil, slotFound
	}
	state := slotFree
	if spare.used {
		state = slotExpired
	}
	spare.key, spare.used, spare.last = *k, true, now
	return spare, state
}

// egressFlow is the state of one flow a device loop forwards.
type egressFlow struct {
	dst   wire.SiteID
	bytes uint64 // bytes sent, halved every flowHalfLife since epoch
	epoch int64  // when the count last halved (or the flow began)
	// winStart and winBytes are the flow's current rate window
	// (flowRateWindow) and fullWins how many windows in a row before it
	// carried more than flowFillShare of Route.Path's throughput.
	winStart int64
	winBytes uint64
	fullWins uint8
	bulk     bool
	// sent is true once a packet went out; path, pathLen, onMain (on
	// Route.Path), delay and lastSent then describe the last one.
	sent     bool
	onMain   bool
	path     [wire.MaxPath]wire.SiteID
	pathLen  uint8
	delay    time.Duration // offset-shifted delay of path, as last known
	lastSent int64
	// pinned is true when the flow took a bulk path (Route.Bulk) and
	// keeps it while it is offered.
	pinned bool
	// hold keeps the flow's packets during a move to a shorter path;
	// made at the first move that needs it, and kept for the slot's next
	// flows.
	hold *holdQueue
}

// reset makes f the state of a new flow to dst begun at now, keeping its
// hold queue.
func (f *egressFlow) reset(dst wire.SiteID, now int64) {
	*f = egressFlow{dst: dst, epoch: now, winStart: now, hold: f.hold}
}

// count adds n bytes sent at now to the flow's decaying count and
// returns it.
func (f *egressFlow) count(n uint64, now int64) uint64 {
	if age := now - f.epoch; age >= flowHalfLife {
		halvings := age / flowHalfLife
		f.bytes >>= min(halvings, 63)
		f.epoch += halvings * flowHalfLife
	}
	f.bytes += n
	return f.bytes
}

// fills adds n bytes sent at now to the flow's rate window and returns
// in how many windows in a row before this one (at most
// flowFillWindows) the flow sent more than flowFillShare of what rate
// (bits per second; 0: unknown) could carry.
func (f *egressFlow) fills(n uint64, now int64, rate float64) uint8 {
	if age := now - f.winStart; age >= int64(flowRateWindow) {
		full := age < 2*int64(flowRateWindow) && rate > 0 &&
			float64(f.winBytes)*8 > flowFillShare*rate*flowRateWindow.Seconds()
		if full {
			f.fullWins = min(f.fullWins+1, flowFillWindows)
		} else {
			f.fullWins = 0
		}
		f.winStart, f.winBytes = now, 0
	}
	f.winBytes += n
	return f.fullWins
}

// onPath reports whether the flow's last packet went on p.
func (f *egressFlow) onPath(p []wire.SiteID) bool {
	if !f.sent || len(p) != int(f.pathLen) {
		return false
	}
	for i, s := range p {
		if f.path[i] != s {
			return false
		}
	}
	return true
}

// recvKey names a flow at the receiving gateway: its sending site, its
// network and its 5-tuple.
type recvKey struct {
	source  wire.SiteID
	network uint32
	flow    ethframe.Flow
}

// recvFlow is what the receiving gateway keeps of a flow: the highest
// sequence number that one of its frames carried.
type recvFlow struct {
	highest uint32
}
