package datapath

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// staticRoutes builds a routing snapshot for tests: paths[dst] lists the
// receivers in order.
func staticRoutes(self wire.SiteID, addrs map[wire.SiteID]netip.AddrPort, paths map[wire.SiteID][]wire.SiteID) *routing.Table {
	var rs []*routing.Route
	for dst, p := range paths {
		rs = append(rs, &routing.Route{Dest: dst, Path: p, FirstHop: addrs[p[0]]})
	}
	return routing.NewTable(1, self, rs, addrs)
}

type site struct {
	id  wire.SiteID
	dev *device.Fake
	eng *Engine
	ctl chan []byte
}

const testNet = 42

// threeSites builds sites a, b, c on a fake network where a reaches c
// through b and everything else is direct.
func threeSites(t *testing.T) (a, b, c *site) {
	t.Helper()
	return threeSitesOn(t, transport.NewFakeNetwork(), nil)
}

// threeSitesOn builds the three sites on nw; crypto, when not nil, gives
// each site's Crypto.
func threeSitesOn(t *testing.T, nw *transport.FakeNetwork, crypto func(wire.SiteID) Crypto) (a, b, c *site) {
	t.Helper()
	ids, addrs := threeAddrs()
	sites := make([]*site, 3)
	for i, id := range ids {
		paths := directPaths(id, ids)
		if id == 1 {
			paths[3] = []wire.SiteID{2, 3}
		}
		sites[i] = runSite(t, nw, addrs, id, cryptoFor(crypto, id), func() int64 { return time.Now().UnixNano() },
			staticRoutes(id, addrs, paths))
	}
	return sites[0], sites[1], sites[2]
}

// threeAddrs returns the IDs of three test sites and their underlay
// addresses.
func threeAddrs() ([]wire.SiteID, map[wire.SiteID]netip.AddrPort) {
	ids := []wire.SiteID{1, 2, 3}
	addrs := map[wire.SiteID]netip.AddrPort{}
	for i, id := range ids {
		addrs[id] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}), 4800)
	}
	return ids, addrs
}

// directPaths returns a direct path from id to every other site of ids.
func directPaths(id wire.SiteID, ids []wire.SiteID) map[wire.SiteID][]wire.SiteID {
	paths := map[wire.SiteID][]wire.SiteID{}
	for _, other := range ids {
		if other != id {
			paths[other] = []wire.SiteID{other}
		}
	}
	return paths
}

// runSite starts the engine of site id on nw, with clock now and routes
// (none when nil), until the test ends.
func runSite(t *testing.T, nw *transport.FakeNetwork, addrs map[wire.SiteID]netip.AddrPort, id wire.SiteID, crypto Crypto, now func() int64, routes Routes) *site {
	t.Helper()
	s := &site{id: id, dev: device.NewFake("tap", 1400, 256), ctl: make(chan []byte, 16)}
	conn := nw.Listen(addrs[id])
	s.eng = New(Config{
		Self: id, Conn: conn,
		Ports:   []*Port{{Network: testNet, Dev: s.dev, FDB: fdb.New(time.Minute)}},
		Control: func(_ netip.AddrPort, pkt []byte, _ time.Time) { s.ctl <- append([]byte(nil), pkt...) },
		Now:     now,
		Wall:    func() int64 { return time.Now().UnixNano() },
		Crypto:  crypto,
	})
	if routes != nil {
		s.eng.SetRoutes(routes)
	}
	done := make(chan error, 1)
	go func() { done <- s.eng.Run() }()
	t.Cleanup(func() {
		conn.Close()
		s.dev.Close()
		if err := <-done; err != nil {
			t.Errorf("engine %d: %v", id, err)
		}
	})
	return s
}

func frame(dst, src byte, payload string) []byte {
	f := []byte{dst, 0, 0, 0, 0, dst, src, 0, 0, 0, 0, src, 0x08, 0x00}
	if dst == 0xff {
		copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	}
	return append(f, payload...)
}

