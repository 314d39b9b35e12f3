package router

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/wire"
)

// tcpFrame builds an Ethernet/IPv4/TCP frame (20-byte header, SYN) with
// correct checksums.
func tcpFrame(dstMAC, srcMAC []byte, src, dst netip.AddrPort) []byte {
	b := make([]byte, 14+20+20)
	frame.PutEthernet(b, dstMAC, srcMAC, false, 0, frame.EtherTypeIPv4)
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	frame.PutIPv4(b[14:], 0, 40, 7, frame.IPv4FlagDF, 64, frame.ProtoTCP, s4[:], d4[:])
	tc := b[34:]
	binary.BigEndian.PutUint16(tc[0:], src.Port())
	binary.BigEndian.PutUint16(tc[2:], dst.Port())
	tc[12], tc[13] = 5<<4, 0x02
	binary.BigEndian.PutUint16(tc[16:], ^frame.Checksum(tc, frame.PseudoSum(s4[:], d4[:], frame.ProtoTCP, len(tc))))
	return b
}

// tcpTableAt is testTable's pool seen from site self.
func tcpTableAt(t *testing.T, self wire.SiteID) *Table {
	t.Helper()
	tb, err := New(Spec{Self: self, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []PoolSpec{{
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

// oneOf returns a function that checks that Egress handled a frame and
// sent exactly one, and returns it.
func oneOf(t *testing.T) func(bool, []Output) Output {
	return func(handled bool, outs []Output) Output {
		t.Helper()
		if !handled || len(outs) != 1 {
			t.Fatalf("handled %v, %d outputs", handled, len(outs))
		}
		return outs[0]
	}
}

func TestTCPDisabled(t *testing.T) {
	tb := tcpTableAt(t, siteA)
	vmac := VirtualMAC(vip.Addr())
	handled, outs := NewWorker().Egress(tb, tcpFrame(vmac[:], clientMAC, client, vip), 1)
	if !handled || len(outs) != 0 || tb.TCPStats().DropDisabled.Load() != 1 {
		t.Fatalf("handled %v, %d outputs, %d dropped", handled, len(outs), tb.TCPStats().DropDisabled.Load())
	}
	// Ordinary TCP between hosts is not the router's business.
	b := tcpFrame(clientMAC, clientMAC, client, netip.MustParseAddrPort("10.20.0.9:80"))
	if handled, _ := NewWorker().Egress(tb, b, 1); handled {
		t.Fatal("TCP between hosts handled")
	}
}

// TestTCPRoundTrip follows a client's connection through A's terminator
// to B's server and back, frame by frame.
func TestTCPRoundTrip(t *testing.T) {
	a, bt := tcpTableAt(t, siteA), tcpTableAt(t, siteB)
	a.EnableTCP(true)
	bt.EnableTCP(true)
	vmac, termA := VirtualMAC(vip.Addr()), TermMAC(siteA)
	wa, wb := NewWorker(), NewWorker()
	var ina, inb Inbound
	one := oneOf(t)

	// Client → VIP: to A's terminator over the bridge.
	o := one(wa.Egress(a, tcpFrame(vmac[:], clientMAC, client, vip), 1))
	if !o.Local || !bytes.Equal(frame.Dst(o.Frame), termA[:]) || !bytes.Equal(frame.Src(o.Frame), vmac[:]) {
		t.Fatalf("client frame: local %v, dst %x, src %x", o.Local, frame.Dst(o.Frame), frame.Src(o.Frame))
	}
	// Terminator → client: the client's MAC, learned from its frame.
	o = one(wa.Egress(a, tcpFrame(vmac[:], termA[:], vip, client), 2))
	if !o.Local || !bytes.Equal(frame.Dst(o.Frame), clientMAC) || !bytes.Equal(frame.Src(o.Frame), vmac[:]) {
		t.Fatalf("to the client: dst %x src %x", frame.Dst(o.Frame), frame.Src(o.Frame))
	}
	// Terminator → B's server: over the overlay to B.
	from := netip.AddrPortFrom(vip.Addr(), 50001)
	srvB := netip.MustParseAddrPort("10.20.0.12:11211")
	o = one(wa.Egress(a, tcpFrame(vmac[:], termA[:], from, srvB), 3))
	if o.Local || o.Site != siteB || !bytes.Equal(frame.Dst(o.Frame), vmac[:]) {
		t.Fatalf("to B's server: local %v site %v dst %x", o.Local, o.Site, frame.Dst(o.Frame))
	}
	// At B: unknown MAC first (dropped, ARP asked), then delivered.
	syn := append([]byte(nil), o.Frame...)
	if inb.Deliver(bt, append([]byte(nil), syn...), 4) || !bt.pools[0].Servers[1].TakeNeedARP() {
		t.Fatal("delivered to a server whose MAC is unknown")
	}
	bt.pools[0].Servers[1].SetMAC(serverMAC)
	if !inb.Deliver(bt, syn, 5) || !bytes.Equal(frame.Dst(syn), serverMAC[:]) {
		t.Fatalf("at B: dst %x", frame.Dst(syn))
	}
	// B's server answers VIP:50001: back to A's terminator.
	o = one(wb.Egress(bt, tcpFrame(vmac[:], serverMAC[:], srvB, from), 6))
	if o.Local || o.Site != siteA || !bytes.Equal(frame.Dst(o.Frame), termA[:]) {
		t.Fatalf("server's reply: local %v site %v dst %x", o.Local, o.Site, frame.Dst(o.Frame))
	}
	reply := append([]byte(nil), o.Frame...)
	if !ina.Deliver(a, o.Frame, 7) || !bytes.Equal(o.Frame, reply) {
		t.Fatal("A's ingress refused or changed the reply to its terminator")
	}
	// Site C's terminator on the same port towards the same server: the
	// connection B noted is kept, C's frames are dropped.
	termC := TermMAC(siteC)
	if inb.Deliver(bt, tcpFrame(vmac[:], termC[:], from, srvB), 8) || bt.TCPStats().DropConflict.Load() != 1 {
		t.Fatal("a second site took a noted connection")
	}
	// Another port of C is fine, and the server's replies to it go to C.
	fromC := netip.AddrPortFrom(vip.Addr(), 50002)
	if !inb.Deliver(bt, tcpFrame(vmac[:], termC[:], fromC, srvB), 9) {
		t.Fatal("C's own connection refused")
	}
	if o = one(wb.Egress(bt, tcpFrame(vmac[:], serverMAC[:], srvB, fromC), 10)); o.Site != siteC {
		t.Fatalf("reply to C's connection went to %v", o.Site)
	}
	// After TCPConnIdle without frames the port is free again.
	if !inb.Deliver(bt, tcpFrame(vmac[:], termC[:], from, srvB), 9+(TCPConnIdle+2)*1e9) {
		t.Fatal("an idle noted connection was not freed")
	}
	// A server's frame to a port nobody noted goes to B's own terminator.
	termB := TermMAC(siteB)
	o = one(wb.Egress(bt, tcpFrame(vmac[:], serverMAC[:], srvB, netip.AddrPortFrom(vip.Addr(), 50003)), 11))
	if !o.Local || !bytes.Equal(frame.Dst(o.Frame), termB[:]) {
		t.Fatalf("to B's own terminator: local %v dst %x", o.Local, frame.Dst(o.Frame))
	}
}

// sinkFrames is a TCPSink that keeps copies.
type sinkFrames [][]byte

func (s *sinkFrames) Input(f []byte) { *s = append(*s, append([]byte(nil), f...)) }

func TestTCPSink(t *testing.T) {
	a := tcpTableAt(t, siteA)
	a.EnableTCP(true)
	var got sinkFrames
	a.SetTCPSink(&got)
	vmac := VirtualMAC(vip.Addr())
	b := tcpFrame(vmac[:], clientMAC, client, vip)
	if h, outs := NewWorker().Egress(a, b, 1); !h || len(outs) != 0 || len(got) != 1 || !bytes.Equal(got[0], b) {
		t.Fatalf("handled %v, %d outputs, %d frames to the sink", h, len(outs), len(got))
	}
	a.SetTCPSink(nil)
	if _, outs := NewWorker().Egress(a, tcpFrame(vmac[:], clientMAC, client, vip), 2); len(outs) != 1 || len(got) != 1 {
		t.Fatal("without a sink the frame does not go over the bridge")
	}
}

func TestTCPLocalServer(t *testing.T) {
	a := tcpTableAt(t, siteA)
	a.EnableTCP(true)
	vmac, termA := VirtualMAC(vip.Addr()), TermMAC(siteA)
	w := NewWorker()
	one := oneOf(t)
	from := netip.AddrPortFrom(vip.Addr(), 50001)
	srv := netip.MustParseAddrPort("10.20.0.11:11211")
	if h, outs := w.Egress(a, tcpFrame(vmac[:], termA[:], from, srv), 1); !h || len(outs) != 0 || !a.pools[0].Servers[0].TakeNeedARP() {
		t.Fatal("sent to a local server whose MAC is unknown")
	}
	a.pools[0].Servers[0].SetMAC(serverMAC)
	o := one(w.Egress(a, tcpFrame(vmac[:], termA[:], from, srv), 2))
	if !o.Local || !bytes.Equal(frame.Dst(o.Frame), serverMAC[:]) || !bytes.Equal(frame.Src(o.Frame), vmac[:]) {
		t.Fatalf("to the local server: dst %x src %x", frame.Dst(o.Frame), frame.Src(o.Frame))
	}
	o = one(w.Egress(a, tcpFrame(vmac[:], serverMAC[:], srv, from), 3))
	if !o.Local || !bytes.Equal(frame.Dst(o.Frame), termA[:]) {
		t.Fatalf("the local server's reply: dst %x", frame.Dst(o.Frame))
	}
	// Frames the router refuses: another port of the VIP, a host outside
	// the subnet, the terminator to an unknown client.
	for i, b := range [][]byte{
		tcpFrame(vmac[:], clientMAC, client, netip.AddrPortFrom(vip.Addr(), 80)),
		tcpFrame(vmac[:], clientMAC, netip.MustParseAddrPort("10.99.0.1:5000"), vip),
		tcpFrame(vmac[:], termA[:], vip, netip.MustParseAddrPort("10.20.0.77:5000")),
	} {
		if h, outs := w.Egress(a, b, 4); !h || len(outs) != 0 {
			t.Fatalf("case %d: handled %v, %d outputs", i, h, len(outs))
		}
	}
}
