package edge

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
)

// Addresses of the frames built by the tests: the host sending too big a
// segment, and the peer it sends to (or its router).
var (
	hostMAC  = []byte{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}
	peerMAC  = []byte{0x02, 0x00, 0x5e, 0x10, 0x00, 0x02}
	hostIPv4 = []byte{198, 19, 1, 1}
	peerIPv4 = []byte{198, 19, 3, 1}
	hostIPv6 = []byte{0xfd, 0, 0, 0x13, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	peerIPv6 = []byte{0xfd, 0, 0, 0x13, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	vlanTag  = []byte{0x81, 0x00, 0xa0, 0x2a} // PCP 5, VID 42
)

// onesComplement computes the Internet checksum (RFC 1071) of the
// concatenation of parts byte by byte, independently of sum16 and fold:
// a byte at an even position of the stream is a word's high byte.
func onesComplement(parts ...[]byte) uint16 {
	var sum uint64
	pos := 0
	for _, p := range parts {
		for _, b := range p {
			if pos%2 == 0 {
				sum += uint64(b) << 8
			} else {
				sum += uint64(b)
			}
			pos++
		}
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// ipv6Pseudo returns the IPv6 pseudo header for an upper-layer message.
func ipv6Pseudo(src, dst []byte, length int, next byte) []byte {
	p := make([]byte, 0, 40)
	p = append(p, src...)
	p = append(p, dst...)
	p = binary.BigEndian.AppendUint32(p, uint32(length))
	return append(p, 0, 0, 0, next)
}

// ethernet returns an Ethernet header from the host to the peer, tagged
// if vlan is set.
func ethernet(vlan bool, etype uint16) []byte {
	h := append(append([]byte(nil), peerMAC...), hostMAC...)
	if vlan {
		h = append(h, vlanTag...)
	}
	return binary.BigEndian.AppendUint16(h, etype)
}

// tcpSegment returns a TCP segment of n bytes (n >= 20) with a patterned
// payload, a recognisable sequence number and its checksum computed over
// pseudo.
func tcpSegment(n int, pseudo []byte) []byte {
	t := make([]byte, n)
	binary.BigEndian.PutUint16(t[0:], 40000)
	binary.BigEndian.PutUint16(t[2:], 5201)
	binary.BigEndian.PutUint32(t[4:], 0x11223344)
	binary.BigEndian.PutUint32(t[8:], 0x55667788)
	t[12], t[13] = 5<<4, 0x18 // PSH, ACK
	binary.BigEndian.PutUint16(t[14:], 64240)
	for i := 20; i < n; i++ {
		t[i] = byte(i * 7)
	}
	binary.BigEndian.PutUint16(t[16:], onesComplement(pseudo, t))
	return t
}

// v4Packet describes an IPv4 packet for ipv4Frame.
type v4Packet struct {
	vlan    bool
	total   int    // IP total length
	flags   uint16 // flags and fragment offset
	proto   byte
	options int // bytes of IP options, a multiple of 4
	src     []byte
	dst     []byte
}

// ipv4Frame builds an Ethernet frame carrying p, with valid checksums.
func ipv4Frame(p v4Packet) []byte {
	if p.src == nil {
		p.src, p.dst = hostIPv4, peerIPv4
	}
	hl := 20 + p.options
	ip := make([]byte, hl)
	ip[0], ip[1] = 0x40|byte(hl/4), 0x10
	binary.BigEndian.PutUint16(ip[2:], uint16(p.total))
	binary.BigEndian.PutUint16(ip[4:], 0xbeef)
	binary.BigEndian.PutUint16(ip[6:], p.flags)
	ip[8], ip[9] = 63, p.proto
	copy(ip[12:], p.src)
	copy(ip[16:], p.dst)
	for i := 20; i < hl; i++ {
		ip[i] = 1 // NOP options
	}
	binary.BigEndian.PutUint16(ip[10:], onesComplement(ip))
	var payload []byte
	if p.proto == protoTCP {
		pseudo := append(append(append([]byte(nil), p.src...), p.dst...), 0, protoTCP, 0, 0)
		binary.BigEndian.PutUint16(pseudo[10:], uint16(p.total-hl))
		payload = tcpSegment(p.total-hl, pseudo)
	} else {
		payload = bytes.Repeat([]byte{0x5a}, p.total-hl)
	}
	return append(append(ethernet(p.vlan, etherTypeIPv4), ip...), payload...)
}

// tcpV4 is a full-sized IPv4 TCP segment with DF set.
func tcpV4(vlan bool) v4Packet {
	return v4Packet{vlan: vlan, total: 1500, flags: ipv4FlagDF, proto: protoTCP}
}

// v6Packet describes an IPv6 packet for ipv6Frame.
type v6Packet struct {
	vlan  bool
	total int    // IP length: 40 + payload length
	ext   []byte // extension headers, the first byte of each filled in
	next  []byte // next header values: of the fixed header, then of each extension
	src   []byte
	dst   []byte
}

// ipv6Frame builds an Ethernet frame carrying p. ext holds the extension
// headers already encoded; next[0] is the fixed header's next header.
func ipv6Frame(p v6Packet) []byte {
	if p.src == nil {
		p.src, p.dst = hostIPv6, peerIPv6
	}
	if p.next == nil {
		p.next = []byte{protoTCP}
	}
	ip := make([]byte, 40)
	ip[0], ip[1], ip[2], ip[3] = 0x60, 0x01, 0x23, 0x45
	binary.BigEndian.PutUint16(ip[4:], uint16(p.total-40))
	ip[6], ip[7] = p.next[0], 63
	copy(ip[8:], p.src)
	copy(ip[24:], p.dst)
	n := p.total - 40 - len(p.ext)
	last := p.next[len(p.next)-1]
	var payload []byte
	if last == protoTCP {
		payload = tcpSegment(n, ipv6Pseudo(p.src, p.dst, n, protoTCP))
	} else {
		payload = bytes.Repeat([]byte{0xa5}, n)
	}
	return append(append(append(ethernet(p.vlan, etherTypeIPv6), ip...), p.ext...), payload...)
}

// tcpV6 is a full-sized IPv6 TCP segment.
func tcpV6(vlan bool) v6Packet {
	return v6Packet{vlan: vlan, total: 1500}
}

// checkLink checks the Ethernet header of an answer and returns the
// offset of its IP header.
func checkLink(t *testing.T, ans []byte, vlan bool, etype uint16) int {
	t.Helper()
	if !bytes.Equal(ans[0:6], hostMAC) || !bytes.Equal(ans[6:12], peerMAC) {
		t.Errorf("Ethernet dst %x src %x, want %x %x", ans[0:6], ans[6:12], hostMAC, peerMAC)
	}
	l3 := 14
	if vlan {
		if !bytes.Equal(ans[12:16], vlanTag) {
			t.Errorf("VLAN tag %x, want %x", ans[12:16], vlanTag)
		}
		l3 = 18
	}
	if got := binary.BigEndian.Uint16(ans[l3-2:]); got != etype {
		t.Errorf("EtherType %#04x, want %#04x", got, etype)
	}
	return l3
}

// checkIPv4Answer checks an IPv4 "fragmentation needed" answer to frame.
func checkIPv4Answer(t *testing.T, frame, ans []byte, vlan bool, mtu int) {
	t.Helper()
	l3 := checkLink(t, ans, vlan, etherTypeIPv4)
	orig := frame[l3:]
	quote := orig[:int(orig[0]&0x0f)*4+8]
	ip := ans[l3:]
	if len(ip) != 20+8+len(quote) {
		t.Fatalf("IP packet of %d bytes, want %d", len(ip), 20+8+len(quote))
	}
	if ip[0] != 0x45 || int(binary.BigEndian.Uint16(ip[2:])) != len(ip) {
		t.Errorf("version/IHL %#x, total length %d", ip[0], binary.BigEndian.Uint16(ip[2:]))
	}
	if ip[8] != 64 || ip[9] != 1 {
		t.Errorf("TTL %d protocol %d, want 64 1", ip[8], ip[9])
	}
	if f := binary.BigEndian.Uint16(ip[6:]); f != ipv4FlagDF {
		t.Errorf("flags/offset %#04x, want DF only", f)
	}
	if !bytes.Equal(ip[12:16], orig[16:20]) || !bytes.Equal(ip[16:20], orig[12:16]) {
		t.Errorf("IP src %v dst %v, want %v %v", ip[12:16], ip[16:20], orig[16:20], orig[12:16])
	}
	if onesComplement(ip[:20]) != 0 {
		t.Errorf("IPv4 header checksum %#04x is wrong", binary.BigEndian.Uint16(ip[10:]))
	}
	icmp := ip[20:]
	if icmp[0] != 3 || icmp[1] != 4 {
		t.Errorf("ICMP type %d code %d, want 3 4", icmp[0], icmp[1])
	}
	if u := binary.BigEndian.Uint16(icmp[4:]); u != 0 {
		t.Errorf("unused field %#04x, want 0", u)
	}
	if got := int(binary.BigEndian.Uint16(icmp[6:])); got != mtu {
		t.Errorf("next-hop MTU %d, want %d", got, mtu)
	}
	if onesComplement(icmp) != 0 {
		t.Errorf("ICMP checksum %#04x is wrong", binary.BigEndian.Uint16(icmp[2:]))
	}
	if !bytes.Equal(icmp[8:], quote) {
		t.Errorf("quoted %x, want %x", icmp[8:], quote)
	}
}

// checkIPv6Answer checks an ICMPv6 "packet too big" answer to frame.
func checkIPv6Answer(t *testing.T, frame, ans []byte, vlan bool, mtu int) {
	t.Helper()
	l3 := checkLink(t, ans, vlan, etherTypeIPv6)
	orig := frame[l3 : l3+40+int(binary.BigEndian.Uint16(frame[l3+4:]))]
	quote := orig[:min(len(orig), 1280-48)]
	ip := ans[l3:]
	if len(ip) != 48+len(quote) || len(ip) > 1280 {
		t.Fatalf("IPv6 packet of %d bytes, want %d (at most 1280)", len(ip), 48+len(quote))
	}
	if !bytes.Equal(ip[0:4], []byte{0x60, 0, 0, 0}) {
		t.Errorf("version/class/flow %x", ip[0:4])
	}
	if int(binary.BigEndian.Uint16(ip[4:])) != len(ip)-40 || ip[6] != 58 || ip[7] != 64 {
		t.Errorf("payload length %d next header %d hop limit %d", binary.BigEndian.Uint16(ip[4:]), ip[6], ip[7])
	}
	if !bytes.Equal(ip[8:24], orig[24:40]) || !bytes.Equal(ip[24:40], orig[8:24]) {
		t.Errorf("IP src %x dst %x, want %x %x", ip[8:24], ip[24:40], orig[24:40], orig[8:24])
	}
	icmp := ip[40:]
	if icmp[0] != 2 || icmp[1] != 0 {
		t.Errorf("ICMPv6 type %d code %d, want 2 0", icmp[0], icmp[1])
	}
	if got := int(binary.BigEndian.Uint32(icmp[4:])); got != mtu {
		t.Errorf("MTU %d, want %d", got, mtu)
	}
	if onesComplement(ipv6Pseudo(ip[8:24], ip[24:40], len(icmp), 58), icmp) != 0 {
		t.Errorf("ICMPv6 checksum %#04x is wrong", binary.BigEndian.Uint16(icmp[2:]))
	}
	if !bytes.Equal(icmp[8:], quote) {
		t.Errorf("quoted bytes differ from the original packet's first %d", len(quote))
	}
}

func TestTooBigIPv4(t *testing.T) {
	cases := []struct {
		name string
		p    v4Packet
		mtu  int
	}{
		{"plain", tcpV4(false), 1400},
		{"vlan", tcpV4(true), 1400},
		{"one byte over", tcpV4(false), 1499},
		{"minimum mtu", tcpV4(false), 68},
		{"ip options", v4Packet{total: 1500, flags: ipv4FlagDF, proto: protoTCP, options: 40}, 1400},
		{"odd length", v4Packet{vlan: true, total: 1433, flags: ipv4FlagDF, proto: protoTCP, options: 4}, 1280},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frame := ipv4Frame(c.p)
			out := make([]byte, 1600)
			n := TooBig(frame, c.mtu, out)
			if n == 0 {
				t.Fatal("no answer")
			}
			checkIPv4Answer(t, frame, out[:n], c.p.vlan, c.mtu)
		})
	}
}

func TestTooBigIPv6(t *testing.T) {
	// A destination options header of 8 bytes (PadN) before TCP.
	destOpts := []byte{protoTCP, 0, 1, 4, 0, 0, 0, 0}
	// A hop-by-hop header of 16 bytes, then the destination options. Its
	// option (type 0x1e, skipped if unknown) is filled with 17 so that a
	// parser misreading the header length would find UDP.
	hopByHop := []byte{ipv6DestOpts, 1, 0x1e, 12, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17}
	cases := []struct {
		name string
		p    v6Packet
		mtu  int
	}{
		{"plain", tcpV6(false), 1400},
		{"vlan", tcpV6(true), 1400},
		{"minimum mtu", tcpV6(false), 1280},
		{"one byte over", v6Packet{total: 1281}, 1280},
		{"jumbo-sized", v6Packet{vlan: true, total: 9000}, 1400},
		{"extension headers", v6Packet{total: 1500, ext: append(append([]byte(nil), hopByHop...), destOpts...),
			next: []byte{ipv6HopByHop, ipv6DestOpts, protoTCP}}, 1400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frame := ipv6Frame(c.p)
			out := make([]byte, 1600)
			n := TooBig(frame, c.mtu, out)
			if n == 0 {
				t.Fatal("no answer")
			}
			checkIPv6Answer(t, frame, out[:n], c.p.vlan, c.mtu)
		})
	}
}

// TestTooBigWithPadding checks that Ethernet padding or trailing bytes
// after the IP packet are neither quoted nor a reason to refuse.
func TestTooBigWithPadding(t *testing.T) {
	out := make([]byte, 1600)
	f4 := append(ipv4Frame(tcpV4(false)), 0xee, 0xee)
	n := TooBig(f4, 1400, out)
	if n == 0 {
		t.Fatal("IPv4: no answer")
	}
	checkIPv4Answer(t, f4, out[:n], false, 1400)

	f6 := append(ipv6Frame(v6Packet{total: 1290}), 0xee, 0xee)
	n = TooBig(f6, 1280, out)
	if n == 0 {
		t.Fatal("IPv6: no answer")
	}
	checkIPv6Answer(t, f6, out[:n], false, 1280)
}

func TestTooBigIgnores(t *testing.T) {
	set := func(f []byte, off int, b ...byte) []byte {
		copy(f[off:], b)
		return f
	}
	v4 := func(p v4Packet) []byte { return ipv4Frame(p) }
	fragHeader := []byte{protoTCP, 0, 0, 0, 0, 0, 0, 1}
	cases := []struct {
		name  string
		frame []byte
		mtu   int
	}{
		{"IPv4 fits", v4(tcpV4(false)), 1500},
		{"IPv4 small", v4(v4Packet{total: 576, flags: ipv4FlagDF, proto: protoTCP}), 1400},
		{"IPv4 DF clear", v4(v4Packet{total: 1500, proto: protoTCP}), 1400},
		{"IPv4 first fragment", v4(v4Packet{total: 1500, flags: ipv4FlagDF | ipv4FlagMF, proto: protoTCP}), 1400},
		{"IPv4 later fragment", v4(v4Packet{total: 1500, flags: ipv4FlagDF | 185, proto: protoTCP}), 1400},
		{"IPv4 UDP", v4(v4Packet{total: 1500, flags: ipv4FlagDF, proto: 17}), 1400},
		{"IPv4 ICMP", v4(v4Packet{total: 1500, flags: ipv4FlagDF, proto: protoICMP}), 1400},
		{"IPv4 mtu below 68", v4(tcpV4(false)), 67},
		{"IPv4 negative mtu", v4(tcpV4(false)), -1},
		{"IPv4 from 0.0.0.0", v4(v4Packet{total: 1500, flags: ipv4FlagDF, proto: protoTCP, src: []byte{0, 0, 0, 0}, dst: peerIPv4}), 1400},
		{"IPv4 to multicast", v4(v4Packet{total: 1500, flags: ipv4FlagDF, proto: protoTCP, src: hostIPv4, dst: []byte{224, 0, 0, 9}}), 1400},
		{"IPv4 to broadcast", v4(v4Packet{total: 1500, flags: ipv4FlagDF, proto: protoTCP, src: hostIPv4, dst: []byte{255, 255, 255, 255}}), 1400},
		{"IPv4 IHL below 5", set(v4(tcpV4(false)), 14, 0x44), 1400},
		{"IPv4 total below IHL", set(v4(tcpV4(false)), 16, 0, 19), 1},
		{"IPv4 total beyond frame", set(v4(tcpV4(false)), 16, 0x05, 0xdd), 1400},
		{"version 6 in IPv4 EtherType", set(v4(tcpV4(false)), 14, 0x65), 1400},
		{"Ethernet broadcast destination", set(v4(tcpV4(false)), 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), 1400},
		{"Ethernet multicast source", set(v4(tcpV4(false)), 6, 0x01), 1400},
		{"ARP", set(v4(tcpV4(false)), 12, 0x08, 0x06), 1400},
		{"QinQ outer tag", set(v4(tcpV4(true)), 12, 0x88, 0xa8), 1400},
		{"IPv6 fits", ipv6Frame(tcpV6(false)), 1500},
		{"IPv6 small", ipv6Frame(v6Packet{total: 1280}), 1280},
		{"IPv6 UDP", ipv6Frame(v6Packet{total: 1500, next: []byte{17}}), 1400},
		{"IPv6 ICMPv6", ipv6Frame(v6Packet{total: 1500, next: []byte{protoICMPv6}}), 1400},
		{"IPv6 fragment", ipv6Frame(v6Packet{total: 1500, ext: fragHeader, next: []byte{44, protoTCP}}), 1400},
		{"IPv6 mtu below 1280", ipv6Frame(tcpV6(false)), 1279},
		{"IPv6 from ::", ipv6Frame(v6Packet{total: 1500, src: make([]byte, 16), dst: peerIPv6}), 1400},
		{"IPv6 from ::1", ipv6Frame(v6Packet{total: 1500, src: append(make([]byte, 15), 1), dst: peerIPv6}), 1400},
		{"IPv6 to multicast", ipv6Frame(v6Packet{total: 1500, src: hostIPv6, dst: append([]byte{0xff, 0x02}, make([]byte, 14)...)}), 1400},
		{"IPv6 extension header beyond packet", set(ipv6Frame(v6Packet{total: 1500, next: []byte{ipv6DestOpts}}), 55, 0xff), 1400},
		{"IPv6 jumbogram", set(ipv6Frame(tcpV6(false)), 18, 0, 0), 1280},
		{"version 4 in IPv6 EtherType", set(ipv6Frame(tcpV6(false)), 14, 0x45), 1400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := bytes.Repeat([]byte{0xaa}, 1600)
			if n := TooBig(c.frame, c.mtu, out); n != 0 {
				t.Fatalf("answered with %d bytes", n)
			}
			if !bytes.Equal(out, bytes.Repeat([]byte{0xaa}, 1600)) {
				t.Error("out was written although there is no answer")
			}
		})
	}
}

