package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// recordingConn records when each packet was written and to where.
type recordingConn struct {
	nopConn
	sent chan sentPacket
}

type sentPacket struct {
	at   time.Time
	to   netip.AddrPort
	seq  uint32
	path int
}

func (c *recordingConn) WriteBatch(m []transport.Message) (int, error) {
	for i := range m {
		var h wire.DataHeader
		wire.ParseData(m[i].Buf[:m[i].N], &h)
		c.sent <- sentPacket{at: time.Now(), to: m[i].Addr, seq: h.Seq, path: int(h.PathLen)}
	}
	return len(m), nil
}

var (
	addr2 = netip.MustParseAddrPort("198.18.0.2:1")
	addr3 = netip.MustParseAddrPort("198.18.0.3:1")
	hostC = fdb.MAC{0xc, 0, 0, 0, 0, 0xc}
)

func holdEngine() (*Engine, *egress, *recordingConn) {
	rc := &recordingConn{sent: make(chan sentPacket, 1000)}
	e := New(Config{Self: 1, Conn: rc, Ports: []*Port{{Network: testNet, Dev: nopDev{}, FDB: fdb.New(time.Minute)}},
		Now: func() int64 { return time.Now().UnixNano() }})
	g := e.newEgress(e.Port(testNet))
	e.Port(testNet).FDB.Learn(hostC, 3, time.Now().UnixNano())
	return e, g, rc
}

func directRoute(e *Engine) {
	addrs := map[wire.SiteID]netip.AddrPort{2: addr2, 3: addr3}
	e.SetRoutes(routing.NewTable(1, 1, []*routing.Route{{Dest: 3, Path: []wire.SiteID{3}, FirstHop: addr3, Delay: 30 * time.Millisecond}}, addrs))
}

func switchToRelay(e *Engine, delta time.Duration) {
	addrs := map[wire.SiteID]netip.AddrPort{2: addr2, 3: addr3}
	e.SetRoutes(routing.NewTable(2, 1, []*routing.Route{{
		Dest: 3, Path: []wire.SiteID{2, 3}, FirstHop: addr2, Delay: 30*time.Millisecond - delta,
		PrevPath: []wire.SiteID{3}, PrevDelay: 30 * time.Millisecond,
	}}, addrs))
}

func sendFrames(g *egress, n int) {
	fr := frame(0xc, 0xa, "payload")
	for i := 0; i < n; i++ {
		copy(g.frames[0], fr)
		g.begin()
		g.forward(0, len(fr))
		g.flushBatch()
	}
}

func TestSwitchToShorterPathHoldsForTheGain(t *testing.T) {
	e, g, rc := holdEngine()
	directRoute(e)
	sendFrames(g, 3)
	var last time.Time
	var first uint32
	for i := 0; i < 3; i++ {
		p := <-rc.sent
		last = p.at
		if i == 0 {
			first = p.seq
		}
	}

	const delta = 20 * time.Millisecond
	switchToRelay(e, delta)
	sendFrames(g, 5)
	for i := 0; i < 5; i++ {
		p := <-rc.sent
		if p.to != addr2 || p.path != 2 {
			t.Fatalf("packet %d after the switch went to %v with path length %d", i, p.to, p.path)
		}
		if wait := p.at.Sub(last); wait < delta-time.Millisecond {
			t.Errorf("packet %d sent %v after the last one on the old path; must wait %v", i, wait, delta)
		}
		// Released at the deadline, not later; a release the timer brought
		// late (a busy machine, counted in HoldsLate) is not the hold's
		// doing.
		if wait := p.at.Sub(last); wait > delta+5*time.Millisecond && e.stats.HoldsLate.Load() == 0 {
			t.Errorf("packet %d held %v, longer than the %v gain, and the release was on time", i, wait, delta)
		}
		if p.seq != first+uint32(3+i) {
			t.Errorf("packet %d has sequence %d: order changed", i, p.seq)
		}
	}
	if e.stats.Holds.Load() != 1 || e.stats.Held.Load() != 5 {
		t.Errorf("holds %d held %d; want 1 and 5", e.stats.Holds.Load(), e.stats.Held.Load())
	}
}

