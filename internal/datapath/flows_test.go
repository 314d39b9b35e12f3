package datapath

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

var addr4 = netip.MustParseAddrPort("198.18.0.4:1")

// flowFrame returns an Ethernet frame from host 0xa to host 0xc holding an
// IPv4 TCP segment from port sport to port 80 with DSCP dscp and size
// bytes in all (at least 54). Checksums are left zero: nothing checks
// them.
func flowFrame(sport uint16, dscp uint8, size int) []byte {
	f := make([]byte, size)
	copy(f, []byte{0xc, 0, 0, 0, 0, 0xc, 0xa, 0, 0, 0, 0, 0xa, 0x08, 0x00})
	ip := f[14:]
	ip[0], ip[1] = 0x45, dscp<<2
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	ip[8], ip[9] = 64, 6
	copy(ip[12:], []byte{198, 19, 1, 1, 198, 19, 3, 1})
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	tcp[12] = 5 << 4
	return f
}

// bulkRoutes publishes a table whose route to site 3 is path (delay
// pathDelay) with bulk path bulk (delay bulkDelay; nil for none).
func bulkRoutes(e *Engine, version uint64, path []wire.SiteID, pathDelay time.Duration, bulk []wire.SiteID, bulkDelay time.Duration) {
	addrs := map[wire.SiteID]netip.AddrPort{2: addr2, 3: addr3, 4: addr4}
	rt := &routing.Route{Dest: 3, Path: path, FirstHop: addrs[path[0]], Delay: pathDelay}
	if bulk != nil {
		rt.Bulk = &routing.BulkPath{Path: bulk, FirstHop: addrs[bulk[0]], Delay: bulkDelay, Rate: 200e6, PathRate: 20e6}
	}
	e.SetRoutes(routing.NewTable(version, 1, []*routing.Route{rt}, addrs))
}

// sendFrame forwards one frame as a batch of its own.
func sendFrame(g *egress, fr []byte) {
	copy(g.frames[0], fr)
	g.begin()
	g.forward(0, len(fr))
	g.flushBatch()
}

// firstHops sends n frames and returns the first hop each went to.
func firstHops(t *testing.T, g *egress, rc *recordingConn, fr []byte, n int) []netip.AddrPort {
	t.Helper()
	var out []netip.AddrPort
	for i := 0; i < n; i++ {
		sendFrame(g, fr)
		select {
		case p := <-rc.sent:
			out = append(out, p.to)
		case <-time.After(time.Second):
			t.Fatalf("frame %d was not sent", i)
		}
	}
	return out
}

func TestFlowBecomesBulkAfterThresholdAndTakesBulkPath(t *testing.T) {
	e, g, rc := holdEngine()
	e.SetFlowConfig(FlowConfig{Enabled: true, Threshold: 3000})
	bulkRoutes(e, 1, []wire.SiteID{3}, 30*time.Millisecond, []wire.SiteID{2, 3}, 35*time.Millisecond)
	hops := firstHops(t, g, rc, flowFrame(5001, 0, 1000), 5)
	want := []netip.AddrPort{addr3, addr3, addr3, addr2, addr2} // 3000 bytes are not more than 3000
	for i := range want {
		if hops[i] != want[i] {
			t.Fatalf("first hops %v, want %v", hops, want)
		}
	}
	// Another flow, and traffic that is no flow, stay on the fastest path.
	if h := firstHops(t, g, rc, flowFrame(5002, 0, 1000), 1); h[0] != addr3 {
		t.Errorf("a new flow went to %v", h[0])
	}
	if h := firstHops(t, g, rc, frame(0xc, 0xa, "not IP"), 1); h[0] != addr3 {
		t.Errorf("a frame that is no flow went to %v", h[0])
	}
	s := e.Stats()
	lat, bulk := s.Flows()
	if s.ClassChanges.Load() != 1 || lat != 1 || bulk != 1 || s.BulkFrames.Load() != 2 || s.LatencyFrames.Load() != 5 || s.BulkBytes.Load() != 2000 {
		t.Errorf("class counters %v, flows %d latency %d bulk", s.Snapshot(), lat, bulk)
	}
	var moved []wire.SiteID
	s.BulkMoves.Drain(func(dst wire.SiteID) { moved = append(moved, dst) })
	if !slices.Equal(moved, []wire.SiteID{3}) {
		t.Errorf("moves to bulk recorded for the router: %v, want [3]", moved)
	}
	// Even to a longer path, the move waits for the queue the flow may
	// have built on the path it leaves (flowQueueAllowance).
	if s.Holds.Load() != 1 || s.FlowHolds.Load() != 1 || s.Held.Load() != 1 {
		t.Errorf("holds %d, flow holds %d, held %d; want 1 (the flow's), 1, 1", s.Holds.Load(), s.FlowHolds.Load(), s.Held.Load())
	}
}