// TestTooBigTruncated checks every prefix of answerable frames: none that
// lacks part of the IP packet gets an answer.
func TestTooBigTruncated(t *testing.T) {
	out := make([]byte, 1600)
	for _, f := range [][]byte{ipv4Frame(tcpV4(false)), ipv4Frame(tcpV4(true)), ipv6Frame(tcpV6(false)), ipv6Frame(tcpV6(true))} {
		for i := range len(f) {
			if n := TooBig(f[:i], 1400, out); n != 0 {
				t.Fatalf("frame of %d bytes cut to %d answered with %d bytes", len(f), i, n)
			}
		}
		if TooBig(f, 1400, out) == 0 {
			t.Fatalf("whole frame of %d bytes not answered", len(f))
		}
	}
}

// TestTooBigSmallOut checks that an out one byte too short gives no answer
// and is left alone, and that an exact fit works.
func TestTooBigSmallOut(t *testing.T) {
	for _, f := range [][]byte{ipv4Frame(tcpV4(true)), ipv6Frame(tcpV6(true))} {
		need := TooBig(f, 1400, make([]byte, 1600))
		short := make([]byte, need-1)
		if n := TooBig(f, 1400, short); n != 0 || !bytes.Equal(short, make([]byte, need-1)) {
			t.Errorf("out of %d bytes for a %d-byte answer: got %d", need-1, need, n)
		}
		if n := TooBig(f, 1400, make([]byte, need)); n != need {
			t.Errorf("exact out: got %d, want %d", n, need)
		}
		if n := TooBig(f, 1400, nil); n != 0 {
			t.Errorf("nil out: got %d", n)
		}
	}
}

