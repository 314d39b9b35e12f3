package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/fdb"
	fr "github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

var (
	kvVIP    = netip.MustParseAddrPort("10.20.0.250:11211")
	kvClient = netip.MustParseAddrPort("10.20.0.5:50000")
	kvCMAC   = []byte{0x52, 0, 0, 0, 0, 0x05}
	kvSMAC   = [6]byte{0x52, 0, 0, 0, 0, 0x12}
)

// kvTables installs one pool (a server at each of sites 1, 2, 3) on every
// site's port and returns the tables.
func kvTables(t *testing.T, sites ...*site) []*router.Table {
	var out []*router.Table
	for _, s := range sites {
		var servers []router.ServerSpec
		for i, id := range []wire.SiteID{1, 2, 3} {
			servers = append(servers, router.ServerSpec{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 20, 0, byte(11 + i)}), 11211), Weight: 1, Site: id})
		}
		tb, err := router.New(router.Spec{Self: s.id, Subnet: netip.MustParsePrefix("10.20.0.0/24"),
			Pools: []router.PoolSpec{{Name: "cache", VIP: kvVIP, Hash: ring.Ketama, Servers: servers}}})
		if err != nil {
			t.Fatal(err)
		}
		s.eng.Port(testNet).KV.Store(tb)
		out = append(out, tb)
	}
	return out
}

func kvUDP(dstMAC, srcMAC []byte, src, dst netip.AddrPort, payload []byte) []byte {
	b := make([]byte, 42+len(payload))
	fr.PutEthernet(b, dstMAC, srcMAC, false, 0, fr.EtherTypeIPv4)
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	fr.PutIPv4(b[14:], 0, 28+len(payload), 1, 0, 64, fr.ProtoUDP, s4[:], d4[:])
	u := b[34:]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	copy(u[8:], payload)
	binary.BigEndian.PutUint16(u[6:], fr.UDPChecksum(fr.Checksum(u, fr.PseudoSum(s4[:], d4[:], fr.ProtoUDP, len(u)))))
	return b
}

func kvAddrs(t *testing.T, b []byte) (src, dst netip.AddrPort) {
	t.Helper()
	var f fr.Frame
	if err := fr.Parse(b, &f); err != nil {
		t.Fatal(err)
	}
	s, d := f.Addrs(b)
	u := fr.UDP(b[f.L4:f.End])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(s)), u.SrcPort()), netip.AddrPortFrom(netip.AddrFrom4([4]byte(d)), u.DstPort())
}

func nextFrame(t *testing.T, s *site) []byte {
	t.Helper()
	select {
	case got := <-s.dev.Out():
		return got
	case <-time.After(2 * time.Second):
		t.Fatalf("site %d: no frame", s.id)
		return nil
	}
}

// TestKeyRouting sends a request from a host at site 1 to the pool's
// virtual address: it reaches the owner at site 2 with the server's MAC,
// and the server's reply reaches the client from the virtual address.
func TestKeyRouting(t *testing.T) {
	a, b, c := threeSites(t)
	tabs := kvTables(t, a, b, c)
	tabs[1].Pools()[0].Servers[1].SetMAC(kvSMAC)

	// ARP for the VIP is answered at site 1 and flooded nowhere.
	arp := make([]byte, 42)
	fr.PutEthernet(arp, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, kvCMAC, false, 0, fr.EtherTypeARP)
	c4, v4 := kvClient.Addr().As4(), kvVIP.Addr().As4()
	fr.PutARP(arp[14:], fr.ARPRequest, kvCMAC, c4[:], make([]byte, 6), v4[:])
	a.dev.Inject(arp)
	reply := nextFrame(t, a)
	vmac := router.VirtualMAC(kvVIP.Addr())
	if rep, err := fr.ParseARP(reply[14:]); err != nil || !bytes.Equal(rep.SenderMAC(), vmac[:]) {
		t.Fatalf("ARP reply % x", reply)
	}
	expectNone(t, b)
	expectNone(t, c)

	var key string
	for i := 0; ; i++ {
		key = fmt.Sprint("k", i)
		if tabs[0].Pools()[0].RingOwner([]byte(key)) == 1 {
			break
		}
	}
	req := make([]byte, 8+24+len(key))
	memcache.FrameHeader{RequestID: 9, Total: 1}.Put(req)
	req[8], req[9] = memcache.MagicRequest, memcache.OpGet
	binary.BigEndian.PutUint16(req[10:], uint16(len(key)))
	binary.BigEndian.PutUint32(req[16:], uint32(len(key)))
	copy(req[32:], key)
	a.dev.Inject(kvUDP(vmac[:], kvCMAC, kvClient, kvVIP, req))
	got := nextFrame(t, b)
	src, dst := kvAddrs(t, got)
	if src != kvClient || dst != netip.MustParseAddrPort("10.20.0.12:11211") || !bytes.Equal(got[0:6], kvSMAC[:]) {
		t.Fatalf("request at the owner: %v -> %v, MAC % x", src, dst, got[0:6])
	}
	expectNone(t, c)

	// The server answers the client directly; site 1 restores the VIP.
	b.dev.Inject(kvUDP(kvCMAC, kvSMAC[:], dst, kvClient, []byte("\x00\x09\x00\x00\x00\x01\x00\x00END\r\n")))
	got = nextFrame(t, a)
	if src, dst := kvAddrs(t, got); src != kvVIP || dst != kvClient || !bytes.Equal(got[6:12], vmac[:]) {
		t.Fatalf("reply at the client: %v -> %v", src, dst)
	}
	if p := tabs[0].Pools()[0]; p.Stats.Requests.Load() != 1 || p.Stats.Replies.Load() != 1 {
		t.Fatalf("counters: %d requests, %d replies", p.Stats.Requests.Load(), p.Stats.Replies.Load())
	}
}