func TestDSCPMakesAFlowBulkAtOnce(t *testing.T) {
	e, g, rc := holdEngine()
	c := DefaultFlowConfig()
	c.DSCP = 1 << 8 // CS1, "lower effort"
	e.SetFlowConfig(c)
	bulkRoutes(e, 1, []wire.SiteID{3}, 30*time.Millisecond, []wire.SiteID{2, 3}, 35*time.Millisecond)
	if h := firstHops(t, g, rc, flowFrame(5001, 8, 100), 1); h[0] != addr2 {
		t.Errorf("a CS1 flow went to %v, not the bulk path", h[0])
	}
	if h := firstHops(t, g, rc, flowFrame(5002, 46, 100), 1); h[0] != addr3 {
		t.Errorf("an EF flow went to %v, not the fastest path", h[0])
	}
	if e.Stats().ClassChanges.Load() != 0 {
		t.Error("a flow bulk from its first frame counted as a class change")
	}
	e.Stats().BulkMoves.Drain(func(dst wire.SiteID) {
		t.Errorf("a flow bulk from its first frame recorded as moved to bulk (to %v)", dst)
	})
}

func TestFlowClassesOffSendEverythingOnThePath(t *testing.T) {
	e, g, rc := holdEngine()
	c := DefaultFlowConfig()
	c.Enabled, c.DSCP = false, 1<<8
	e.SetFlowConfig(c)
	bulkRoutes(e, 1, []wire.SiteID{3}, 30*time.Millisecond, []wire.SiteID{2, 3}, 35*time.Millisecond)
	if h := firstHops(t, g, rc, flowFrame(5001, 8, 100), 1); h[0] != addr3 {
		t.Errorf("with flow classes off a CS1 flow went to %v", h[0])
	}
}

func TestBulkFlowKeepsItsPathWhileOffered(t *testing.T) {
	e, g, rc := holdEngine()
	e.SetFlowConfig(FlowConfig{Enabled: true, Threshold: 0})
	fr := flowFrame(5001, 0, 200)
	bulkRoutes(e, 1, []wire.SiteID{3}, 30*time.Millisecond, []wire.SiteID{2, 3}, 35*time.Millisecond)
	if h := firstHops(t, g, rc, fr, 1); h[0] != addr2 {
		t.Fatalf("bulk flow went to %v", h[0])
	}
	// The lowest-latency path becomes the flow's path: it stays there,
	// and does not follow a new bulk path.
	bulkRoutes(e, 2, []wire.SiteID{2, 3}, 29*time.Millisecond, nil, 0)
	if h := firstHops(t, g, rc, fr, 1); h[0] != addr2 {
		t.Fatalf("bulk flow left its path for %v", h[0])
	}
	bulkRoutes(e, 3, []wire.SiteID{2, 3}, 29*time.Millisecond, []wire.SiteID{4, 3}, 31*time.Millisecond)
	if h := firstHops(t, g, rc, fr, 1); h[0] != addr2 {
		t.Fatalf("bulk flow followed a new bulk path to %v", h[0])
	}
	// Its path is offered no more: it takes the bulk path of the moment.
	bulkRoutes(e, 4, []wire.SiteID{3}, 30*time.Millisecond, []wire.SiteID{4, 3}, 31*time.Millisecond)
	if h := firstHops(t, g, rc, fr, 1); h[0] != addr4 {
		t.Fatalf("bulk flow whose path was withdrawn went to %v", h[0])
	}
	if s := e.Stats(); s.FlowRepaths.Load() != 1 || s.FlowMoves.Load() != 1 {
		t.Errorf("repaths %d moves %d, want 1 and 1", s.FlowRepaths.Load(), s.FlowMoves.Load())
	}
}