// TestTooBigAnswersAreNotAnswered checks that an answer fed back to
// TooBig (an ICMP packet) gets no answer of its own.
func TestTooBigAnswersAreNotAnswered(t *testing.T) {
	out := make([]byte, 1600)
	for _, f := range [][]byte{ipv4Frame(tcpV4(false)), ipv6Frame(tcpV6(true))} {
		n := TooBig(f, 1280, out)
		if n == 0 {
			t.Fatal("no answer")
		}
		if TooBig(out[:n], 68, make([]byte, 1600)) != 0 {
			t.Error("an ICMP answer was itself answered")
		}
	}
}

func TestTooBigAllocatesNothing(t *testing.T) {
	f4, f6 := ipv4Frame(tcpV4(true)), ipv6Frame(tcpV6(false))
	out := make([]byte, 1600)
	if a := testing.AllocsPerRun(100, func() {
		TooBig(f4, 1400, out)
		TooBig(f6, 1400, out)
	}); a != 0 {
		t.Errorf("%v allocations per run", a)
	}
}

func FuzzTooBig(f *testing.F) {
	f.Add(ipv4Frame(tcpV4(false)), uint16(1400), uint16(1600))
	f.Add(ipv4Frame(tcpV4(true)), uint16(68), uint16(200))
	f.Add(ipv4Frame(v4Packet{total: 300, flags: ipv4FlagDF, proto: protoTCP, options: 40}), uint16(100), uint16(200))
	f.Add(ipv6Frame(tcpV6(false)), uint16(1280), uint16(1600))
	f.Add(ipv6Frame(tcpV6(true)), uint16(1400), uint16(1000))
	f.Add(ipv6Frame(v6Packet{total: 1500, ext: []byte{protoTCP, 0, 1, 4, 0, 0, 0, 0}, next: []byte{ipv6DestOpts, protoTCP}}), uint16(1300), uint16(1400))
	f.Add([]byte{}, uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, frame []byte, mtu, outLen uint16) {
		in := append([]byte(nil), frame...)
		out := make([]byte, outLen)
		n := TooBig(frame, int(mtu), out)
		if !bytes.Equal(in, frame) {
			t.Fatal("the frame was modified")
		}
		if n == 0 {
			return
		}
		if n > len(out) || n < 14+20+8+28 {
			t.Fatalf("answer of %d bytes in an out of %d", n, len(out))
		}
		checkFuzzAnswer(t, frame, out[:n], int(mtu))
	})
}

