package frame

import (
	"encoding/binary"
	"testing"
)

func TestParseFlowIPv4TCP(t *testing.T) {
	b := build(pkt{vlan: true, proto: ProtoTCP, ipOpts: 8, payload: []byte("data")})
	var f Frame
	var k Flow
	dscp, ok := ParseFlow(b, &f, &k)
	if !ok {
		t.Fatal("a TCP segment is a flow")
	}
	if dscp != 0x10>>2 {
		t.Errorf("DSCP %d, want %d (TOS 0x10)", dscp, 0x10>>2)
	}
	want := Flow{SrcPort: 40000, DstPort: 11211, Proto: ProtoTCP}
	copy(want.Src[:], ip4A)
	copy(want.Dst[:], ip4B)
	if k != want {
		t.Errorf("flow %+v, want %+v", k, want)
	}
}

func TestParseFlowIPv6UDPAfterExtensionHeaders(t *testing.T) {
	ext := []byte{ProtoUDP, 0, 1, 4, 0, 0, 0, 0}
	b := build(pkt{v6: true, proto: ProtoUDP, next: IPv6HopByHop, ext: ext, payload: []byte("x")})
	b[14], b[15] = 0x6b, 0x81 // traffic class 0xb8: DSCP 46 (EF)
	var f Frame
	var k Flow
	dscp, ok := ParseFlow(b, &f, &k)
	if !ok {
		t.Fatal("a UDP datagram after a hop-by-hop header is a flow")
	}
	if dscp != 46 {
		t.Errorf("DSCP %d, want 46", dscp)
	}
	want := Flow{Src: [16]byte(ip6A), Dst: [16]byte(ip6B), SrcPort: 40000, DstPort: 11211, Proto: ProtoUDP, V6: true}
	if k != want {
		t.Errorf("flow %+v, want %+v", k, want)
	}
}

func TestParseFlowRefusesWhatIsNoFlow(t *testing.T) {
	firstFrag := build(pkt{proto: ProtoUDP, flags: IPv4FlagMF, payload: []byte("abcdefgh")})
	laterFrag := build(pkt{proto: ProtoUDP, flags: 3, payload: []byte("abcdefgh")})
	icmp := build(pkt{proto: ProtoICMP, payload: []byte{8, 0, 0, 0, 0, 0, 0, 0}})
	short := build(pkt{proto: 99, payload: []byte{1, 2}})
	short[23] = ProtoTCP // a TCP header of 2 bytes: no room for the ports
	cases := map[string][]byte{
		"first fragment": firstFrag,
		"later fragment": laterFrag,
		"ICMP":           icmp,
		"ARP":            arpRequest(false, ip4C),
		"short ports":    short,
		"truncated":      build(pkt{proto: ProtoTCP})[:30],
	}
	for name, b := range cases {
		var f Frame
		var k Flow
		if _, ok := ParseFlow(b, &f, &k); ok {
			t.Errorf("%s: taken as a flow", name)
		}
	}
}

func TestFlowHashSeparatesDirectionsAndSeeds(t *testing.T) {
	var f Frame
	var a, b Flow
	fr := build(pkt{proto: ProtoTCP})
	ParseFlow(fr, &f, &a)
	b = a
	b.Src, b.Dst, b.SrcPort, b.DstPort = a.Dst, a.Src, a.DstPort, a.SrcPort
	if a.Hash(1) == b.Hash(1) {
		t.Error("the two directions of a connection hash alike")
	}
	if a.Hash(1) == a.Hash(2) {
		t.Error("the seed does not change the hash")
	}
	if a.Hash(7) != a.Hash(7) {
		t.Error("the hash is not a function of key and seed")
	}
}

func TestParseFlowDoesNotAllocate(t *testing.T) {
	b := build(pkt{v6: true, proto: ProtoTCP, payload: make([]byte, 1000)})
	var f Frame
	var k Flow
	if n := testing.AllocsPerRun(100, func() { ParseFlow(b, &f, &k) }); n != 0 {
		t.Errorf("%v allocations per frame", n)
	}
}

// FuzzParseFlow checks that a frame taken as a flow is an unfragmented TCP
// or UDP packet that Parse accepts, whose ports and addresses are those of
// its headers.
func FuzzParseFlow(f *testing.F) {
	f.Add(build(pkt{proto: ProtoTCP, tcpFlags: TCPFlagSYN}))
	f.Add(build(pkt{vlan: true, v6: true, proto: ProtoUDP, payload: []byte("x")}))
	f.Add(build(pkt{v6: true, proto: ProtoTCP, next: IPv6HopByHop, ext: []byte{IPv6Fragment, 0, 1, 4, 0, 0, 0, 0, ProtoTCP, 0, 0, 1, 0, 0, 0, 1}}))
	f.Add(build(pkt{proto: ProtoUDP, flags: IPv4FlagMF}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		var k Flow
		dscp, ok := ParseFlow(b, &fr, &k)
		if !ok {
			return
		}
		var again Frame
		if err := Parse(b, &again); err != nil || again != fr {
			t.Fatalf("a flow whose frame does not parse alike: %v", err)
		}
		if fr.Frag != FragNone || (k.Proto != ProtoTCP && k.Proto != ProtoUDP) || k.Proto != fr.Proto || k.V6 != fr.V6 {
			t.Fatalf("flow %+v of frame %+v", k, fr)
		}
		if dscp > 63 {
			t.Fatalf("DSCP %d", dscp)
		}
		l4 := fr.Upper(b)
		if k.SrcPort != binary.BigEndian.Uint16(l4) || k.DstPort != binary.BigEndian.Uint16(l4[2:]) {
			t.Fatal("ports differ from the upper-layer header")
		}
		src, dst := fr.Addrs(b)
		if string(k.Src[:len(src)]) != string(src) || string(k.Dst[:len(dst)]) != string(dst) {
			t.Fatal("addresses differ from the IP header")
		}
	})
}