func TestBulkFlowMovingToShorterPathIsHeldAndKeepsOrder(t *testing.T) {
	e, g, rc := holdEngine()
	bulkFr, other := flowFrame(5001, 0, 200), flowFrame(5002, 0, 200)
	e.SetFlowConfig(FlowConfig{Enabled: true, Threshold: 500})
	bulkRoutes(e, 1, []wire.SiteID{3}, 30*time.Millisecond, []wire.SiteID{2, 3}, 45*time.Millisecond)
	// The other flow is sent first, so that it stays a latency flow.
	firstHops(t, g, rc, other, 1)
	hops := firstHops(t, g, rc, bulkFr, 6)
	if hops[5] != addr2 {
		t.Fatalf("first hops %v: the flow did not become bulk", hops)
	}
	last := time.Now()
	// The bulk path dies: the flow goes back to the direct path, 15 ms
	// shorter, and must wait for the difference, and at least for the
	// queue allowance.
	bulkRoutes(e, 2, []wire.SiteID{3}, 30*time.Millisecond, nil, 0)
	sendFrame(g, bulkFr)
	sendFrame(g, other) // not held: another flow
	sendFrame(g, bulkFr)
	var got []sentPacket
	for range 3 {
		got = append(got, <-rc.sent)
	}
	if got[0].to != addr3 || got[0].at.Sub(last) > 10*time.Millisecond {
		t.Errorf("the latency flow was held (%v) or went to %v", got[0].at.Sub(last), got[0].to)
	}
	for _, p := range got[1:] {
		if p.to != addr3 || p.path != 1 {
			t.Fatalf("held packet went to %v, path length %d", p.to, p.path)
		}
		if wait := p.at.Sub(last); wait < flowQueueAllowance {
			t.Errorf("bulk flow's packet sent %v after its last on the longer path; must wait %v", wait, flowQueueAllowance)
		}
	}
	if got[1].seq >= got[2].seq {
		t.Errorf("held packets out of order: %d then %d", got[1].seq, got[2].seq)
	}
	// Two moves: onto the bulk path (its first packet held), and back.
	if s := e.Stats(); s.FlowHolds.Load() != 2 || s.Held.Load() != 3 {
		t.Errorf("flow holds %d held %d, want 2 and 3", s.FlowHolds.Load(), s.Held.Load())
	}
}

func TestFlowTableSetFullLeavesFlowUntracked(t *testing.T) {
	tab := newFlowTable[int, int]()
	idle := int64(time.Second)
	for k := range flowWays {
		if s, st := tab.get(&k, 5, 0, idle); s == nil || st != slotFree {
			t.Fatalf("flow %d: no slot in a set with room", k)
		}
	}
	k := flowWays
	if s, _ := tab.get(&k, 5, 0, idle); s != nil {
		t.Fatal("a ninth flow got a slot in a full set")
	}
	one := 1
	if s, st := tab.get(&one, 5, 10, idle); s == nil || st != slotFound || s.last != 10 {
		t.Fatal("a live flow lost its slot")
	}
	if s, st := tab.get(&k, 5, idle+5, idle); s == nil || st != slotExpired {
		t.Fatalf("the ninth flow did not get the slot of an ended one (%v)", st)
	}
	other := 99
	if s, st := tab.get(&other, 6, 0, idle); s == nil || st != slotFree {
		t.Fatal("another set was full")
	}
}

// deliverPacket hands ingress a data packet from site 2 with sequence
// number seq carrying fr.
func deliverPacket(in *ingress, seq uint32, fr []byte) {
	h := wire.DataHeader{Source: 2, Network: testNet, PathLen: 1, Seq: seq}
	h.Path[0] = 1
	buf := make([]byte, 2048)
	n := h.Put(buf)
	n += copy(buf[n:], fr)
	in.handle(&transport.Message{Buf: buf, N: n, Addr: addr2})
}