// checkFuzzAnswer checks the invariants of any answer: swapped Ethernet
// addresses, the original tag, valid checksums and an ICMP error that
// itself gets no answer.
func checkFuzzAnswer(t *testing.T, frame, ans []byte, mtu int) {
	if !bytes.Equal(ans[0:6], frame[6:12]) || !bytes.Equal(ans[6:12], frame[0:6]) {
		t.Fatal("Ethernet addresses not swapped")
	}
	l3 := 14
	if binary.BigEndian.Uint16(frame[12:]) == etherTypeVLAN {
		l3 = 18
	}
	if !bytes.Equal(ans[12:l3], frame[12:l3]) {
		t.Fatal("link header changed")
	}
	ip := ans[l3:]
	switch binary.BigEndian.Uint16(ans[l3-2:]) {
	case etherTypeIPv4:
		if onesComplement(ip[:20]) != 0 || onesComplement(ip[20:]) != 0 || ip[20] != 3 || ip[21] != 4 {
			t.Fatal("bad IPv4 answer")
		}
	case etherTypeIPv6:
		if len(ip) > 1280 || onesComplement(ipv6Pseudo(ip[8:24], ip[24:40], len(ip)-40, 58), ip[40:]) != 0 || ip[40] != 2 {
			t.Fatal("bad IPv6 answer")
		}
	default:
		t.Fatal("answer is neither IPv4 nor IPv6")
	}
	if TooBig(ans, 0, make([]byte, 2000)) != 0 || TooBig(ans, mtu, make([]byte, 2000)) != 0 {
		t.Fatal("the answer is itself answered")
	}
}

