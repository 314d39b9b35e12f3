package frame

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzParse parses any bytes as an Ethernet frame, then as TCP or UDP,
// walks the TCP options and rewrites the destination. It checks that
// nothing panics, that the offsets are ordered and inside the frame, and
// that a rewrite keeps valid checksums valid (an incremental update
// equals the full recomputation).
func FuzzParse(f *testing.F) {
	f.Add(build(pkt{proto: ProtoTCP, tcpOpts: []byte{2, 4, 5, 0xb4}, tcpFlags: TCPFlagSYN}))
	f.Add(build(pkt{vlan: true, proto: ProtoUDP, ipOpts: 4, payload: []byte("get a\r\n")}))
	f.Add(build(pkt{proto: ProtoUDP, noCsum: true, payload: []byte("x")}))
	f.Add(build(pkt{v6: true, proto: ProtoUDP, payload: []byte("mg a v\r\n")}))
	f.Add(build(pkt{v6: true, proto: ProtoTCP, next: IPv6HopByHop, ext: []byte{IPv6Fragment, 0, 1, 4, 0, 0, 0, 0, ProtoTCP, 0, 0, 1, 0, 0, 0, 1}}))
	f.Add(arpRequest(true, ip4C))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		err := Parse(b, &fr)
		if NeighbourKind(b) != NotNeighbour && err != ErrNotIP && !(err == nil && fr.V6 && fr.Proto == ProtoICMPv6) {
			t.Fatalf("a neighbour discovery frame that Parse takes for %+v, %v", fr, err)
		}
		if err == ErrNotIP {
			if fr.L3 != 14 && fr.L3 != 18 || fr.L3 > len(b) {
				t.Fatalf("link offsets %+v", fr)
			}
			if a, err := ParseARP(b[fr.L3:]); err == nil {
				out := make([]byte, 64)
				n := PutARPReply(out, &fr, a, macB)
				var rf Frame
				if Parse(out[:n], &rf) != ErrNotIP || rf.VLAN != fr.VLAN || rf.TCI != fr.TCI {
					t.Fatal("reply's link header differs")
				}
				r, err := ParseARP(out[rf.L3:n])
				if err != nil || r.Op() != ARPReply || !bytes.Equal(r.SenderIP(), a.TargetIP()) || !bytes.Equal(r.TargetMAC(), a.SenderMAC()) || !bytes.Equal(r.TargetIP(), a.SenderIP()) {
					t.Fatal("reply does not answer the request")
				}
			}
			return
		}
		if err != nil {
			return
		}
		if !(fr.L3 == 14 || fr.L3 == 18) || fr.L3 > fr.L4 || fr.L4 > fr.End || fr.End > len(b) {
			t.Fatalf("offsets out of order: %+v, %d bytes", fr, len(b))
		}
		if fr.V6 != (fr.EtherType == EtherTypeIPv6) {
			t.Fatalf("family: %+v", fr)
		}
		if !fr.V6 && fr.L4-fr.L3 != IPv4(b[fr.L3:]).HeaderLen() {
			t.Fatalf("IPv4 header length: %+v", fr)
		}
		seg := fr.Upper(b)
		if tcp, err := ParseTCP(seg); err == nil {
			if _, off, ok := tcp.MSS(); ok && (off < TCPHeaderLen+2 || off+2 > tcp.HeaderLen()) {
				t.Fatalf("MSS at %d outside the options", off)
			}
		}
		ParseUDP(seg)
		checkRewrite(t, b, &fr)
	})
}

