package router

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/wire"
)

var (
	siteA = wire.SiteIDFromName("lan")
	siteB = wire.SiteIDFromName("man")
	siteC = wire.SiteIDFromName("wan")

	clientMAC = []byte{0x52, 0x54, 0, 0, 0, 1}
	serverMAC = [6]byte{0x52, 0x54, 0, 0, 0, 0xa}
	client    = netip.MustParseAddrPort("10.20.0.5:51000")
	vip       = netip.MustParseAddrPort("10.20.0.250:11211")
)

// testTable is a pool of three servers, one per site, seen from site A.
func testTable(t testing.TB, rate int) *Table {
	t.Helper()
	tb, err := New(Spec{Self: siteA, Subnet: netip.MustParsePrefix("10.20.0.0/24"), RateLimit: rate, Pools: []PoolSpec{{
		Name: "cache", VIP: vip, Hash: ring.Ketama, Servers: []ServerSpec{
			{Addr: netip.MustParseAddrPort("10.20.0.11:11211"), Weight: 1, Site: siteA},
			{Addr: netip.MustParseAddrPort("10.20.0.12:11211"), Weight: 1, Site: siteB},
			{Addr: netip.MustParseAddrPort("10.20.0.13:11211"), Weight: 1, Site: siteC},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// udpFrame builds an Ethernet/IPv4/UDP frame with correct checksums.
func udpFrame(dstMAC, srcMAC []byte, src, dst netip.AddrPort, payload []byte) []byte {
	b := make([]byte, 14+20+8+len(payload))
	frame.PutEthernet(b, dstMAC, srcMAC, false, 0, frame.EtherTypeIPv4)
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	frame.PutIPv4(b[14:], 0, 28+len(payload), 7, frame.IPv4FlagDF, 64, frame.ProtoUDP, s4[:], d4[:])
	u := b[34:]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	copy(u[8:], payload)
	binary.BigEndian.PutUint16(u[6:], frame.UDPChecksum(frame.Checksum(u, frame.PseudoSum(s4[:], d4[:], frame.ProtoUDP, len(u)))))
	return b
}

// datagram puts the memcached UDP frame header (request id id) before req.
func datagram(id uint16, req []byte) []byte {
	b := make([]byte, 8+len(req))
	memcache.FrameHeader{RequestID: id, Total: 1}.Put(b)
	copy(b[8:], req)
	return b
}

// binaryGet is a binary get request for key.
func binaryGet(key string) []byte {
	b := make([]byte, 24+len(key))
	b[0], b[1] = memcache.MagicRequest, memcache.OpGet
	binary.BigEndian.PutUint16(b[2:], uint16(len(key)))
	binary.BigEndian.PutUint32(b[8:], uint32(len(key)))
	binary.BigEndian.PutUint32(b[12:], 0xdeadbeef)
	copy(b[24:], key)
	return b
}

// request is a client's frame to the virtual address.
func request(req []byte) []byte {
	vmac := VirtualMAC(vip.Addr())
	return udpFrame(vmac[:], clientMAC, client, vip, datagram(42, req))
}

// parsed returns the addresses of an IPv4/UDP frame after checking both
// checksums.
func parsed(t *testing.T, b []byte) (src, dst netip.AddrPort, payload []byte) {
	t.Helper()
	var f frame.Frame
	if err := frame.Parse(b, &f); err != nil {
		t.Fatal(err)
	}
	ip := f.IPv4(b)
	if frame.Checksum(ip[:ip.HeaderLen()], 0) != 0 {
		t.Fatal("bad IPv4 header checksum")
	}
	u := frame.UDP(b[f.L4:f.End])
	if frame.Checksum(u, frame.PseudoSum(ip.Src(), ip.Dst(), frame.ProtoUDP, len(u))) != 0 {
		t.Fatal("bad UDP checksum")
	}
	s, d := [4]byte(ip.Src()), [4]byte(ip.Dst())
	return netip.AddrPortFrom(netip.AddrFrom4(s), u.SrcPort()), netip.AddrPortFrom(netip.AddrFrom4(d), u.DstPort()), u.Payload()
}

// keyOn returns a key the ring places on server i.
func keyOn(t *testing.T, tb *Table, i int) string {
	t.Helper()
	for n := 0; n < 10000; n++ {
		k := fmt.Sprintf("key-%d", n)
		if tb.pools[0].RingOwner([]byte(k)) == i {
			return k
		}
	}
	t.Fatalf("no key on server %d", i)
	return ""
}

func TestARPForVirtualAddress(t *testing.T) {
	tb := testTable(t, 0)
	w := NewWorker()
	req := make([]byte, 42)
	bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	frame.PutEthernet(req, bcast, clientMAC, false, 0, frame.EtherTypeARP)
	c4, v4 := client.Addr().As4(), vip.Addr().As4()
	frame.PutARP(req[14:], frame.ARPRequest, clientMAC, c4[:], make([]byte, 6), v4[:])
	handled, outs := w.Egress(tb, req, 1)
	if !handled || len(outs) != 1 || !outs[0].Local {
		t.Fatalf("ARP request for the VIP: handled %v, outs %+v", handled, outs)
	}
	a, err := frame.ParseARP(outs[0].Frame[14:])
	vmac := VirtualMAC(vip.Addr())
	if err != nil || a.Op() != frame.ARPReply || !bytes.Equal(a.SenderMAC(), vmac[:]) || !bytes.Equal(a.SenderIP(), v4[:]) ||
		!bytes.Equal(frame.Dst(outs[0].Frame), clientMAC) {
		t.Fatalf("bad ARP reply % x", outs[0].Frame)
	}
	if vmac[0]&0x02 == 0 || vmac[0]&0x01 != 0 {
		t.Fatalf("virtual MAC %x is not locally administered unicast", vmac)
	}

	// Another target is not the router's; a requester outside the subnet
	// is not answered.
	other := netip.MustParseAddr("10.20.0.77").As4()
	frame.PutARP(req[14:], frame.ARPRequest, clientMAC, c4[:], make([]byte, 6), other[:])
	if handled, _ := w.Egress(tb, req, 2); handled {
		t.Fatal("ARP for a host was handled")
	}
	foreign := netip.MustParseAddr("198.18.0.9").As4()
	frame.PutARP(req[14:], frame.ARPRequest, clientMAC, foreign[:], make([]byte, 6), v4[:])
	if handled, outs := w.Egress(tb, req, 3); !handled || len(outs) != 0 || tb.pools[0].Stats.DropForeign.Load() != 1 {
		t.Fatalf("foreign ARP: handled %v outs %d", handled, len(outs))
	}

	// A local server's ARP request for the VIP teaches its MAC.
	s4 := tb.pools[0].Servers[0].ip
	frame.PutARP(req[14:], frame.ARPRequest, serverMAC[:], s4[:], make([]byte, 6), v4[:])
	w.Egress(tb, req, 4)
	if m, ok := tb.pools[0].Servers[0].MAC(); !ok || m != serverMAC {
		t.Fatalf("server MAC not learned: %x %v", m, ok)
	}
}

func TestRemoteOwner(t *testing.T) {
	for _, proto := range []struct {
		name string
		req  func(key string) []byte
	}{
		{"binary", binaryGet},
		{"ascii", func(k string) []byte { return []byte("set " + k + " 0 0 3\r\nabc\r\n") }},
		{"meta", func(k string) []byte { return []byte("mg " + k + " v\r\n") }},
	} {
		t.Run(proto.name, func(t *testing.T) {
			tb := testTable(t, 0)
			w := NewWorker()
			for _, i := range []int{1, 2} {
				key := keyOn(t, tb, i)
				b := request(proto.req(key))
				handled, outs := w.Egress(tb, b, 1)
				if !handled || len(outs) != 1 {
					t.Fatalf("handled %v, %d outputs", handled, len(outs))
				}
				o := outs[0]
				s := tb.pools[0].Servers[i]
				if o.Local || o.Site != s.Site || !o.InPlace {
					t.Fatalf("output %+v, want site %v", o, s.Site)
				}
				src, dst, payload := parsed(t, o.Frame)
				vmac := VirtualMAC(vip.Addr())
				if dst != s.Addr || src != client || !bytes.Equal(frame.Dst(o.Frame), vmac[:]) || !bytes.Equal(frame.Src(o.Frame), clientMAC) {
					t.Fatalf("rewritten to %v -> %v", src, dst)
				}
				if !bytes.Equal(payload, datagram(42, proto.req(key))) {
					t.Fatal("payload changed")
				}
				if s.PendingSince() != 1 {
					t.Fatal("request not recorded for passive detection")
				}
			}
		})
	}
}

// TestLocalOwnerRoundTrip follows a request to a server at this site and
// its reply back to the client.
func TestLocalOwnerRoundTrip(t *testing.T) {
	tb := testTable(t, 0)
	w := NewWorker()
	s := tb.pools[0].Servers[0]
	key := keyOn(t, tb, 0)
	if handled, outs := w.Egress(tb, request(binaryGet(key)), 1); !handled || len(outs) != 0 || !s.TakeNeedARP() {
		t.Fatalf("unknown MAC: handled %v outs %d", handled, len(outs))
	}
	if tb.pools[0].Stats.DropNoMAC.Load() != 1 {
		t.Fatal("drop not counted")
	}
	s.SetMAC(serverMAC)
	_, outs := w.Egress(tb, request(binaryGet(key)), 2)
	if len(outs) != 1 || !outs[0].Local {
		t.Fatalf("outs %+v", outs)
	}
	src, dst, _ := parsed(t, outs[0].Frame)
	vmac := VirtualMAC(vip.Addr())
	if dst != s.Addr || src.Addr() != vip.Addr() || src.Port() < FlowPortBase || src.Port() >= FlowPortBase+FlowSlots ||
		!bytes.Equal(frame.Dst(outs[0].Frame), serverMAC[:]) || !bytes.Equal(frame.Src(outs[0].Frame), vmac[:]) {
		t.Fatalf("local request %v -> %v", src, dst)
	}
	// The same client socket keeps its slot.
	_, outs = w.Egress(tb, request(binaryGet(key)), 3)
	if src2, _, _ := parsed(t, outs[0].Frame); src2 != src {
		t.Fatalf("slot changed: %v then %v", src, src2)
	}
	reply := udpFrame(vmac[:], serverMAC[:], s.Addr, src, datagram(42, []byte("END\r\n")))
	_, outs = w.Egress(tb, reply, 4)
	if len(outs) != 1 || !outs[0].Local {
		t.Fatalf("reply outs %+v", outs)
	}
	rs, rd, _ := parsed(t, outs[0].Frame)
	if rs != vip || rd != client || !bytes.Equal(frame.Dst(outs[0].Frame), clientMAC) || !bytes.Equal(frame.Src(outs[0].Frame), vmac[:]) {
		t.Fatalf("reply %v -> %v", rs, rd)
	}
	if s.PendingSince() != 0 || s.LastReply() != 4 {
		t.Fatal("reply not recorded")
	}
	// A reply to a slot after the idle timeout is not forwarded.
	reply = udpFrame(vmac[:], serverMAC[:], s.Addr, src, datagram(42, []byte("END\r\n")))
	if _, outs = w.Egress(tb, reply, 4+FlowIdle+1); len(outs) != 0 {
		t.Fatal("stale slot forwarded")
	}
}

func TestIngress(t *testing.T) {
	// Site B's table: server 1 is local there.
	tb := testTable(t, 0)
	tbB, _ := New(Spec{Self: siteB, Subnet: tb.subnet, Pools: []PoolSpec{{Name: "cache", VIP: vip, Servers: []ServerSpec{
		{Addr: netip.MustParseAddrPort("10.20.0.11:11211"), Site: siteA},
		{Addr: netip.MustParseAddrPort("10.20.0.12:11211"), Site: siteB},
		{Addr: netip.MustParseAddrPort("10.20.0.13:11211"), Site: siteC},
	}}}})
	w := NewWorker()
	key := keyOn(t, tb, 1)
	_, outs := w.Egress(tb, request(binaryGet(key)), 1)
	fwd := append([]byte(nil), outs[0].Frame...)
	var in Inbound
	s := tbB.pools[0].Servers[1]
	if in.Deliver(tbB, fwd, 1) || !s.TakeNeedARP() {
		t.Fatal("request for a server with unknown MAC delivered")
	}
	s.SetMAC(serverMAC)
	if !in.Deliver(tbB, fwd, 2) || !bytes.Equal(frame.Dst(fwd), serverMAC[:]) {
		t.Fatalf("request not given the server's MAC: % x", fwd[:6])
	}
	// The server's reply, back at site A, gets the VIP as its source.
	reply := udpFrame(clientMAC, serverMAC[:], s.Addr, client, datagram(42, []byte("END\r\n")))
	if !in.Deliver(tb, reply, 3) {
		t.Fatal("reply dropped")
	}
	rs, rd, _ := parsed(t, reply)
	vmac := VirtualMAC(vip.Addr())
	if rs != vip || rd != client || !bytes.Equal(frame.Src(reply), vmac[:]) {
		t.Fatalf("reply %v -> %v", rs, rd)
	}
	if tb.pools[0].Servers[1].PendingSince() != 0 {
		t.Fatal("reply did not clear the pending request")
	}
	// A host that never used the VIP keeps the server's own address.
	other := netip.MustParseAddrPort("10.20.0.6:40000")
	reply = udpFrame(clientMAC, serverMAC[:], s.Addr, other, datagram(42, []byte("END\r\n")))
	in.Deliver(tb, reply, 4)
	if rs, _, _ := parsed(t, reply); rs != s.Addr {
		t.Fatalf("direct reply rewritten to %v", rs)
	}
}

func TestMalformed(t *testing.T) {
	tb := testTable(t, 0)
	w := NewWorker()
	for _, c := range []struct {
		req  []byte
		want string
	}{
		{[]byte("bogus\r\n"), "ERROR\r\n"},
		{[]byte("get " + strings.Repeat("k", 251) + "\r\n"), "CLIENT_ERROR bad command line format\r\n"},
		{[]byte("set k 0 0 3\r\nabcd\r\n"), "CLIENT_ERROR bad data chunk\r\n"},
	} {
		_, outs := w.Egress(tb, request(c.req), 1)
		if len(outs) != 1 || !outs[0].Local {
			t.Fatalf("%q: outs %+v", c.req, outs)
		}
		src, dst, payload := parsed(t, outs[0].Frame)
		if src != vip || dst != client || string(payload[8:]) != c.want || binary.BigEndian.Uint16(payload) != 42 {
			t.Fatalf("%q: %v -> %v %q", c.req, src, dst, payload)
		}
	}
	// A binary request with lengths that disagree gets status 0x0081.
	bad := binaryGet("abc")
	binary.BigEndian.PutUint32(bad[8:], 1)
	_, outs := w.Egress(tb, request(bad), 1)
	if len(outs) != 1 {
		t.Fatal("no binary error")
	}
	_, _, payload := parsed(t, outs[0].Frame)
	if binary.BigEndian.Uint16(payload[8+6:]) != memcache.StatusUnknownCommand || binary.BigEndian.Uint32(payload[8+12:]) != 0xdeadbeef {
		t.Fatalf("binary error % x", payload)
	}
	// A datagram memcached ignores is dropped and counted.
	vmac := VirtualMAC(vip.Addr())
	short := udpFrame(vmac[:], clientMAC, client, vip, []byte{0, 1, 0, 0, 0, 1})
	if handled, outs := w.Egress(tb, short, 1); !handled || len(outs) != 0 || tb.pools[0].Stats.DropMalformed.Load() != 1 {
		t.Fatal("short frame not dropped")
	}
	// A request from outside the subnet is never answered.
	foreign := udpFrame(vmac[:], clientMAC, netip.MustParseAddrPort("198.18.0.1:5000"), vip, datagram(1, []byte("bogus\r\n")))
	if _, outs := w.Egress(tb, foreign, 1); len(outs) != 0 || tb.pools[0].Stats.DropForeign.Load() != 1 {
		t.Fatal("foreign request answered")
	}
}

func TestSplitGet(t *testing.T) {
	tb := testTable(t, 0)
	tb.pools[0].Servers[0].SetMAC(serverMAC)
	w := NewWorker()
	keys := []string{keyOn(t, tb, 1), keyOn(t, tb, 2), keyOn(t, tb, 0)}
	_, outs := w.Egress(tb, request([]byte("get "+strings.Join(keys, " ")+"\r\n")), 1)
	if len(outs) != 3 {
		t.Fatalf("%d outputs, want 3", len(outs))
	}
	for i, o := range outs {
		_, dst, payload := parsed(t, o.Frame)
		s := tb.pools[0].Servers[[]int{1, 2, 0}[i]]
		if dst != s.Addr || string(payload[8:]) != "get "+keys[i]+"\r\n" || binary.BigEndian.Uint16(payload) != 42 {
			t.Fatalf("part %d: %v %q", i, dst, payload)
		}
	}
	if tb.pools[0].Stats.Split.Load() != 1 || tb.pools[0].Stats.Requests.Load() != 3 {
		t.Fatal("split not counted")
	}
}

func TestRateLimit(t *testing.T) {
	tb := testTable(t, 10) // a burst of 2
	w := NewWorker()
	key := keyOn(t, tb, 1)
	sent := 0
	for i := 0; i < 5; i++ {
		if _, outs := w.Egress(tb, request(binaryGet(key)), 1000); len(outs) == 1 {
			sent++
		}
	}
	if sent != 2 || tb.pools[0].Stats.DropRate.Load() != 3 {
		t.Fatalf("%d sent, %d dropped", sent, tb.pools[0].Stats.DropRate.Load())
	}
	// 100 ms later one more token (10/s) is there.
	if _, outs := w.Egress(tb, request(binaryGet(key)), 1000+100e6); len(outs) != 1 {
		t.Fatal("bucket not refilled")
	}
}

// TestFailover: with a server down its keys go elsewhere, and no key of
// a healthy server moves.
func TestFailover(t *testing.T) {
	tb := testTable(t, 0)
	p := tb.pools[0]
	before := make([]int, 3000)
	for i := range before {
		before[i] = p.Owner([]byte(fmt.Sprint("k", i)))
	}
	p.Servers[1].SetDown(true)
	moved := 0
	for i, o := range before {
		now := p.Owner([]byte(fmt.Sprint("k", i)))
		switch {
		case o == 1 && now == 1:
			t.Fatal("key stayed on the dead server")
		case o != 1 && now != o:
			t.Fatalf("key %d of healthy server %d moved to %d", i, o, now)
		case o == 1:
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no key on the dead server")
	}
	// The datagram path follows: a key of server 1 now leaves for its
	// failover.
	w := NewWorker()
	key := keyOn(t, tb, 1)
	_, outs := w.Egress(tb, request(binaryGet(key)), 1)
	if len(outs) != 1 || outs[0].Site == siteB {
		t.Fatalf("outs %+v", outs)
	}
	p.Servers[1].SetDown(false)
	p.Servers[2].SetSiteDown(true)
	if p.Owner([]byte(keyOn(t, tb, 2))) == 2 {
		t.Fatal("server of a dead site still used")
	}
}

func TestHealth(t *testing.T) {
	var h Health
	seq := []bool{false, true, false, false, true, true, true, true, false, true, true, true, true, true}
	want := []bool{false, false, false, true, true, true, true, true, true, true, true, true, true, false}
	for i, ok := range seq {
		h.Observe(ok)
		if h.Down() != want[i] {
			t.Fatalf("after check %d (%v): down %v", i, ok, h.Down())
		}
	}
}

func TestNotForRouter(t *testing.T) {
	tb := testTable(t, 0)
	w := NewWorker()
	b := udpFrame(clientMAC, clientMAC, client, netip.MustParseAddrPort("10.20.0.9:11211"), datagram(1, binaryGet("a")))
	if handled, _ := w.Egress(tb, b, 1); handled {
		t.Fatal("datagram to a host handled")
	}
	var in Inbound
	c := append([]byte(nil), b...)
	if !in.Deliver(tb, b, 1) || !bytes.Equal(b, c) {
		t.Fatal("ingress changed an unrelated frame")
	}
}

func TestNoAllocs(t *testing.T) {
	tb := testTable(t, 0)
	tb.pools[0].Servers[0].SetMAC(serverMAC)
	w := NewWorker()
	tmpl := request(binaryGet(keyOn(t, tb, 1)))
	split := request([]byte("get " + keyOn(t, tb, 0) + " " + keyOn(t, tb, 1) + " " + keyOn(t, tb, 2) + "\r\n"))
	b := make([]byte, len(split))
	var in Inbound
	now := int64(1)
	for _, c := range []struct {
		name string
		f    []byte
	}{{"get", tmpl}, {"split", split}} {
		allocs := testing.AllocsPerRun(200, func() {
			now += 1000
			n := copy(b, c.f)
			w.Egress(tb, b[:n], now)
			in.Deliver(tb, b[:n], now)
		})
		if allocs != 0 {
			t.Fatalf("%s: %v allocs per packet", c.name, allocs)
		}
	}
}

func BenchmarkEgressGet(b *testing.B) {
	tb := testTable(b, 1<<30)
	w := NewWorker()
	tmpl := request(binaryGet("user:1234567890"))
	buf := make([]byte, len(tmpl))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		copy(buf, tmpl)
		w.Egress(tb, buf, int64(i))
	}
}

func BenchmarkIngressReply(b *testing.B) {
	tb := testTable(b, 0)
	c4 := client.Addr().As4()
	tb.mark(be32b(c4[:]), client.Port(), 1)
	tmpl := udpFrame(clientMAC, serverMAC[:], tb.pools[0].Servers[1].Addr, client, datagram(42, []byte("END\r\n")))
	buf := make([]byte, len(tmpl))
	var in Inbound
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, tmpl)
		in.Deliver(tb, buf, 2)
	}
	if tb.pools[0].Stats.Replies.Load() == 0 {
		b.Fatal("no reply rewritten")
	}
}