func BenchmarkTooBig(b *testing.B) {
	out := make([]byte, 1600)
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"IPv4", ipv4Frame(tcpV4(false))},
		{"IPv4VLAN", ipv4Frame(tcpV4(true))},
		{"IPv6", ipv6Frame(tcpV6(false))},
		{"fits", ipv4Frame(v4Packet{total: 1400, flags: ipv4FlagDF, proto: protoTCP})},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				TooBig(c.frame, 1400, out)
			}
		})
	}
}

// Linux constants of the kernel-level test, named here so that the test
// file builds on every platform (the test itself skips outside Linux).
const (
	linuxTUNSETIFF = 0x400454ca
	linuxIFFTAP    = 0x0002
	linuxIFFNoPI   = 0x1000
	linuxIPMTU     = 14 // IP_MTU
	linuxIPv6MTU   = 24 // IPV6_MTU
	linuxTestPort  = 5201
)

// TestTooBigLinux checks, as root, that Linux acts on the answers. A TCP
// client in a network namespace reaches its peer through a TAP device that
// the test serves, as detour does: the test plays the peer's side of the
// handshake (announcing an MSS for 1500-byte packets), answers the first
// oversized segment with TooBig and expects the client's path MTU to drop
// to the announced MTU and its next segment to fit.
func TestTooBigLinux(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command")
	}
	ns := fmt.Sprintf("edgeicmp%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a namespace: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })

	const dev = "dticmp0"
	var tap *os.File
	if err := inNetns(ns, func() (err error) { tap, err = openTAP(dev); return err }); err != nil {
		t.Skipf("cannot open a TAP: %v", err)
	}
	defer tap.Close()
	setup := []string{
		"link set lo up", "link set " + dev + " up",
		"addr add 10.213.0.1/24 dev " + dev, "addr add fd00:213::1/64 dev " + dev + " nodad",
		"neigh add 10.213.0.2 lladdr 02:00:5e:10:00:02 dev " + dev + " nud permanent",
		"neigh add fd00:213::2 lladdr 02:00:5e:10:00:02 dev " + dev + " nud permanent",
	}
	cmd := exec.Command("ip", "-n", ns, "-b", "-")
	cmd.Stdin = strings.NewReader(strings.Join(setup, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -b: %v %s", err, out)
	}
	for _, c := range []struct {
		network, addr string
		mss, mtu      int
		level, opt    int
	}{
		{"tcp4", "10.213.0.2", 1460, 1400, syscall.IPPROTO_IP, linuxIPMTU},
		{"tcp6", "fd00:213::2", 1440, 1380, syscall.IPPROTO_IPV6, linuxIPv6MTU},
	} {
		t.Run(c.network, func(t *testing.T) {
			conn := handshake(t, tap, ns, c.network, net.JoinHostPort(c.addr, fmt.Sprint(linuxTestPort)), c.mss)
			defer conn.Close()
			go conn.Write(make([]byte, 3*c.mss))
			out := make([]byte, 1600)
			n := 0
			frame := readTAP(t, tap, func(f []byte) bool { n = TooBig(f, c.mtu, out); return n > 0 })
			if _, err := tap.Write(out[:n]); err != nil {
				t.Fatal(err)
			}
			t.Logf("answered a %d-byte frame with a %d-byte frame", len(frame), n)
			if got := pathMTU(t, conn, c.level, c.opt); got != c.mtu {
				t.Errorf("path MTU %d, want %d", got, c.mtu)
			}
			// Segments sent before the answer may still be queued; the
			// client's retransmission must then come cut to the new MTU.
			fit := readTAP(t, tap, func(f []byte) bool { return tcpPayload(f) > 0 && ipLength(f) <= c.mtu })
			t.Logf("then sent a segment of IP length %d", ipLength(fit))
		})
	}
}

// inNetns runs f on a thread in network namespace ns. The thread is never
// unlocked, so it ends with the goroutine instead of going back to the
// pool in the wrong namespace. Sockets f opens stay in ns.
func inNetns(ns string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		if err == nil {
			err = f()
		}
		done <- err
	}()
	return <-done
}