// checkRewrite rewrites the destination of a copy of b and checks that
// checksums that verified before verify after.
func checkRewrite(t *testing.T, b []byte, fr *Frame) {
	b = append([]byte(nil), b...)
	ipOK := !fr.V6 && Checksum(b[fr.L3:fr.L4], 0) == 0
	src, dst := fr.Addrs(b)
	l4 := b[fr.L4:fr.End]
	l4OK := Checksum(l4, PseudoSum(src, dst, fr.Proto, len(l4))) == 0
	noCsum := fr.Proto == ProtoUDP && !fr.V6 && len(l4) >= 8 && binary.BigEndian.Uint16(l4[6:]) == 0
	addr := ip4C
	if fr.V6 {
		addr = ip6C
	}
	if !fr.RewriteDst(b, addr, 11311) {
		return
	}
	if _, d := fr.Addrs(b); !bytes.Equal(d, addr) {
		t.Fatal("address not rewritten")
	}
	if ipOK && Checksum(b[fr.L3:fr.L4], 0) != 0 {
		t.Fatal("IPv4 header checksum broken by the rewrite")
	}
	if noCsum {
		if binary.BigEndian.Uint16(l4[6:]) != 0 {
			t.Fatal("UDP datagram without checksum got one")
		}
		return
	}
	if l4OK && fr.Frag == FragNone && Checksum(l4, PseudoSum(src, dst, fr.Proto, len(l4))) != 0 {
		t.Fatal("L4 checksum broken by the rewrite")
	}
}

// FuzzUpdate checks that the incremental updates of a 16-bit word (at any
// offset), a 32-bit word and an address equal a full recomputation.
func FuzzUpdate(f *testing.F) {
	f.Add([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 1, uint16(0x1234), uint32(0xdeadbeef), false)
	f.Add(bytes.Repeat([]byte{0xff}, 40), 4, uint16(0), uint32(0), true)
	f.Fuzz(func(t *testing.T, data []byte, off int, v16 uint16, v32 uint32, v6 bool) {
		addr := ip4C
		if v6 {
			addr = ip6C
		}
		checkUpdates(t, data, off, v16, v32, addr)
	})
}

// FuzzChecksum checks Checksum against a byte-by-byte computation, with
// and without a pseudo header's sum to start from.
func FuzzChecksum(f *testing.F) {
	f.Add(bytes.Repeat([]byte{0xff}, 70), uint32(0))
	f.Add([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, uint32(0x1234567))
	f.Fuzz(func(t *testing.T, data []byte, acc uint32) {
		a := []byte{byte(acc >> 24), byte(acc >> 16), byte(acc >> 8), byte(acc)}
		if got, want := Checksum(data, Sum(0, a)), refChecksum(a, data); got != want {
			t.Fatalf("Checksum of %d bytes = %#04x, byte by byte %#04x", len(data), got, want)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"IPv4TCP", build(pkt{proto: ProtoTCP, payload: make([]byte, 1400)})},
		{"VLANIPv4UDP", build(pkt{vlan: true, proto: ProtoUDP, payload: make([]byte, 40)})},
		{"IPv6TCP", build(pkt{v6: true, proto: ProtoTCP, payload: make([]byte, 1400)})},
		{"IPv6ExtTCP", build(pkt{v6: true, proto: ProtoTCP, next: IPv6HopByHop, ext: []byte{IPv6DestOpts, 0, 1, 4, 0, 0, 0, 0, ProtoTCP, 0, 1, 4, 0, 0, 0, 0}})},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var f Frame
			for b.Loop() {
				if Parse(c.frame, &f) != nil {
					b.Fatal("does not parse")
				}
			}
		})
	}
}

func BenchmarkChecksum1500(b *testing.B) {
	data := make([]byte, 1500)
	b.ReportAllocs()
	b.SetBytes(1500)
	for b.Loop() {
		Checksum(data, 0)
	}
}

func BenchmarkRewriteDst(b *testing.B) {
	for _, c := range []struct {
		name  string
		frame []byte
		addr  []byte
	}{
		{"IPv4UDP", build(pkt{proto: ProtoUDP, payload: []byte("get key:1\r\n")}), ip4C},
		{"IPv6UDP", build(pkt{v6: true, proto: ProtoUDP, payload: []byte("get key:1\r\n")}), ip6C},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var f Frame
			for i := 0; b.Loop(); i++ {
				Parse(c.frame, &f)
				c.addr[len(c.addr)-1] = byte(i)
				copy(Dst(c.frame), macA)
				f.RewriteDst(c.frame, c.addr, uint16(i))
			}
		})
	}
}

func BenchmarkARPReply(b *testing.B) {
	req := arpRequest(false, ip4C)
	out := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		var f Frame
		Parse(req, &f)
		a, err := ParseARP(req[f.L3:])
		if err != nil || PutARPReply(out, &f, a, macB) == 0 {
			b.Fatal("no reply")
		}
	}
}
