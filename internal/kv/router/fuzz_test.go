package router

import (
	"net/netip"
	"testing"
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
