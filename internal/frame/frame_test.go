package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// Addresses of the frames built by the tests.
var (
	macA  = []byte{0x02, 0, 0x5e, 0x10, 0, 1}
	macB  = []byte{0x02, 0, 0x5e, 0x10, 0, 2}
	ip4A  = []byte{198, 19, 1, 1}
	ip4B  = []byte{198, 19, 3, 1}
	ip4C  = []byte{198, 19, 2, 77}
	ip6A  = []byte{0xfd, 0, 0, 0x13, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	ip6B  = []byte{0xfd, 0, 0, 0x13, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	ip6C  = []byte{0xfd, 0, 0, 0x13, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34}
	vlan7 = []byte{0x81, 0x00, 0xa0, 0x07} // PCP 5, VID 7
)

// refChecksum computes the Internet checksum of the concatenation of
// parts byte by byte, independently of Sum and Fold.
func refChecksum(parts ...[]byte) uint16 {
	var s uint64
	pos := 0
	for _, p := range parts {
		for _, b := range p {
			if pos%2 == 0 {
				s += uint64(b) << 8
			} else {
				s += uint64(b)
			}
			pos++
		}
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// pseudo returns the pseudo header of an upper-layer segment of n bytes.
func pseudo(src, dst []byte, proto byte, n int) []byte {
	p := append(append([]byte(nil), src...), dst...)
	if len(src) == 4 {
		return append(p, 0, proto, byte(n>>8), byte(n))
	}
	return append(p, byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 0, 0, 0, proto)
}

// pkt describes a frame for build, every field written by hand.
type pkt struct {
	vlan     bool
	v6       bool
	proto    byte   // ProtoTCP, ProtoUDP or another (payload only)
	ipOpts   int    // IPv4 options, bytes (a multiple of 4)
	ext      []byte // IPv6 extension headers, encoded (next header bytes included)
	next     byte   // IPv6 fixed header's next header when ext is set
	flags    uint16 // IPv4 flags and fragment offset
	tcpOpts  []byte // TCP options (a multiple of 4 bytes)
	tcpFlags byte
	noCsum   bool // UDP over IPv4 without a checksum
	payload  []byte
	pad      int // bytes of padding after the IP packet
}

// build returns an Ethernet frame for p from macA/ip?A:40000 to
// macB/ip?B:11211 with correct lengths and checksums.
func build(p pkt) []byte {
	b := append(append([]byte(nil), macB...), macA...)
	if p.vlan {
		b = append(b, vlan7...)
	}
	var l4 []byte
	switch p.proto {
	case ProtoTCP:
		l4 = make([]byte, 20+len(p.tcpOpts))
		binary.BigEndian.PutUint16(l4[0:], 40000)
		binary.BigEndian.PutUint16(l4[2:], 11211)
		binary.BigEndian.PutUint32(l4[4:], 0x11223344)
		binary.BigEndian.PutUint32(l4[8:], 0x55667788)
		l4[12], l4[13] = byte(len(l4)/4)<<4, p.tcpFlags
		binary.BigEndian.PutUint16(l4[14:], 64240)
		copy(l4[20:], p.tcpOpts)
	case ProtoUDP:
		l4 = make([]byte, 8)
		binary.BigEndian.PutUint16(l4[0:], 40000)
		binary.BigEndian.PutUint16(l4[2:], 11211)
		binary.BigEndian.PutUint16(l4[4:], uint16(8+len(p.payload)))
	}
	l4 = append(l4, p.payload...)
	src, dst := ip4A, ip4B
	if p.v6 {
		src, dst = ip6A, ip6B
	}
	csum := refChecksum(pseudo(src, dst, p.proto, len(l4)), l4)
	switch p.proto {
	case ProtoTCP:
		binary.BigEndian.PutUint16(l4[16:], csum)
	case ProtoUDP:
		if csum == 0 {
			csum = 0xffff
		}
		if !p.noCsum {
			binary.BigEndian.PutUint16(l4[6:], csum)
		}
	}
	if p.v6 {
		b = append(b, 0x86, 0xdd)
		ip := make([]byte, 40)
		ip[0], ip[1] = 0x60, 0x01
		binary.BigEndian.PutUint16(ip[4:], uint16(len(p.ext)+len(l4)))
		ip[6], ip[7] = p.proto, 64
		if p.ext != nil {
			ip[6] = p.next
		}
		copy(ip[8:], src)
		copy(ip[24:], dst)
		b = append(append(append(b, ip...), p.ext...), l4...)
	} else {
		b = append(b, 0x08, 0x00)
		hl := 20 + p.ipOpts
		ip := make([]byte, hl)
		ip[0], ip[1] = 0x40|byte(hl/4), 0x10
		binary.BigEndian.PutUint16(ip[2:], uint16(hl+len(l4)))
		binary.BigEndian.PutUint16(ip[4:], 0xbeef)
		binary.BigEndian.PutUint16(ip[6:], p.flags)
		ip[8], ip[9] = 64, p.proto
		copy(ip[12:], src)
		copy(ip[16:], dst)
		for i := 20; i < hl; i++ {
			ip[i] = 1
		}
		binary.BigEndian.PutUint16(ip[10:], refChecksum(ip))
		b = append(append(b, ip...), l4...)
	}
	return append(b, make([]byte, p.pad)...)
}

func TestParse(t *testing.T) {
	hbh := []byte{IPv6DestOpts, 0, 1, 4, 0, 0, 0, 0}
	dst := []byte{ProtoTCP, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	fragFirst := []byte{ProtoUDP, 0, 0, 1, 0, 0, 0, 9}
	fragLater := []byte{ProtoUDP, 0, 0x05, 0x28, 0, 0, 0, 9}
	ah := []byte{ProtoTCP, 4, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	data := bytes.Repeat([]byte{0x5a}, 100)
	cases := []struct {
		name string
		p    pkt
		want Frame
	}{
		{"IPv4 TCP", pkt{proto: ProtoTCP, payload: data},
			Frame{EtherType: EtherTypeIPv4, L3: 14, L4: 34, End: 154, Proto: ProtoTCP}},
		{"IPv4 options, VLAN, padding", pkt{vlan: true, proto: ProtoUDP, ipOpts: 8, payload: data[:10], pad: 20},
			Frame{EtherType: EtherTypeIPv4, VLAN: true, TCI: 0xa007, L3: 18, L4: 46, End: 64, Proto: ProtoUDP}},
		{"IPv4 first fragment", pkt{proto: ProtoUDP, flags: IPv4FlagMF, payload: data},
			Frame{EtherType: EtherTypeIPv4, L3: 14, L4: 34, End: 142, Proto: ProtoUDP, Frag: FragFirst}},
		{"IPv4 later fragment", pkt{proto: ProtoUDP, flags: 185, payload: data},
			Frame{EtherType: EtherTypeIPv4, L3: 14, L4: 34, End: 142, Proto: ProtoUDP, Frag: FragLater}},
		{"IPv6 TCP", pkt{v6: true, proto: ProtoTCP, payload: data},
			Frame{EtherType: EtherTypeIPv6, V6: true, L3: 14, L4: 54, End: 174, Proto: ProtoTCP}},
		{"IPv6 hop-by-hop, destination options", pkt{v6: true, vlan: true, proto: ProtoTCP, next: IPv6HopByHop, ext: append(hbh, dst...), payload: data},
			Frame{EtherType: EtherTypeIPv6, VLAN: true, TCI: 0xa007, V6: true, L3: 18, L4: 82, End: 202, Proto: ProtoTCP}},
		{"IPv6 first fragment", pkt{v6: true, proto: ProtoUDP, next: IPv6Fragment, ext: fragFirst, payload: data},
			Frame{EtherType: EtherTypeIPv6, V6: true, L3: 14, L4: 62, End: 170, Proto: ProtoUDP, Frag: FragFirst}},
		{"IPv6 later fragment", pkt{v6: true, proto: ProtoUDP, next: IPv6Fragment, ext: fragLater, payload: data},
			Frame{EtherType: EtherTypeIPv6, V6: true, L3: 14, L4: 62, End: 170, Proto: ProtoUDP, Frag: FragLater}},
		{"IPv6 AH is not walked", pkt{v6: true, proto: ProtoTCP, next: 51, ext: ah, payload: data},
			Frame{EtherType: EtherTypeIPv6, V6: true, L3: 14, L4: 54, End: 198, Proto: 51}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f Frame
			if err := Parse(build(c.p), &f); err != nil {
				t.Fatal(err)
			}
			if f != c.want {
				t.Errorf("got %+v\nwant %+v", f, c.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	v4 := build(pkt{proto: ProtoTCP, payload: make([]byte, 40)})
	v6 := build(pkt{v6: true, proto: ProtoUDP, payload: make([]byte, 40)})
	v6ext := build(pkt{v6: true, proto: ProtoTCP, next: IPv6DestOpts, ext: []byte{ProtoTCP, 0, 1, 4, 0, 0, 0, 0}, payload: make([]byte, 40)})
	set := func(b []byte, off int, v ...byte) []byte {
		b = append([]byte(nil), b...)
		copy(b[off:], v)
		return b
	}
	cases := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"empty", nil, ErrTruncated},
		{"short Ethernet", v4[:13], ErrTruncated},
		{"short VLAN tag", []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0, 0, 7, 8}, ErrTruncated},
		{"ARP", set(v4, 12, 0x08, 0x06), ErrNotIP},
		{"short IPv4 header", v4[:33], ErrTruncated},
		{"IPv4 version 6", set(v4, 14, 0x65), ErrMalformed},
		{"IPv4 IHL 4", set(v4, 14, 0x44), ErrMalformed},
		{"IPv4 IHL past the frame", set(v4[:40], 14, 0x4f), ErrTruncated},
		{"IPv4 total below IHL", set(v4, 16, 0, 19), ErrMalformed},
		{"IPv4 total past the frame", set(v4, 16, 0x05, 0xdc), ErrTruncated},
		{"short IPv6 header", v6[:53], ErrTruncated},
		{"IPv6 version 4", set(v6, 14, 0x45), ErrMalformed},
		{"IPv6 payload past the frame", set(v6, 18, 0x05, 0xdc), ErrTruncated},
		{"IPv6 extension header past the packet", set(v6ext, 55, 200), ErrMalformed},
		{"IPv6 jumbogram", set(v6ext, 18, 0, 0), ErrMalformed},
	}
	for _, c := range cases {
		var f Frame
		if err := Parse(c.frame, &f); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	var f Frame
	if Parse(set(v4, 12, 0x08, 0x06), &f); f.EtherType != EtherTypeARP || f.L3 != 14 {
		t.Errorf("ARP frame: link fields %+v", f)
	}
}

func TestParseTCPAndUDP(t *testing.T) {
	b := build(pkt{proto: ProtoTCP, tcpOpts: []byte{1, 1, 4, 2, 2, 4, 0x05, 0xb4}, tcpFlags: TCPFlagSYN, payload: []byte("hello")})
	var f Frame
	if err := Parse(b, &f); err != nil {
		t.Fatal(err)
	}
	tcp, err := ParseTCP(f.Upper(b))
	if err != nil {
		t.Fatal(err)
	}
	if tcp.SrcPort() != 40000 || tcp.DstPort() != 11211 || tcp.Seq() != 0x11223344 || tcp.Ack() != 0x55667788 ||
		tcp.HeaderLen() != 28 || tcp.Flags() != TCPFlagSYN || tcp.Window() != 64240 || string(tcp.Payload()) != "hello" {
		t.Errorf("TCP fields wrong: %x", []byte(tcp))
	}
	for _, seg := range [][]byte{tcp[:19], append([]byte(nil), tcp[:27]...)} {
		if _, err := ParseTCP(seg); err != ErrTruncated {
			t.Errorf("%d bytes: got %v", len(seg), err)
		}
	}
	bad := append([]byte(nil), tcp...)
	bad[12] = 4 << 4
	if _, err := ParseTCP(bad); err != ErrMalformed {
		t.Errorf("data offset 16: got %v", err)
	}
	u := build(pkt{v6: true, proto: ProtoUDP, payload: []byte("get k\r\n")})
	if err := Parse(u, &f); err != nil {
		t.Fatal(err)
	}
	udp, err := ParseUDP(f.Upper(u))
	if err != nil || udp.SrcPort() != 40000 || udp.DstPort() != 11211 || udp.Len() != 15 || string(udp.Payload()) != "get k\r\n" {
		t.Errorf("UDP: %v %x", err, []byte(udp))
	}
	if _, err := ParseUDP(udp[:7]); err != ErrTruncated {
		t.Errorf("7-byte UDP: got %v", err)
	}
}

func TestMSS(t *testing.T) {
	cases := []struct {
		name string
		opts []byte
		mss  uint16
		off  int
		ok   bool
	}{
		{"first", []byte{2, 4, 0x05, 0xb4}, 1460, 22, true},
		{"after NOPs, odd offset", []byte{1, 2, 4, 0x05, 0xb4, 1, 1, 0}, 1460, 23, true},
		{"after window scale", []byte{3, 3, 7, 2, 4, 0x04, 0x00, 0}, 1024, 25, true},
		{"wrong length skipped", []byte{2, 3, 9, 2, 4, 0x04, 0x00, 0}, 1024, 25, true},
		{"end of list first", []byte{0, 0, 2, 4, 0x05, 0xb4, 0, 0}, 0, 0, false},
		{"length 1", []byte{3, 1, 2, 4, 0x05, 0xb4, 0, 0}, 0, 0, false},
		{"length past options", []byte{1, 1, 3, 9}, 0, 0, false},
		{"kind at the last byte", []byte{1, 1, 1, 8}, 0, 0, false},
		{"none", nil, 0, 0, false},
	}
	for _, c := range cases {
		b := build(pkt{proto: ProtoTCP, tcpOpts: c.opts, tcpFlags: TCPFlagSYN})
		tcp, err := ParseTCP(b[34:])
		if err != nil {
			t.Fatal(err)
		}
		mss, off, ok := tcp.MSS()
		if mss != c.mss || off != c.off || ok != c.ok {
			t.Errorf("%s: got %d at %d %v, want %d at %d %v", c.name, mss, off, ok, c.mss, c.off, c.ok)
		}
		if !ok {
			continue
		}
		tcp.SetMSS(off, 1200)
		if got, _, _ := tcp.MSS(); got != 1200 {
			t.Errorf("%s: MSS %d after SetMSS", c.name, got)
		}
		if refChecksum(pseudo(ip4A, ip4B, ProtoTCP, len(tcp)), tcp) != 0 {
			t.Errorf("%s: checksum wrong after SetMSS", c.name)
		}
	}
}

func TestChecksum(t *testing.T) {
	// RFC 1071, section 3: the sum of these bytes is 0xddf2.
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Checksum(b, 0); got != ^uint16(0xddf2) {
		t.Errorf("RFC 1071 example: %#04x", got)
	}
	for n := 0; n < 70; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*37 + 11)
		}
		if Checksum(b, 0) != refChecksum(b) {
			t.Errorf("%d bytes: %#04x, want %#04x", n, Checksum(b, 0), refChecksum(b))
		}
		if c := Checksum(b, PseudoSum(ip6A, ip6B, ProtoUDP, 70000)); c != refChecksum(pseudo(ip6A, ip6B, ProtoUDP, 70000), b) {
			t.Errorf("%d bytes with an IPv6 pseudo header: %#04x", n, c)
		}
	}
	for _, n := range []int{31, 32, 33, 64, 65, 100, 1499, 1500, 65535} {
		for _, fill := range []byte{0x00, 0xff, 0x80, 0x5a} {
			b := bytes.Repeat([]byte{fill}, n)
			if n > 40 {
				b[37] ^= 0x33
			}
			if pre := []byte{0xff, 0xff, 0xff, 0xfe}; Checksum(b, 0) != refChecksum(b) || Checksum(b, Sum(0, pre)) != refChecksum(pre, b) {
				t.Errorf("%d bytes of %#x: %#04x, want %#04x", n, fill, Checksum(b, 0), refChecksum(b))
			}
		}
	}
	ip := IPv4(build(pkt{proto: ProtoUDP, ipOpts: 4})[14:])
	want := ip.Checksum()
	ip.SetChecksum(0x1234)
	if ip.ComputeChecksum(); ip.Checksum() != want {
		t.Errorf("IPv4 header checksum %#04x, want %#04x", ip.Checksum(), want)
	}
}

// sameChecksum reports whether an updated checksum got equals the
// recomputed want over b: bit for bit, or 0x0000 for 0xffff when b is all
// zeros (see csum.go).
func sameChecksum(got, want uint16, b []byte) bool {
	return got == want || got == 0 && want == 0xffff && !bytes.ContainsFunc(b, func(r rune) bool { return r != 0 })
}

// checkUpdates checks, for data with its checksum c, that each
// incremental update equals recomputing the checksum after the change.
func checkUpdates(t *testing.T, data []byte, off int, v16 uint16, v32 uint32, addr []byte) {
	t.Helper()
	if off < 0 || off+2 > len(data) {
		return
	}
	b := append([]byte(nil), data...)
	c := Checksum(b, 0)
	old := binary.BigEndian.Uint16(b[off:])
	binary.BigEndian.PutUint16(b[off:], v16)
	if got, want := Update16At(c, off, old, v16), Checksum(b, 0); !sameChecksum(got, want, b) {
		t.Fatalf("Update16At(off %d, %#x->%#x) = %#04x, recomputed %#04x", off, old, v16, got, want)
	}
	even := off &^ 1
	if even+4 <= len(b) {
		c = Checksum(b, 0)
		o32 := binary.BigEndian.Uint32(b[even:])
		binary.BigEndian.PutUint32(b[even:], v32)
		if got, want := Update32(c, o32, v32), Checksum(b, 0); !sameChecksum(got, want, b) {
			t.Fatalf("Update32 = %#04x, recomputed %#04x", got, want)
		}
	}
	if even+len(addr) <= len(b) && (len(addr) == 4 || len(addr) == 16) {
		c = Checksum(b, 0)
		oa := append([]byte(nil), b[even:even+len(addr)]...)
		copy(b[even:], addr)
		if got, want := UpdateAddr(c, oa, addr), Checksum(b, 0); !sameChecksum(got, want, b) {
			t.Fatalf("UpdateAddr = %#04x, recomputed %#04x", got, want)
		}
	}
}

func TestUpdateEqualsRecomputation(t *testing.T) {
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i * 91)
	}
	for off := 0; off < 62; off++ {
		checkUpdates(t, data, off, uint16(off*4099), uint32(off)*0x9e3779b9, ip6C)
		checkUpdates(t, data, off, 0xffff, 0xffffffff, ip4C)
		checkUpdates(t, data, off, 0, 0, []byte{0, 0, 0, 0})
	}
	// All-ones data: the sum is 0xffff, the checksum 0.
	ones := bytes.Repeat([]byte{0xff}, 20)
	checkUpdates(t, ones, 4, 0xfffe, 0xfffffffe, ip4C)
	// Data that becomes all zeros: 0x0000 stands for 0xffff.
	checkUpdates(t, []byte("00"), 0, 0, 0, ip4C)
	if sameChecksum(0, 0xffff, []byte{0, 1}) {
		t.Error("0x0000 taken for 0xffff over data that is not all zeros")
	}
}

// checkL4 fails unless the IP header checksum (IPv4) and the TCP or UDP
// checksum of the frame b verify.
func checkL4(t *testing.T, b []byte, f *Frame) {
	t.Helper()
	if !f.V6 && refChecksum(b[f.L3:f.L4]) != 0 {
		t.Error("IPv4 header checksum wrong")
	}
	src, dst := f.Addrs(b)
	l4 := b[f.L4:f.End]
	if f.Proto == ProtoUDP && !f.V6 && binary.BigEndian.Uint16(l4[6:]) == 0 {
		return
	}
	if refChecksum(pseudo(src, dst, f.Proto, len(l4)), l4) != 0 {
		t.Errorf("%d checksum wrong", f.Proto)
	}
}

func TestRewrite(t *testing.T) {
	payload := []byte("get key:1\r\n")
	cases := []struct {
		name      string
		p         pkt
		addr, src []byte
	}{
		{"IPv4 UDP", pkt{proto: ProtoUDP, payload: payload}, ip4C, ip4B},
		{"IPv4 UDP without checksum", pkt{proto: ProtoUDP, noCsum: true, payload: payload}, ip4C, ip4B},
		{"IPv4 TCP, options, VLAN", pkt{vlan: true, proto: ProtoTCP, ipOpts: 4, payload: payload}, ip4C, ip4B},
		{"IPv6 UDP", pkt{v6: true, proto: ProtoUDP, payload: payload}, ip6C, ip6B},
		{"IPv6 TCP after options", pkt{v6: true, proto: ProtoTCP, next: IPv6DestOpts, ext: []byte{ProtoTCP, 0, 1, 4, 0, 0, 0, 0}, payload: payload}, ip6C, ip6B},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := build(c.p)
			var f Frame
			if err := Parse(b, &f); err != nil {
				t.Fatal(err)
			}
			if !f.RewriteDst(b, c.addr, 11311) {
				t.Fatal("RewriteDst refused")
			}
			copy(Dst(b), macA)
			checkL4(t, b, &f)
			if _, dst := f.Addrs(b); !bytes.Equal(dst, c.addr) || binary.BigEndian.Uint16(b[f.L4+2:]) != 11311 || !bytes.Equal(Dst(b), macA) {
				t.Error("destination not rewritten")
			}
			if c.p.noCsum && binary.BigEndian.Uint16(b[f.L4+6:]) != 0 {
				t.Error("a UDP datagram without checksum got one")
			}
			// The reply's way back: the source becomes the virtual address.
			if !f.RewriteSrc(b, c.src, 11211) {
				t.Fatal("RewriteSrc refused")
			}
			checkL4(t, b, &f)
			if src, _ := f.Addrs(b); !bytes.Equal(src, c.src) || binary.BigEndian.Uint16(b[f.L4:]) != 11211 {
				t.Error("source not rewritten")
			}
		})
	}
}

func TestRewriteRefuses(t *testing.T) {
	later := build(pkt{proto: ProtoUDP, flags: 185, payload: make([]byte, 20)})
	icmp := build(pkt{proto: ProtoICMP, payload: make([]byte, 20)})
	short := build(pkt{v6: true, proto: ProtoTCP, payload: nil})
	short = short[:len(short)-4]
	binary.BigEndian.PutUint16(short[18:], 16)
	udp := build(pkt{proto: ProtoUDP})
	for _, c := range []struct {
		name string
		b    []byte
		addr []byte
	}{
		{"later fragment", later, ip4C},
		{"ICMP", icmp, ip4C},
		{"short TCP header", short, ip6C},
		{"IPv6 address for IPv4", udp, ip6C},
	} {
		var f Frame
		if err := Parse(c.b, &f); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		before := append([]byte(nil), c.b...)
		if f.RewriteDst(c.b, c.addr, 1) || !bytes.Equal(before, c.b) {
			t.Errorf("%s: rewritten", c.name)
		}
	}
	var zero Frame
	if zero.RewriteDst(udp, ip4C, 1) {
		t.Error("a zero Frame rewrote")
	}
}

// arpRequest returns a frame with an ARP request from macA/ip4A for
// target.
func arpRequest(vlan bool, target []byte) []byte {
	b := append(append([]byte(nil), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), macA...)
	if vlan {
		b = append(b, vlan7...)
	}
	b = append(b, 0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1)
	b = append(append(b, macA...), ip4A...)
	b = append(append(b, 0, 0, 0, 0, 0, 0), target...)
	return append(b, make([]byte, 18)...) // padded to 60 bytes
}

func TestARPReply(t *testing.T) {
	for _, vlan := range []bool{false, true} {
		req := arpRequest(vlan, ip4C)
		var f Frame
		if err := Parse(req, &f); err != ErrNotIP || f.EtherType != EtherTypeARP {
			t.Fatalf("Parse: %v, EtherType %#x", err, f.EtherType)
		}
		a, err := ParseARP(req[f.L3:])
		if err != nil || a.Op() != ARPRequest || !bytes.Equal(a.SenderMAC(), macA) || !bytes.Equal(a.SenderIP(), ip4A) || !bytes.Equal(a.TargetIP(), ip4C) {
			t.Fatalf("request: %v %x", err, []byte(a))
		}
		out := make([]byte, 64)
		n := PutARPReply(out, &f, a, macB)
		want := append(append([]byte(nil), macA...), macB...)
		if vlan {
			want = append(want, vlan7...)
		}
		want = append(want, 0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 2)
		want = append(append(append(append(want, macB...), ip4C...), macA...), ip4A...)
		if !bytes.Equal(out[:n], want) {
			t.Errorf("VLAN %v: reply\n%x\nwant\n%x", vlan, out[:n], want)
		}
		if PutARPReply(out[:n-1], &f, a, macB) != 0 {
			t.Error("wrote into too short a buffer")
		}
	}
	bad := arpRequest(false, ip4C)
	for _, c := range []struct {
		off int
		v   byte
	}{{15, 6}, {16, 0x86}, {18, 8}, {19, 16}} {
		b := append([]byte(nil), bad...)
		b[c.off] = c.v
		if _, err := ParseARP(b[14:]); err != ErrMalformed {
			t.Errorf("byte %d = %d: %v", c.off, c.v, err)
		}
	}
	if _, err := ParseARP(bad[14:41]); err != ErrTruncated {
		t.Errorf("27 bytes: %v", err)
	}
}

func TestBuilders(t *testing.T) {
	b := make([]byte, 18+40+8+4)
	l := PutEthernet(b, macB, macA, true, 0xa007, EtherTypeIPv6)
	PutIPv6(b[l:], 0xb8, 12, ProtoUDP, 64, ip6A, ip6B)
	u := UDP(b[l+40:])
	binary.BigEndian.PutUint16(u[0:], 40000)
	binary.BigEndian.PutUint16(u[2:], 11211)
	u.SetLen(12)
	copy(u.Payload(), "ping")
	u.SetChecksum(UDPChecksum(Checksum(u, PseudoSum(ip6A, ip6B, ProtoUDP, 12))))
	want := build(pkt{vlan: true, v6: true, proto: ProtoUDP, payload: []byte("ping")})
	copy(want[18:], []byte{0x6b, 0x80, 0, 0}) // traffic class 0xb8, flow label 0
	if !bytes.Equal(b[:58], want[:58]) || u.Checksum() != binary.BigEndian.Uint16(want[64:]) {
		t.Errorf("IPv6 UDP built\n%x\nwant\n%x", b, want)
	}
	ip, _ := ParseIPv6(b[l:])
	if ip.TrafficClass() != 0xb8 || ip.HopLimit() != 64 || ip.NextHeader() != ProtoUDP || ip.PayloadLen() != 12 {
		t.Errorf("IPv6 fields: %x", []byte(ip))
	}
	b4 := make([]byte, 20)
	PutIPv4(b4, 0x10, 20+8+11, 0xbeef, IPv4FlagDF, 64, ProtoUDP, ip4A, ip4B)
	want4 := build(pkt{proto: ProtoUDP, flags: IPv4FlagDF, payload: []byte("get key:1\r\n")})[14:34]
	if !bytes.Equal(b4, want4) {
		t.Errorf("IPv4 header built\n%x\nwant\n%x", b4, want4)
	}
	ip4, _ := ParseIPv4(b4)
	if !ip4.DF() || ip4.MF() || ip4.FragOffset() != 0 || ip4.TTL() != 64 || ip4.TOS() != 0x10 || ip4.ID() != 0xbeef || len(ip4.Options()) != 0 {
		t.Errorf("IPv4 fields: %x", b4)
	}
}

func TestAddressClasses(t *testing.T) {
	for _, c := range []struct {
		a    []byte
		want bool
	}{{ip4A, true}, {[]byte{0, 1, 2, 3}, false}, {[]byte{127, 0, 0, 1}, false}, {[]byte{224, 0, 0, 9}, false}, {[]byte{255, 255, 255, 255}, false}} {
		if UnicastIPv4(c.a) != c.want {
			t.Errorf("UnicastIPv4(%v) != %v", c.a, c.want)
		}
	}
	for _, c := range []struct {
		a    []byte
		want bool
	}{{ip6A, true}, {make([]byte, 16), false}, {append(make([]byte, 15), 1), false}, {append(make([]byte, 15), 2), true}, {append([]byte{0xff, 2}, make([]byte, 14)...), false}} {
		if UnicastIPv6(c.a) != c.want {
			t.Errorf("UnicastIPv6(%v) != %v", c.a, c.want)
		}
	}
	if !IsGroup([]byte{0x01, 0, 0x5e, 0, 0, 1}) || IsGroup(macA) {
		t.Error("IsGroup")
	}
}

func TestAllocatesNothing(t *testing.T) {
	v4 := build(pkt{proto: ProtoUDP, payload: make([]byte, 100)})
	v6 := build(pkt{v6: true, vlan: true, proto: ProtoTCP, next: IPv6HopByHop, ext: []byte{ProtoTCP, 0, 1, 4, 0, 0, 0, 0}, tcpOpts: []byte{2, 4, 5, 0xb4}, tcpFlags: TCPFlagSYN})
	req := arpRequest(true, ip4C)
	out := make([]byte, 64)
	n := testing.AllocsPerRun(100, func() {
		var f Frame
		Parse(v4, &f)
		f.RewriteDst(v4, ip4C, 11211)
		Parse(v6, &f)
		tcp, _ := ParseTCP(f.Upper(v6))
		if _, off, ok := tcp.MSS(); ok {
			tcp.SetMSS(off, 1200)
		}
		Parse(req, &f)
		a, _ := ParseARP(req[f.L3:])
		PutARPReply(out, &f, a, macB)
	})
	if n != 0 {
		t.Errorf("%v allocations per run", n)
	}
}

func TestEtherType(t *testing.T) {
	for _, c := range []struct {
		b     []byte
		etype uint16
		l3    int
		ok    bool
	}{
		{build(pkt{proto: ProtoUDP}), EtherTypeIPv4, 14, true},
		{build(pkt{vlan: true, v6: true, proto: ProtoUDP}), EtherTypeIPv6, 18, true},
		{arpRequest(false, ip4C)[:14], EtherTypeARP, 14, true},
		{build(pkt{vlan: true, proto: ProtoUDP})[:17], 0, 0, false},
		{make([]byte, 13), 0, 0, false},
	} {
		etype, l3, ok := EtherType(c.b)
		if etype != c.etype || l3 != c.l3 || ok != c.ok {
			t.Errorf("%x: got %#x %d %v, want %#x %d %v", c.b[:min(len(c.b), 18)], etype, l3, ok, c.etype, c.l3, c.ok)
		}
		var f Frame
		if err := ParseLink(c.b, &f); (err == nil) != c.ok || c.ok && (f.EtherType != etype || f.L3 != l3) {
			t.Errorf("ParseLink disagrees: %v %+v", err, f)
		}
	}
}

func TestFlowLabelAndWindow(t *testing.T) {
	b := build(pkt{v6: true, proto: ProtoTCP})
	ip, _ := ParseIPv6(b[14:])
	b[16], b[17] = 0xab, 0xcd
	if ip.FlowLabel() != 0x1abcd || ip.TrafficClass() != 0 {
		t.Errorf("flow label %#x, traffic class %#x", ip.FlowLabel(), ip.TrafficClass())
	}
	tcp, _ := ParseTCP(b[54:])
	tcp.SetWindow(1234)
	if tcp.Window() != 1234 || binary.BigEndian.Uint16(b[54+14:]) != 1234 {
		t.Errorf("window %d", tcp.Window())
	}
}

func TestNeighbourKind(t *testing.T) {
	reply := arpRequest(false, ip4C)
	reply[21] = ARPReply
	ns := build(pkt{v6: true, proto: ProtoICMPv6, payload: []byte{ICMPv6NeighbourSolicitation, 0, 0, 0}})
	na := build(pkt{v6: true, proto: ProtoICMPv6, payload: []byte{ICMPv6NeighbourAdvertisement, 0, 0, 0}})
	for _, c := range []struct {
		name string
		b    []byte
		want Neighbour
	}{
		{"ARP request", arpRequest(false, ip4C), NeighbourQuery},
		{"ARP request, tagged", arpRequest(true, ip4C), NeighbourQuery},
		{"ARP reply", reply, NeighbourAnswer},
		{"neighbour solicitation", ns, NeighbourQuery},
		{"neighbour advertisement", na, NeighbourAnswer},
		{"router solicitation", build(pkt{v6: true, proto: ProtoICMPv6, payload: []byte{133, 0, 0, 0}}), NotNeighbour},
		{"UDP over IPv6", build(pkt{v6: true, proto: ProtoUDP, payload: []byte{135}}), NotNeighbour},
		{"ARP request cut short", arpRequest(false, ip4C)[:30], NotNeighbour},
		{"solicitation without its ICMPv6 header", ns[:EtherHeaderLen+IPv6HeaderLen], NotNeighbour},
	} {
		if got := NeighbourKind(c.b); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