// keyRouteEngine is benchEngine (site 1, sites 2 and 3 reachable) with a
// pool whose servers are at sites 2 and 3, and a binary get of a key of
// the server at site 3.
func keyRouteEngine(t testing.TB) (*Engine, *egress, []byte) {
	e := benchEngine()
	tb, err := router.New(router.Spec{Self: 1, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []router.PoolSpec{{
		Name: "cache", VIP: kvVIP, Servers: []router.ServerSpec{
			{Addr: netip.MustParseAddrPort("10.20.0.12:11211"), Site: 2},
			{Addr: netip.MustParseAddrPort("10.20.0.13:11211"), Site: 3},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	e.Port(testNet).KV.Store(tb)
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprint("user:", i)
		if tb.Pools()[0].RingOwner([]byte(key)) == 1 {
			break
		}
	}
	req := make([]byte, 8+24+len(key))
	memcache.FrameHeader{RequestID: 9, Total: 1}.Put(req)
	req[8], req[9] = memcache.MagicRequest, memcache.OpGet
	binary.BigEndian.PutUint16(req[10:], uint16(len(key)))
	binary.BigEndian.PutUint32(req[16:], uint32(len(key)))
	copy(req[32:], key)
	vmac := router.VirtualMAC(kvVIP.Addr())
	return e, e.newEgress(e.Port(testNet)), kvUDP(vmac[:], kvCMAC, kvClient, kvVIP, req)
}

// TestKeyRouteNoAllocs: a request routed by key through the whole egress
// path (router, encapsulation, send) allocates nothing.
func TestKeyRouteNoAllocs(t *testing.T) {
	e, g, req := keyRouteEngine(t)
	allocs := testing.AllocsPerRun(100, func() {
		sendFrame(g, req)
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per request", allocs)
	}
	if e.Stats().KVFrames.Load() == 0 || e.Stats().PacketsSent.Load() == 0 {
		t.Fatalf("requests not routed: %v", e.Stats().Snapshot())
	}
}

// BenchmarkEgressKeyRoute measures a binary get routed by key and
// encapsulated for a relayed site.
func BenchmarkEgressKeyRoute(b *testing.B) {
	_, g, req := keyRouteEngine(b)
	b.ReportAllocs()
	for b.Loop() {
		sendFrame(g, req)
	}
}

// BenchmarkEgressOtherTraffic measures encapsulating a 1,400-byte IPv4
// datagram that is not for a pool (to a host at site 3 through the relay
// at site 2) with and without a pool configured on its network: the
// difference is what key routing costs the rest of the traffic.
func BenchmarkEgressOtherTraffic(b *testing.B) {
	hostMAC := fdb.MAC{0xc, 0, 0, 0, 0, 0xc}
	dgram := kvUDP(hostMAC[:], kvCMAC, kvClient, netip.MustParseAddrPort("10.20.0.13:5201"), make([]byte, 1400-42))
	for _, withPool := range []bool{false, true} {
		name := "no pool"
		if withPool {
			name = "pool"
		}
		b.Run(name, func(b *testing.B) {
			e, g, _ := keyRouteEngine(b)
			if !withPool {
				e.Port(testNet).KV.Store(nil)
			}
			e.Port(testNet).FDB.Learn(hostMAC, 3, 0)
			b.ReportAllocs()
			b.SetBytes(int64(len(dgram)))
			for b.Loop() {
				sendFrame(g, dgram)
			}
			if e.Stats().PacketsSent.Load() == 0 || e.Stats().KVFrames.Load() != 0 {
				b.Fatalf("frames not forwarded as other traffic: %v", e.Stats().Snapshot())
			}
		})
	}
}

// BenchmarkGatewayGet measures all a client's gateway does for one UDP
// get: the request routed by key and encapsulated for the server's site
// (egress), and the server's reply taken off the underlay, given the
// virtual address back and written to the device (ingress). The device
// and the underlay are fakes that take a frame and do nothing, so this is
// the gateway's own work without its system calls; it reports gets per
// second on one core.
func BenchmarkGatewayGet(b *testing.B) {
	e, g, req := keyRouteEngine(b)
	in := newIngress(e)
	// The reply of the server at site 3: a binary get response with a
	// 32-byte value, in the UDP frame header of the request it answers.
	resp := make([]byte, 8+24+4+32)
	memcache.FrameHeader{RequestID: 9, Total: 1}.Put(resp)
	resp[8], resp[9] = memcache.MagicResponse, memcache.OpGet
	resp[12] = 4
	binary.BigEndian.PutUint32(resp[16:], 4+32)
	server := netip.MustParseAddrPort("10.20.0.13:11211")
	reply := kvUDP(kvCMAC, kvSMAC[:], server, kvClient, resp)
	h := wire.DataHeader{Source: 3, Network: testNet, PathLen: 1}
	h.Path[0] = 1
	buf := make([]byte, 1500)
	m := transport.Message{Buf: buf, Addr: netip.MustParseAddrPort("198.18.0.3:1")}
	b.ReportAllocs()
	for b.Loop() {
		sendFrame(g, req)
		h.Seq++
		n := h.Put(buf)
		m.N = n + copy(buf[n:], reply)
		in.handle(&m)
		in.flushDevices()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
	p := e.Port(testNet).KV.Load().Pools()[0]
	if n := uint64(b.N); p.Stats.Requests.Load() != n || p.Stats.Replies.Load() != n || e.stats.FramesOut.Load() != n {
		b.Fatalf("gets not routed and answered: %d requests, %d replies, %v", p.Stats.Requests.Load(), p.Stats.Replies.Load(), e.stats.Snapshot())
	}
}