func expect(t *testing.T, s *site, want []byte) {
	t.Helper()
	select {
	case got := <-s.dev.Out():
		if !bytes.Equal(got, want) {
			t.Fatalf("site %d got frame %x, want %x", s.id, got, want)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("site %d: no frame delivered", s.id)
	}
}

func expectNone(t *testing.T, s *site) {
	t.Helper()
	select {
	case got := <-s.dev.Out():
		t.Fatalf("site %d got unexpected frame %x", s.id, got)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestBroadcastReachesEverySiteOnceAndUnicastIsRelayed(t *testing.T) {
	a, b, c := threeSites(t)
	// A host behind c announces itself: every other site learns it.
	arp := frame(0xff, 0xc, "who-has")
	c.dev.Inject(arp)
	expect(t, a, arp)
	expect(t, b, arp)
	expectNone(t, a)
	expectNone(t, b)
	expectNone(t, c)

	// a now knows the host lives at c and sends it a unicast frame, which
	// travels through b (a's path to c) without b delivering it.
	uni := frame(0xc, 0xa, "hello over a relay")
	a.dev.Inject(uni)
	expect(t, c, uni)
	expectNone(t, b)
	if r := b.eng.Stats().Relayed.Load(); r != 1 {
		t.Errorf("b relayed %d packets, want 1", r)
	}
	if got, ok := c.eng.Port(testNet).FDB.Lookup(fdb.MAC{0xa, 0, 0, 0, 0, 0xa}, time.Now().UnixNano()); !ok || got != 1 {
		t.Errorf("c learned host a at %v, %v; want site 1", got, ok)
	}
}

func TestFrameForLocalHostIsNotSent(t *testing.T) {
	a, b, _ := threeSites(t)
	a.dev.Inject(frame(0xff, 0xa, "i am here"))
	expect(t, b, frame(0xff, 0xa, "i am here"))
	before := a.eng.Stats().PacketsSent.Load()
	a.dev.Inject(frame(0xa, 0xd, "local"))
	time.Sleep(50 * time.Millisecond)
	if a.eng.Stats().PacketsSent.Load() != before || a.eng.Stats().DropLocal.Load() != 1 {
		t.Errorf("frame to a local host went to the underlay")
	}
}

func TestGarbageIsCountedNotDelivered(t *testing.T) {
	a, b, _ := threeSites(t)
	rng := rand.New(rand.NewPCG(1, 2))
	conn := b.eng.conn
	var msgs []transport.Message
	for i := 0; i < 500; i++ {
		p := make([]byte, rng.IntN(120))
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		if len(p) > 3 && i%2 == 0 {
			p[0], p[1], p[2] = wire.Magic, wire.Version, byte(wire.TypeData)
		}
		msgs = append(msgs, transport.Message{Buf: p, N: len(p), Addr: a.eng.conn.LocalAddr()})
	}
	conn.WriteBatch(msgs)
	time.Sleep(100 * time.Millisecond)
	st := a.eng.Stats()
	if st.PacketsReceived.Load() != 500 {
		t.Fatalf("received %d of 500", st.PacketsReceived.Load())
	}
	dropped := st.DropMalformed.Load() + st.DropMisdirected.Load() + st.DropUnknownNetwork.Load() + st.DropNoRoute.Load()
	if dropped+st.ControlIn.Load()+st.FramesOut.Load()+st.Relayed.Load() != 500 || dropped == 0 {
		t.Errorf("garbage not accounted for: %v", st.Snapshot())
	}
	// The engine still forwards afterwards.
	b.dev.Inject(frame(0xff, 0xb, "still alive"))
	for {
		got := <-a.dev.Out()
		if bytes.Equal(got, frame(0xff, 0xb, "still alive")) {
			break
		}
	}
}

func TestMisdirectedPacketDropped(t *testing.T) {
	a, b, _ := threeSites(t)
	h := wire.DataHeader{Source: 2, Network: testNet, PathLen: 1}
	h.Path[0] = 3 // addressed to c, but sent to a
	buf := make([]byte, 200)
	n := h.Put(buf)
	n += copy(buf[n:], frame(0xa, 0xb, "x"))
	b.eng.conn.WriteBatch([]transport.Message{{Buf: buf, N: n, Addr: a.eng.conn.LocalAddr()}})
	deadline := time.Now().Add(time.Second)
	for a.eng.Stats().DropMisdirected.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("misdirected packet not dropped and counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	expectNone(t, a)
}

func cryptoFor(f func(wire.SiteID) Crypto, id wire.SiteID) Crypto {
	if f == nil {
		return nil
	}
	return f(id)
}

// TestBatchCacheFollowsTheTable: within a batch the cache answers like the
// forwarding table, also when the batch itself moves an address: a
// destination looked up as remote and then seen as a source here is local
// from that frame on.
func TestBatchCacheFollowsTheTable(t *testing.T) {
	tab := fdb.New(time.Minute)
	a, b := fdb.MAC{2, 0, 0, 0, 0, 0xa}, fdb.MAC{2, 0, 0, 0, 0, 0xb}
	tab.Learn(b, 7, 1)
	var c fdbCache
	c.learn(tab, a, 2)
	if site, ok := c.lookup(tab, b, 2); !ok || site != 7 {
		t.Fatalf("b at %v %v, want site 7", site, ok)
	}
	c.learn(tab, b, 3) // b moved here
	if site, ok := c.lookup(tab, b, 3); !ok || site != fdb.Local {
		t.Fatalf("b at %v %v after moving here, want local", site, ok)
	}
	c.learn(tab, b, 4) // the same source again: the table is not asked
	if site, ok := c.lookup(tab, a, 4); !ok || site != fdb.Local {
		t.Fatalf("a at %v %v, want local", site, ok)
	}
}