func TestReceiverCountsReorderingPerFlow(t *testing.T) {
	e := benchEngine()
	in := newIngress(e)
	a, b := flowFrame(5001, 0, 100), flowFrame(5002, 0, 100)
	// The two flows interleave out of the source's order (b's frames
	// were on a shorter path), but each flow's own frames are in order.
	deliverPacket(in, 10, a)
	deliverPacket(in, 12, b)
	deliverPacket(in, 11, a)
	deliverPacket(in, 14, b)
	deliverPacket(in, 13, a)
	s := e.Stats()
	if s.Reordered.Load() == 0 || s.FlowReordered.Load() != 0 {
		t.Fatalf("reordered %d per source, %d per flow; want some and 0", s.Reordered.Load(), s.FlowReordered.Load())
	}
	// Now a frame of a comes after a later one of a.
	deliverPacket(in, 16, a)
	deliverPacket(in, 15, a)
	if s.FlowReordered.Load() != 1 {
		t.Errorf("flow reordered %d, want 1", s.FlowReordered.Load())
	}
	// A restarted source, numbering from far away, is not reordering.
	restart := uint32(16)
	restart -= seqResetGap
	deliverPacket(in, restart, a)
	if s.FlowReordered.Load() != 1 {
		t.Errorf("a restarted source counted as reordering")
	}
}

// bulkFlowEngine is benchEngine with flow classes on (1000-byte
// threshold), a route to site 3 with a bulk path, and a 1400-byte frame of
// a flow to a host there, sent once already (the first flow makes the
// table).
func bulkFlowEngine() (*Engine, *egress, []byte) {
	e := benchEngine()
	g := e.newEgress(e.Port(testNet))
	e.SetFlowConfig(FlowConfig{Enabled: true, Threshold: 1000})
	bulkRoutes(e, 1, []wire.SiteID{2, 3}, 30*time.Millisecond, []wire.SiteID{3}, 35*time.Millisecond)
	e.Port(testNet).FDB.Learn(hostC, 3, 0)
	fr := flowFrame(5001, 0, 1400)
	copy(g.frames[0], fr)
	g.begin()
	g.forward(0, len(fr))
	return e, g, fr
}

func TestEgressFlowDoesNotAllocate(t *testing.T) {
	e, g, fr := bulkFlowEngine()
	if n := testing.AllocsPerRun(200, func() {
		copy(g.frames[0], fr)
		g.begin()
		g.forward(0, len(fr))
	}); n != 0 {
		t.Errorf("%v allocations per frame of a bulk flow", n)
	}
	if e.stats.BulkFrames.Load() == 0 {
		t.Error("the flow did not become bulk")
	}
}

// BenchmarkEgressBulkFlow measures forwarding a frame of a bulk flow: the
// flow table lookup, the class and the bulk path; it must not allocate.
func BenchmarkEgressBulkFlow(b *testing.B) {
	_, g, fr := bulkFlowEngine()
	b.ReportAllocs()
	b.SetBytes(int64(len(fr)))
	for b.Loop() {
		copy(g.frames[0], fr)
		g.begin()
		g.forward(0, len(fr))
	}
}

func TestIngressFlowOrderDoesNotAllocate(t *testing.T) {
	e := benchEngine()
	in := newIngress(e)
	h := wire.DataHeader{Source: 2, Network: testNet, PathLen: 1}
	h.Path[0] = 1
	buf := make([]byte, 2048)
	n := h.Put(buf)
	n += copy(buf[n:], flowFrame(5001, 0, 1400))
	m := transport.Message{Buf: buf, N: n, Addr: addr2}
	in.handle(&m) // the first flow makes the table
	if a := testing.AllocsPerRun(200, func() {
		h.Seq++
		h.Put(buf)
		in.handle(&m)
	}); a != 0 {
		t.Errorf("%v allocations per delivered frame of a flow", a)
	}
	if e.stats.FramesOut.Load() < 200 || e.stats.FlowReordered.Load() != 0 {
		t.Errorf("frames were not delivered in order: %v", e.stats.Snapshot())
	}
}

