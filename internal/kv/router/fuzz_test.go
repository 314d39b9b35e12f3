package router

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/memcache"
)

// FuzzEgress feeds arbitrary frames to the egress path: it must never
// panic, and every frame it sends must parse.
func FuzzEgress(f *testing.F) {
	f.Add(request(binaryGet("a")))
	f.Add(request([]byte("get a b c d e f\r\n")))
	f.Add(request([]byte("mg a v\r\nmg b v\r\nmn\r\n")))
	f.Add(request([]byte("bogus\r\n")))
	vmac, term := VirtualMAC(vip.Addr()), TermMAC(siteA)
	f.Add(tcpFrame(vmac[:], clientMAC, client, vip))
	f.Add(tcpFrame(vmac[:], term[:], vip, client))
	tb := testTable(f, 0)
	tb.EnableTCP(true)
	tb.pools[0].Servers[0].SetMAC(serverMAC)
	w := NewWorker()
	var in Inbound
	f.Fuzz(func(t *testing.T, b []byte) {
		_, outs := w.Egress(tb, b, 1)
		for _, o := range outs {
			if len(o.Frame) < 14 {
				t.Fatalf("output of %d bytes", len(o.Frame))
			}
			in.Deliver(tb, o.Frame, 2)
		}
	})
}

// FuzzIngress feeds arbitrary frames to the delivery path.
func FuzzIngress(f *testing.F) {
	f.Add(request(binaryGet("a")))
	f.Add(udpFrame(clientMAC, serverMAC[:], client, vip, []byte("END\r\n")))
	vmac, term := VirtualMAC(vip.Addr()), TermMAC(siteB)
	f.Add(tcpFrame(vmac[:], term[:], vip, netip.MustParseAddrPort("10.20.0.11:11211")))
	tb := testTable(f, 0)
	tb.EnableTCP(true)
	tb.pools[0].Servers[0].SetMAC(serverMAC)
	var in Inbound
	f.Fuzz(func(t *testing.T, b []byte) {
		in.Deliver(tb, b, 1)
	})
}

// FuzzReplicated feeds arbitrary frames, as requests from the client and
// as replies from the replicas, to a replicated pool: it must never
// panic, every frame it sends must parse, and a request's outputs never
// exceed one per replica plus a hedge.
func FuzzReplicated(f *testing.F) {
	f.Add(clientReq(1, binaryGet("a")), []byte("VALUE a 0 1\r\nx\r\nEND\r\n"), uint16(1), uint16(1))
	f.Add(clientReq(2, []byte("set a 0 0 1\r\nx\r\n")), []byte("STORED\r\n"), uint16(2), uint16(1))
	f.Add(clientReq(3, []byte("get a b c d e f\r\n")), []byte("END\r\n"), uint16(3), uint16(3))
	f.Add(clientReq(4, []byte("mg a v\r\nms b 1\r\nx\r\n")), []byte("HD\r\n"), uint16(4), uint16(0))
	tb := repTable(f, 0)
	w := NewWorker()
	var in Inbound
	now := int64(1)
	f.Fuzz(func(t *testing.T, req, reply []byte, id, total uint16) {
		now += ms
		_, outs := w.Egress(tb, req, now)
		if len(outs) > 2*len(tb.pools[0].Servers)+maxHedges {
			t.Fatalf("%d outputs", len(outs))
		}
		var dsts []netip.AddrPort
		for _, o := range outs {
			var fr frame.Frame
			if frame.Parse(o.Frame, &fr) != nil {
				t.Fatalf("output does not parse: % x", o.Frame)
			}
			if fr.V6 || fr.Proto != frame.ProtoUDP {
				continue
			}
			ip := fr.IPv4(o.Frame)
			d := [4]byte(ip.Dst())
			dsts = append(dsts, netip.AddrPortFrom(netip.AddrFrom4(d), binary.BigEndian.Uint16(o.Frame[fr.L4+2:])))
		}
		for _, d := range dsts {
			pl := make([]byte, 8+len(reply))
			memcache.FrameHeader{RequestID: id, Total: total}.Put(pl)
			copy(pl[8:], reply)
			in.Deliver(tb, udpFrame(clientMAC, serverMAC[:], d, client, pl), now+ms)
		}
		tb.pools[0].Expire(now)
	})
}