func TestIdleFlowSwitchesWithoutHolding(t *testing.T) {
	e, g, rc := holdEngine()
	directRoute(e)
	sendFrames(g, 1)
	<-rc.sent
	time.Sleep(25 * time.Millisecond) // longer than the 20 ms gain
	switchToRelay(e, 20*time.Millisecond)
	start := time.Now()
	sendFrames(g, 1)
	p := <-rc.sent
	if p.to != addr2 || p.at.Sub(start) > 5*time.Millisecond || e.stats.Holds.Load() != 0 {
		t.Errorf("idle flow was held: sent after %v, holds %d", p.at.Sub(start), e.stats.Holds.Load())
	}
}

func TestSwitchToLongerPathDoesNotHold(t *testing.T) {
	e, g, rc := holdEngine()
	switchToRelay(e, 20*time.Millisecond)
	sendFrames(g, 1)
	<-rc.sent
	directRoute(e) // back to the longer direct path
	sendFrames(g, 1)
	if p := <-rc.sent; p.to != addr3 || e.stats.Holds.Load() != 0 {
		t.Errorf("switch to a longer path held packets (holds %d) or went to %v", e.stats.Holds.Load(), p.to)
	}
}

func TestBackupPathCarriesACopyTheDestinationDrops(t *testing.T) {
	a, b, c := threeSites(t)
	// Give a a route to c whose direct path is in doubt, with b as backup.
	addrs := map[wire.SiteID]netip.AddrPort{2: b.eng.conn.LocalAddr(), 3: c.eng.conn.LocalAddr()}
	a.eng.SetRoutes(routing.NewTable(5, 1, []*routing.Route{
		{Dest: 2, Path: []wire.SiteID{2}, FirstHop: addrs[2]},
		{Dest: 3, Path: []wire.SiteID{3}, FirstHop: addrs[3], Backup: []wire.SiteID{2, 3}, BackupFirstHop: addrs[2]},
	}, addrs))
	c.dev.Inject(frame(0xff, 0xc, "here is c"))
	expect(t, a, frame(0xff, 0xc, "here is c"))
	expect(t, b, frame(0xff, 0xc, "here is c"))
	for i := 0; i < 5; i++ {
		a.dev.Inject(frame(0xc, 0xa, fmt.Sprintf("frame %d", i)))
		expect(t, c, frame(0xc, 0xa, fmt.Sprintf("frame %d", i)))
	}
	expectNone(t, c)
	waitCount(t, &c.eng.Stats().DropDuplicate, 5)
	if a.eng.Stats().Duplicated.Load() != 5 || b.eng.Stats().Relayed.Load() != 5 {
		t.Errorf("duplicated %d, relayed by b %d; want 5 and 5", a.eng.Stats().Duplicated.Load(), b.eng.Stats().Relayed.Load())
	}
}

// TestHoldEndsAtTheFirstPacketAfterItsDeadline: a packet that comes after
// the deadline releases the held ones itself (a busy flow does not wait
// for a late timer), and a late timer of one hold cannot end the next.
func TestHoldEndsAtTheFirstPacketAfterItsDeadline(t *testing.T) {
	e, _, rc := holdEngine()
	q := &holdQueue{}
	now := time.Now().UnixNano()
	hour := int64(time.Hour) // the timers do not fire during the test
	m := transport.Message{Buf: make([]byte, 64), N: 64, Addr: addr2}
	q.start(e, now, now+hour)
	if !q.enqueue(e, m, now+1) {
		t.Fatal("a packet during the hold was not held")
	}
	if q.enqueue(e, m, now+hour+int64(2*time.Millisecond)) {
		t.Fatal("a packet after the deadline was held")
	}
	select {
	case p := <-rc.sent:
		if p.to != addr2 {
			t.Errorf("held packet sent to %v, want %v", p.to, addr2)
		}
	default:
		t.Fatal("the held packet was not sent when the deadline had passed")
	}
	if got := e.stats.HoldsLate.Load(); got != 1 {
		t.Errorf("holds_late %d after a release 2 ms late, want 1", got)
	}
	first := q.gen
	q.start(e, now, now+hour)
	q.release(e, first)
	if !q.enqueue(e, m, now+1) {
		t.Fatal("the first hold's timer ended the second hold")
	}
}

