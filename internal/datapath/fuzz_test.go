package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// nopConn discards writes; it lets benchmarks and fuzzing drive the
// forwarding functions directly.
type nopConn struct{}

func (nopConn) ReadBatch([]transport.Message) (int, error)    { return 0, transport.ErrClosed }
func (nopConn) WriteBatch(m []transport.Message) (int, error) { return len(m), nil }
func (nopConn) LocalAddr() netip.AddrPort                     { return netip.AddrPort{} }
func (nopConn) Close() error                                  { return nil }

// nopDev discards frames.
type nopDev struct{}

func (nopDev) Read([]byte) (int, error)               { return 0, device.ErrClosed }
func (nopDev) Write(f []byte) (int, error)            { return len(f), nil }
func (nopDev) ReadBatch([][]byte, []int) (int, error) { return 0, device.ErrClosed }
func (nopDev) Name() string                           { return "nop" }
func (nopDev) MTU() int                               { return 1500 }
func (nopDev) Close() error                           { return nil }

// benchWall is the wall clock of the benchmarks' engines and the receive
// time of their datagrams: packets are stamped and their stamps sampled.
const benchWall = 1_700_000_000_000_000_000

func benchEngine() *Engine {
	e := New(Config{
		Self: 1, Conn: nopConn{},
		Ports: []*Port{{Network: testNet, Dev: nopDev{}, FDB: fdb.New(time.Minute)}},
		Now:   func() int64 { return 0 },
		Wall:  func() int64 { return benchWall },
	})
	addrs := map[wire.SiteID]netip.AddrPort{2: netip.MustParseAddrPort("198.18.0.2:1"), 3: netip.MustParseAddrPort("198.18.0.3:1")}
	e.SetRoutes(staticRoutes(1, addrs, map[wire.SiteID][]wire.SiteID{2: {2}, 3: {2, 3}}))
	return e
}

// FuzzIngress feeds arbitrary datagrams to the underlay handler: it must
// never panic, and every datagram must be accounted for.
func FuzzIngress(f *testing.F) {
	h := wire.DataHeader{Source: 2, Network: testNet, PathLen: 2}
	h.Path[0], h.Path[1] = 1, 3
	seed := make([]byte, 100)
	n := h.Put(seed)
	f.Add(seed[:n+20])
	h.Flags, h.Stamp, h.PathLen = wire.DataFlagStamped, 0xfffe, 1
	n = h.Put(seed)
	f.Add(seed[:n+20])
	f.Add([]byte{wire.Magic, wire.Version, byte(wire.TypeProbe), 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		e := benchEngine()
		in := newIngress(e)
		buf := make([]byte, len(pkt)+1)
		copy(buf, pkt)
		in.handle(&transport.Message{Buf: buf, N: len(pkt), Addr: netip.MustParseAddrPort("198.18.0.2:1"), At: time.Unix(0, benchWall)})
		s := e.Stats()
		total := s.DropMalformed.Load() + s.DropMisdirected.Load() + s.DropUnknownNetwork.Load() +
			s.DropNoRoute.Load() + s.ControlIn.Load() + s.FramesOut.Load() + s.Relayed.Load()
		if total != 1 {
			t.Fatalf("datagram counted %d times: %v", total, s.Snapshot())
		}
	})
}

// BenchmarkEgressUnicast measures encapsulating a frame for a relayed
// destination; it must not allocate.
func BenchmarkEgressUnicast(b *testing.B) {
	e := benchEngine()
	g := e.newEgress(e.Port(testNet))
	fr := frame(0xc, 0xa, string(make([]byte, 1400)))
	e.Port(testNet).FDB.Learn(fdb.MAC{0xc, 0, 0, 0, 0, 0xc}, 3, 0)
	copy(g.frames[0], fr)
	b.ReportAllocs()
	b.SetBytes(int64(len(fr)))
	for b.Loop() {
		g.begin()
		g.forward(0, len(fr))
	}
}

// BenchmarkIngressRelay measures relaying a data packet; it must not
// allocate.
func BenchmarkIngressRelay(b *testing.B) {
	e := benchEngine()
	in := newIngress(e)
	h := wire.DataHeader{Source: 3, Network: testNet, PathLen: 2, Flags: wire.DataFlagStamped}
	h.Path[0], h.Path[1] = 1, 2
	buf := make([]byte, 1500)
	n := h.Put(buf) + 1400
	m := transport.Message{Buf: buf, N: n, Addr: netip.MustParseAddrPort("198.18.0.3:1"), At: time.Unix(0, benchWall)}
	b.ReportAllocs()
	b.SetBytes(int64(n))
	for b.Loop() {
		wire.SetHop(buf, 0)
		in.relay = in.relay[:0]
		in.handle(&m)
	}
}

// BenchmarkIngressDeliver measures delivering a data packet to the local
// device; it must not allocate.
func BenchmarkIngressDeliver(b *testing.B) {
	e := benchEngine()
	in := newIngress(e)
	h := wire.DataHeader{Source: 2, Network: testNet, PathLen: 1, Flags: wire.DataFlagStamped}
	h.Path[0] = 1
	buf := make([]byte, 1500)
	n := h.Put(buf)
	n += copy(buf[n:], frame(0xa, 0xb, string(make([]byte, 1400))))
	m := transport.Message{Buf: buf, N: n, Addr: netip.MustParseAddrPort("198.18.0.2:1"), At: time.Unix(0, benchWall)}
	b.ReportAllocs()
	b.SetBytes(int64(n))
	for b.Loop() {
		h.Seq++
		h.Put(buf)
		in.handle(&m)
	}
	if e.stats.FramesOut.Load() == 0 || e.stats.DropDuplicate.Load() != 0 {
		b.Fatalf("frames were not delivered: %v", e.stats.Snapshot())
	}
}