// openTAP creates a TAP device without packet information and returns it
// with reads that honour deadlines.
func openTAP(name string) (*os.File, error) {
	fd, err := syscall.Open("/dev/net/tun", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var ifr [40]byte
	copy(ifr[:15], name)
	binary.NativeEndian.PutUint16(ifr[16:], linuxIFFTAP|linuxIFFNoPI)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), linuxTUNSETIFF, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		syscall.Close(fd)
		return nil, e
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// readTAP returns a copy of the first frame from tap that match accepts,
// failing the test after 5 seconds.
func readTAP(t *testing.T, tap *os.File, match func([]byte) bool) []byte {
	t.Helper()
	buf := make([]byte, 65536)
	tap.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		n, err := tap.Read(buf)
		if err != nil {
			t.Fatalf("reading the TAP: %v", err)
		}
		if match(buf[:n]) {
			return append([]byte(nil), buf[:n]...)
		}
	}
}

// handshake dials addr from namespace ns and answers the client's SYN from
// the TAP with a SYN-ACK announcing mss, returning the client's
// connection.
func handshake(t *testing.T, tap *os.File, ns, network, addr string, mss int) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	dialed := make(chan result, 1)
	go func() {
		var c net.Conn
		err := inNetns(ns, func() (err error) { c, err = net.DialTimeout(network, addr, 5*time.Second); return err })
		dialed <- result{c, err}
	}()
	syn := readTAP(t, tap, func(f []byte) bool { return tcpFlags(f) == tcpFlagSYN })
	if _, err := tap.Write(synAck(syn, mss)); err != nil {
		t.Fatal(err)
	}
	r := <-dialed
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.c
}

