package agent

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/detour-overlay/detour/internal/wire"
)

// runBPF runs a classic BPF program as the kernel does on a UDP socket:
// absolute offsets from the UDP header, the IPv4 header at SKF_NET_OFF,
// and rnd as SKF_AD_RANDOM. It supports the instructions the shield uses
// and returns the program's verdict (0: drop).
func runBPF(t *testing.T, prog []unix.SockFilter, ip, udp []byte, rnd uint32) uint32 {
	t.Helper()
	var a uint32
	var mem [16]uint32
	load := func(k uint32, size int) (uint32, bool) {
		off := int32(k)
		var b []byte
		switch {
		case off == skfAdOff+skfAdRandom:
			return rnd, true
		case off >= skfNetOff && off < skfNetOff+0x1000:
			b, off = ip, off-skfNetOff
		default:
			b = udp
		}
		if off < 0 || int(off)+size > len(b) {
			return 0, false
		}
		if size == 1 {
			return uint32(b[off]), true
		}
		return binary.BigEndian.Uint32(b[off:]), true
	}
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case ldB, ldW:
			size := 4
			if in.Code == ldB {
				size = 1
			}
			v, ok := load(in.K, size)
			if !ok {
				return 0 // the kernel drops on an out-of-packet load
			}
			a = v
		case ldMem:
			a = mem[in.K]
		case stMem:
			mem[in.K] = a
		case andK:
			a &= in.K
		case jeqK:
			if a == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case retK:
			return in.K
		default:
			t.Fatalf("instruction %#x not supported by the test", in.Code)
		}
	}
	t.Fatal("program fell off its end")
	return 0
}

// datagram returns the IPv4 header from src and the UDP datagram (header
// and payload) of payload.
func datagram(src netip.Addr, payload []byte) ([]byte, []byte) {
	ip := make([]byte, 20)
	ip[0] = 0x45
	s := src.As4()
	copy(ip[12:], s[:])
	return ip, append(make([]byte, udpHeaderLen), payload...)
}

// The shield drops what cannot be detour's always, and while raised the
// handshakes that do not name a site trusted at their source address, but
// for a random one in shieldSample; data and control always pass.
func TestShieldProgram(t *testing.T) {
	fuji, inagi := wire.SiteID(0x1111), wire.SiteID(0x2222)
	fujiAddr := netip.MustParseAddrPort("198.18.0.1:4800")
	inagiAddr := netip.MustParseAddrPort("198.18.0.2:4800")
	spoofed := netip.MustParseAddr("198.19.77.3")
	pairs := shieldPairs(map[wire.SiteID]netip.AddrPort{fuji: fujiAddr, inagi: inagiAddr})
	init := func(site wire.SiteID) []byte {
		b := make([]byte, wire.HandshakeInitLen)
		wire.PutHandshakeHeader(b, wire.TypeHandshakeInit, site, 9)
		return b
	}
	probe := make([]byte, 24)
	wire.PutCommon(probe, wire.TypeProbe, 0)
	v1init := init(fuji)
	v1init[1] = wire.Version
	random := []byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8}
	cases := []struct {
		name     string
		src      netip.Addr
		pkt      []byte
		down, up bool // accepted with the shield lowered, raised
	}{
		{"random bytes", spoofed, random, false, false},
		{"short", spoofed, []byte{wire.Magic}, false, false},
		{"probe from anywhere", spoofed, probe, true, true},
		{"version 1 initiation", fujiAddr.Addr(), v1init, false, false},
		{"Fujisawa's initiation from Fujisawa", fujiAddr.Addr(), init(fuji), true, true},
		{"Fujisawa's initiation from Inagi", inagiAddr.Addr(), init(fuji), true, false},
		{"Inagi's initiation from Inagi", inagiAddr.Addr(), init(inagi), true, true},
		{"Fujisawa's initiation from a spoofed source", spoofed, init(fuji), true, false},
	}
	for _, c := range cases {
		ip, udp := datagram(c.src, c.pkt)
		for _, raised := range []bool{false, true} {
			want := c.down
			if raised {
				want = c.up
			}
			// A random value that is not a multiple of shieldSample:
			// the sample does not let it through.
			got := runBPF(t, shieldProgram(pairs, raised), ip, udp, 5) != 0
			if got != want {
				t.Errorf("%s, shield raised %v: accepted %v, want %v", c.name, raised, got, want)
			}
		}
	}
	// The sample: one random value in shieldSample lets an untrusted
	// handshake through.
	ip, udp := datagram(spoofed, init(fuji))
	passed := 0
	for r := range uint32(shieldSample * 4) {
		if runBPF(t, shieldProgram(pairs, true), ip, udp, r) != 0 {
			passed++
		}
	}
	if passed != 4 {
		t.Errorf("%d of %d untrusted initiations sampled through, want 4", passed, shieldSample*4)
	}
}
