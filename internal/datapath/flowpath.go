package datapath

import (
	"net/netip"
	"time"

	ethframe "github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// flowHoldMargin is added to the delay difference a flow moving to a
// shorter path is held for, as routing.Config.HoldMargin is for a route
// switch: it covers the error of the two paths' delay estimates.
const flowHoldMargin = 500 * time.Microsecond

// flowQueueAllowance is the least a flow moving between Route.Path and a
// bulk path is held for, whichever is shorter by estimate: the queue the
// flow may have built on the path it leaves. A flow becomes bulk by
// sending much, so it leaves the fastest path just when its own packets
// fill that path's queue, and the delay estimates in the table (made
// before the queue grew, and filtered against queueing) do not show it:
// on the narrow-relay testbed, moving without this wait reordered
// hundreds of frames per class change. 100 ms covers the queues of
// common WAN links; the price is one pause of 100 ms per move of a flow
// that moves at most a few times in its life.
const flowQueueAllowance = 100 * time.Millisecond

// SetFlowConfig sets the flow classes' configuration; the device loops
// apply it from their next frame.
func (e *Engine) SetFlowConfig(c FlowConfig) { e.flowCfg.Store(&c) }

// FlowConfig returns the flow classes' configuration in force.
func (e *Engine) FlowConfig() FlowConfig { return *e.flowCfg.Load() }

// classify finds the flow of frame fr, which goes to site dst, counts its
// bytes and class, and returns its state, or nil for a frame that is no
// TCP or UDP flow, a flow the table has no room for, or when flow classes
// are off.
func (g *egress) classify(dst wire.SiteID, rt *routing.Route, fr []byte) *egressFlow {
	cfg := g.e.flowCfg.Load()
	st := &g.e.stats
	if !cfg.Enabled {
		if g.flows != nil {
			g.sweep(-1) // every flow ends, once
			g.flows = nil
		}
		return nil
	}
	n := uint64(len(fr))
	dscp, ok := ethframe.ParseFlow(fr, &g.fr, &g.key)
	if !ok {
		st.LatencyFrames.Add(1)
		st.LatencyBytes.Add(n)
		return nil
	}
	if g.flows == nil {
		g.flows = newFlowTable[ethframe.Flow, egressFlow]()
	}
	if g.now-g.swept >= int64(time.Second) {
		g.sweep(cfg.idle())
	}
	s, state := g.flows.get(&g.key, g.key.Hash(g.flows.seed), g.now, cfg.idle())
	if s == nil {
		st.FlowsUntracked.Add(1)
		st.LatencyFrames.Add(1)
		st.LatencyBytes.Add(n)
		return nil
	}
	f := &s.val
	switch state {
	case slotExpired:
		g.e.stats.flowEnded(f.bulk)
		fallthrough
	case slotFree:
		f.reset(dst, g.now)
		st.flowsLatency.Add(1)
	}
	if f.dst != dst { // the host moved: the flow starts over on its new route
		f.dst, f.sent, f.pinned = dst, false, false
	}
	if !f.bulk && (f.count(n, g.now) > cfg.Threshold || f.filled(n, g.now, rt) || cfg.DSCP&(1<<dscp) != 0) {
		f.bulk = true
		st.flowsLatency.Add(-1)
		st.flowsBulk.Add(1)
		if state == slotFound {
			st.ClassChanges.Add(1)
			st.BulkMoves.Add(dst)
		}
	}
	if f.bulk {
		st.BulkFrames.Add(1)
		st.BulkBytes.Add(n)
	} else {
		st.LatencyFrames.Add(1)
		st.LatencyBytes.Add(n)
	}
	return f
}

// filled reports whether the flow, sending n bytes at now on route rt,
// fills its path: for flowFillWindows windows in a row, or for one when
// rt's path is no longer the one its last packet took (the route
// switched under it).
func (f *egressFlow) filled(n uint64, now int64, rt *routing.Route) bool {
	w := f.fills(n, now, pathRate(rt))
	return w >= flowFillWindows || w >= 1 && f.sent && f.onMain && !f.onPath(rt.Path)
}

// pathRate is the available throughput of rt's Route.Path in bits per
// second, or 0 when it is not known.
func pathRate(rt *routing.Route) float64 {
	if rt.Bulk == nil {
		return 0
	}
	return rt.Bulk.PathRate
}

// sweep frees the slots of the flows idle for longer than idle
// nanoseconds (all of them for a negative idle), so that the gauges of
// live flows count only live ones.
func (g *egress) sweep(idle int64) {
	g.swept = g.now
	for i := range g.flows.slots {
		s := &g.flows.slots[i]
		if s.used && (idle < 0 || g.now-s.last > idle) {
			g.e.stats.flowEnded(s.val.bulk)
			s.used = false
		}
	}
}

// choosePath picks the path of a packet of flow f (nil for traffic that
// is no flow) on route rt: Route.Path, or for a bulk flow the bulk path it
// keeps or is given. A bulk path is written into g.hdr. It returns the
// first hop, the path's offset-shifted delay and whether the path is
// Route.Path.
func (g *egress) choosePath(rt *routing.Route, f *egressFlow) (netip.AddrPort, time.Duration, bool) {
	if f == nil || !f.bulk {
		return rt.FirstHop, rt.Delay, true
	}
	b := rt.Bulk
	offered := b != nil && len(b.Path) > 0 && len(b.Path) <= len(g.hdr.Path) && b.Path[len(b.Path)-1] == rt.Dest
	if f.pinned {
		switch {
		case offered && f.onPath(b.Path):
			return g.bulkPath(b)
		case f.onPath(rt.Path):
			return rt.FirstHop, rt.Delay, true
		}
		// The path died or was withdrawn: the flow takes its class's
		// path now.
		f.pinned = false
		g.e.stats.FlowRepaths.Add(1)
	}
	if offered {
		f.pinned = true
		return g.bulkPath(b)
	}
	return rt.FirstHop, rt.Delay, true
}

// bulkPath writes b's path into g.hdr and returns its first hop and delay.
func (g *egress) bulkPath(b *routing.BulkPath) (netip.AddrPort, time.Duration, bool) {
	g.hdr.PathLen = uint8(copy(g.hdr.Path[:], b.Path))
	return b.FirstHop, b.Delay, false
}

// moveFlow records that the packet in g.hdr of flow f goes on g.hdr's
// path, of delay delay (on Route.Path when main is true), and, when that
// is a move, holds the flow's packets until the delay difference (plus a
// margin), and at least flowQueueAllowance, has passed since its last
// packet on the old path; a flow silent for longer moves at once. A flow
// that was on Route.Path and still is follows a route switch, which the
// destination's own hold (d.hold, with the exact difference measured at
// the switch) already covers: only moves to or from a bulk path are the
// flow's own. A flow leaving Route.Path while the destination's hold is
// active also waits for that hold's end, since its earlier packets may
// be in it.
func (g *egress) moveFlow(d *dest, f *egressFlow, main bool, delay time.Duration) {
	p := g.hdr.Path[:g.hdr.PathLen]
	switch {
	case !f.sent:
		f.pathLen = uint8(copy(f.path[:], p))
	case !f.onPath(p):
		g.e.stats.FlowMoves.Add(1)
		f.pathLen = uint8(copy(f.path[:], p))
		if main && f.onMain {
			break
		}
		until := f.lastSent + int64(max(f.delay-delay+flowHoldMargin, flowQueueAllowance))
		if !main {
			until = max(until, d.hold.deadline())
		}
		if until > g.now {
			if f.hold == nil {
				f.hold = &holdQueue{} // once per slot, at its first move to a shorter path
			}
			g.flushBatch() // packets on the old path leave first
			f.hold.start(g.e, g.now, until)
			g.e.stats.FlowHolds.Add(1)
		}
	}
	f.sent, f.onMain, f.delay, f.lastSent = true, main, delay, g.now
}