// tcpOffset returns the offset of the TCP header to the test port in an
// untagged frame, or 0.
func tcpOffset(f []byte) int {
	off := 0
	switch {
	case len(f) >= 34 && binary.BigEndian.Uint16(f[12:]) == etherTypeIPv4 && f[23] == protoTCP:
		off = 14 + int(f[14]&0x0f)*4
	case len(f) >= 54 && binary.BigEndian.Uint16(f[12:]) == etherTypeIPv6 && f[20] == protoTCP:
		off = 54
	}
	if off == 0 || len(f) < off+20 || binary.BigEndian.Uint16(f[off+2:]) != linuxTestPort {
		return 0
	}
	return off
}

// tcpFlags returns the TCP flags of a frame to the test port, or 0.
func tcpFlags(f []byte) byte {
	if off := tcpOffset(f); off > 0 {
		return f[off+13]
	}
	return 0
}

// tcpPayload returns the TCP payload length of a frame to the test port.
func tcpPayload(f []byte) int {
	off := tcpOffset(f)
	if off == 0 {
		return 0
	}
	return 14 + ipLength(f) - off - int(f[off+12]>>4)*4
}

// ipLength returns the IP length of an untagged IPv4 or IPv6 frame.
func ipLength(f []byte) int {
	if binary.BigEndian.Uint16(f[12:]) == etherTypeIPv4 {
		return int(binary.BigEndian.Uint16(f[16:]))
	}
	return 40 + int(binary.BigEndian.Uint16(f[18:]))
}