// stampedConn hands out prepared batches, then reports itself closed.
type stampedConn struct {
	nopConn
	batches [][]transport.Message
}

func (c *stampedConn) ReadBatch(msgs []transport.Message) (int, error) {
	if len(c.batches) == 0 {
		return 0, transport.ErrClosed
	}
	b := c.batches[0]
	c.batches = c.batches[1:]
	for i, m := range b {
		msgs[i].N = copy(msgs[i].Buf, m.Buf)
		msgs[i].Addr, msgs[i].At = m.Addr, m.At
	}
	return len(b), nil
}

// TestIngressCountsLateBatches: a batch done more than 1 ms after the
// kernel received its first datagram is counted as late (the agent was
// not running); one done at once is not.
func TestIngressCountsLateBatches(t *testing.T) {
	junk := []byte{0xff, 1, 2, 3}
	c := &stampedConn{batches: [][]transport.Message{
		{{Buf: junk, Addr: addr2, At: time.Now().Add(-5 * time.Millisecond)}},
		{{Buf: junk, Addr: addr2, At: time.Now().Add(time.Hour)}},
	}}
	e := New(Config{Self: 1, Conn: c, Now: func() int64 { return time.Now().UnixNano() }})
	if err := e.underlayLoop(); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("loop ended with %v", err)
	}
	if got := e.stats.IngressLate.Load(); got != 1 {
		t.Errorf("ingress_late %d, want 1 (the batch received 5 ms before)", got)
	}
	if got := e.stats.DropMalformed.Load(); got != 2 {
		t.Errorf("drop_malformed %d, want 2", got)
	}
}

// countingConn counts the packets written and remembers their order.
type countingConn struct {
	nopConn
	seqs []uint32
}

func (c *countingConn) WriteBatch(m []transport.Message) (int, error) {
	for i := range m {
		c.seqs = append(c.seqs, binary.BigEndian.Uint32(m[i].Buf))
	}
	return len(m), nil
}

// TestFullHoldEndsEarly: a hold whose queue fills ends at once: the held
// packets go out in order, the packet that found the queue full is not
// taken (the caller sends it next), nothing is dropped, and the early end
// is counted.
func TestFullHoldEndsEarly(t *testing.T) {
	cc := &countingConn{}
	e := New(Config{Self: 1, Conn: cc, Now: func() int64 { return time.Now().UnixNano() }})
	q := &holdQueue{}
	now := time.Now().UnixNano()
	q.start(e, now, now+int64(time.Hour))
	msg := func(i uint32) transport.Message {
		b := binary.BigEndian.AppendUint32(nil, i)
		return transport.Message{Buf: b, N: len(b), Addr: addr3}
	}
	for i := range uint32(maxHeld) {
		if !q.enqueue(e, msg(i), now) {
			t.Fatalf("packet %d not held during the hold", i)
		}
	}
	if len(cc.seqs) != 0 {
		t.Fatalf("%d packets sent during the hold", len(cc.seqs))
	}
	if q.enqueue(e, msg(maxHeld), now) {
		t.Fatal("the packet that found the queue full was taken")
	}
	if len(cc.seqs) != maxHeld || cc.seqs[0] != 0 || cc.seqs[maxHeld-1] != maxHeld-1 {
		t.Fatalf("sent %d held packets (first %v); want all %d in order", len(cc.seqs), cc.seqs[:min(1, len(cc.seqs))], maxHeld)
	}
	if q.deadline() != 0 || e.stats.HoldOverflows.Load() != 1 || e.stats.HoldsLate.Load() != 0 {
		t.Errorf("after the overflow: deadline %d, overflows %d, late %d; want the hold over, counted once, not late",
			q.deadline(), e.stats.HoldOverflows.Load(), e.stats.HoldsLate.Load())
	}
}