func TestFlowByteCountHalvesSoSlowFlowsStayLatency(t *testing.T) {
	var f egressFlow
	f.reset(3, 0)
	sec := int64(time.Second)
	// 100 KB a second for ten minutes: a chatty connection.
	var peak uint64
	for s := int64(0); s < 600; s++ {
		peak = max(peak, f.count(100_000, s*sec))
	}
	if peak > 2_100_000 || peak < 1_000_000 {
		t.Errorf("a flow of 100 KB/s peaks at %d bytes; want about 2 MB (twice 10 s of it)", peak)
	}
	// A transfer sends 10 MB in four seconds: counted in full.
	f.reset(3, 0)
	var n uint64
	for ms := int64(0); ms < 4000; ms++ {
		n = f.count(2500, ms*int64(time.Millisecond))
	}
	if n != 10_000_000 {
		t.Errorf("a 4 s transfer counts %d bytes, want 10 MB", n)
	}
	// Long silence empties the count without overflowing the shift.
	if n := f.count(1, 1000*sec*sec); n != 1 {
		t.Errorf("after a long silence the count is %d", n)
	}
}

// A bulk flow without a bulk path rides Route.Path; when the route
// switches to a shorter path, the destination's hold (with the difference
// measured at the switch, PrevDelay) decides alone, not the flow's own
// older estimate of its path's delay.
func TestFlowOnRoutePathFollowsTheDestinationsHold(t *testing.T) {
	e, g, rc := holdEngine()
	e.SetFlowConfig(FlowConfig{Enabled: true, Threshold: 0})
	fr := flowFrame(5001, 0, 200)
	bulkRoutes(e, 1, []wire.SiteID{3}, 30*time.Millisecond, nil, 0) // an estimate older than the queue
	firstHops(t, g, rc, fr, 2)
	last := time.Now()
	addrs := map[wire.SiteID]netip.AddrPort{2: addr2, 3: addr3}
	e.SetRoutes(routing.NewTable(2, 1, []*routing.Route{{Dest: 3, Path: []wire.SiteID{2, 3}, FirstHop: addr2,
		Delay: 25 * time.Millisecond, PrevPath: []wire.SiteID{3}, PrevDelay: 45 * time.Millisecond}}, addrs))
	sendFrame(g, fr)
	p := <-rc.sent
	if p.to != addr2 || p.at.Sub(last) < 20*time.Millisecond {
		t.Errorf("sent to %v after %v; the route switch's gain is 20 ms", p.to, p.at.Sub(last))
	}
	if s := e.Stats(); s.FlowHolds.Load() != 0 || s.Holds.Load() != 1 || s.FlowMoves.Load() != 1 {
		t.Errorf("flow holds %d, holds %d, moves %d; want 0, 1, 1", s.FlowHolds.Load(), s.Holds.Load(), s.FlowMoves.Load())
	}
}

// Turning flow classes off ends every flow once and frees the table.
func TestFlowClassesOffEndFlows(t *testing.T) {
	e, g, rc := holdEngine()
	e.SetFlowConfig(FlowConfig{Enabled: true, Threshold: 0})
	bulkRoutes(e, 1, []wire.SiteID{3}, 30*time.Millisecond, nil, 0)
	firstHops(t, g, rc, flowFrame(5001, 0, 100), 1)
	if _, bulk := e.Stats().Flows(); bulk != 1 {
		t.Fatalf("%d bulk flows", bulk)
	}
	e.SetFlowConfig(FlowConfig{})
	firstHops(t, g, rc, flowFrame(5001, 0, 100), 2)
	if lat, bulk := e.Stats().Flows(); lat != 0 || bulk != 0 || g.flows != nil {
		t.Errorf("flows %d latency %d bulk after turning classes off; table kept: %v", lat, bulk, g.flows != nil)
	}
}