// synAck builds the peer's answer to syn, announcing mss.
func synAck(syn []byte, mss int) []byte {
	off := tcpOffset(syn)
	tcp := make([]byte, 24)
	copy(tcp[0:2], syn[off+2:off+4])
	copy(tcp[2:4], syn[off:off+2])
	binary.BigEndian.PutUint32(tcp[4:], 0x10000000)
	binary.BigEndian.PutUint32(tcp[8:], binary.BigEndian.Uint32(syn[off+4:])+1)
	tcp[12], tcp[13] = 6<<4, tcpFlagSYN|0x10
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	tcp[20], tcp[21] = tcpOptMSS, 4
	binary.BigEndian.PutUint16(tcp[22:], uint16(mss))
	eth := append(append(append([]byte(nil), syn[6:12]...), peerMAC...), syn[12:14]...)
	var ip, pseudo []byte
	if binary.BigEndian.Uint16(syn[12:]) == etherTypeIPv4 {
		ip = make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], 20+24)
		ip[8], ip[9] = 64, protoTCP
		copy(ip[12:16], syn[30:34])
		copy(ip[16:20], syn[26:30])
		binary.BigEndian.PutUint16(ip[10:], onesComplement(ip))
		pseudo = append(append(append([]byte(nil), ip[12:20]...), 0, protoTCP), 0, 24)
	} else {
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], 24)
		ip[6], ip[7] = protoTCP, 64
		copy(ip[8:24], syn[38:54])
		copy(ip[24:40], syn[22:38])
		pseudo = ipv6Pseudo(ip[8:24], ip[24:40], 24, protoTCP)
	}
	binary.BigEndian.PutUint16(tcp[16:], onesComplement(pseudo, tcp))
	return append(append(eth, ip...), tcp...)
}

// pathMTU waits up to 2 seconds for the path MTU of conn, read with
// getsockopt(level, opt), to settle, and returns it.
func pathMTU(t *testing.T, conn net.Conn, level, opt int) int {
	t.Helper()
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var mtu int
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		rc.Control(func(fd uintptr) { mtu, err = syscall.GetsockoptInt(int(fd), level, opt) })
		if err != nil {
			t.Fatal(err)
		}
		if mtu < 1500 {
			break
		}
	}
	return mtu
}