// TestFlowThatFillsItsPathBecomesBulk: a flow that sends more than half
// of what Route.Path's bottleneck carries (PathRate) for a second is
// bulk, far below the byte threshold; a flow at 40 % of it, or one that
// fills the path for half a second only, stays in the latency class; with
// no rate known there is no such rule.
func TestFlowThatFillsItsPathBecomesBulk(t *testing.T) {
	ms := int64(time.Millisecond)
	send := func(f *egressFlow, from, to, every int64, rate float64) (bulkAt int64) {
		for now := from; now < to; now += every {
			if f.fills(1400, now, rate) >= flowFillWindows {
				return now - from
			}
		}
		return -1
	}
	var f egressFlow
	// 1400 bytes a millisecond is 11.2 Mbit/s: 56 % of 20 Mbit/s.
	f.reset(3, 0)
	if at := send(&f, 0, 3000*ms, ms, 20e6); at < 1000*ms || at > 1100*ms {
		t.Errorf("a flow filling 56 %% of its path became bulk after %v, want about 1 s", time.Duration(at))
	}
	// Every 1.5 ms is 7.5 Mbit/s: 37 %.
	f.reset(3, 0)
	if at := send(&f, 0, 10_000*ms, 3*ms/2, 20e6); at >= 0 {
		t.Errorf("a flow at 37 %% of its path became bulk after %v", time.Duration(at))
	}
	// Half a second at 56 %, then quiet, then again half a second.
	f.reset(3, 0)
	if send(&f, 0, 500*ms, ms, 20e6) >= 0 || send(&f, 800*ms, 1300*ms, ms, 20e6) >= 0 || send(&f, 2000*ms, 2400*ms, ms, 20e6) >= 0 {
		t.Error("bursts of half a second made the flow bulk")
	}
	f.reset(3, 0)
	if at := send(&f, 0, 5000*ms, ms, 0); at >= 0 {
		t.Errorf("with no rate known a flow became bulk after %v", time.Duration(at))
	}

	// Through the egress: the flow's class changes with the byte
	// threshold far away.
	var clock atomic.Int64
	rc := &recordingConn{sent: make(chan sentPacket, 4000)}
	e := New(Config{Self: 1, Conn: rc, Ports: []*Port{{Network: testNet, Dev: nopDev{}, FDB: fdb.New(time.Minute)}}, Now: clock.Load})
	g := e.newEgress(e.Port(testNet))
	e.Port(testNet).FDB.Learn(hostC, 3, 0)
	e.SetFlowConfig(FlowConfig{Enabled: true, Threshold: 1 << 40, Idle: time.Minute})
	bulkRoutes(e, 1, []wire.SiteID{3}, 30*time.Millisecond, []wire.SiteID{2, 3}, 35*time.Millisecond)
	fr := flowFrame(5003, 0, 1400)
	for now := int64(0); now < 1200*ms && e.Stats().ClassChanges.Load() == 0; now += ms {
		clock.Store(now)
		sendFrame(g, fr)
		for len(rc.sent) > 0 {
			<-rc.sent
		}
	}
	if _, bulk := e.Stats().Flows(); e.Stats().ClassChanges.Load() != 1 || bulk != 1 {
		t.Errorf("a flow filling its path through the egress: %d class changes, %d bulk flows", e.Stats().ClassChanges.Load(), bulk)
	}

	// A second flow fills the path for one window; then the route
	// switches to the relay (the flow's own queue, say): it is bulk at
	// its next packet, and keeps the direct path, now offered as the
	// bulk path, instead of following the switch.
	fr2 := flowFrame(5004, 0, 1400)
	start := clock.Load()
	for now := start; now < start+600*ms; now += ms {
		clock.Store(now)
		sendFrame(g, fr2)
		for len(rc.sent) > 0 {
			<-rc.sent
		}
	}
	if e.Stats().ClassChanges.Load() != 1 {
		t.Fatalf("the second flow was bulk after one window: %d class changes", e.Stats().ClassChanges.Load())
	}
	bulkRoutes(e, 2, []wire.SiteID{2, 3}, 25*time.Millisecond, []wire.SiteID{3}, 30*time.Millisecond)
	clock.Store(start + 601*ms)
	if h := firstHops(t, g, rc, fr2, 1); h[0] != addr3 || e.Stats().ClassChanges.Load() != 2 {
		t.Errorf("after the switch the flow went to %v with %d class changes; want the direct path and bulk", h[0], e.Stats().ClassChanges.Load())
	}
}
