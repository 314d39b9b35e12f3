package testbed

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/wire"
)

// A flood goes to the testbed's underlay range or loopback, nowhere else.
func TestFloodTargetOnlyTestbed(t *testing.T) {
	for _, ok := range []string{"198.18.0.3:4800", "198.19.255.1:1", "127.0.0.1:4800", "[::1]:4800"} {
		if err := CheckFloodTarget(netip.MustParseAddrPort(ok)); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"198.20.0.1:4800", "198.17.255.255:4800", "8.8.8.8:53", "10.0.0.1:4800", "[2001:db8::1]:4800", "[::ffff:8.8.8.8]:53"} {
		if err := CheckFloodTarget(netip.MustParseAddrPort(bad)); !errors.Is(err, ErrFloodTarget) {
			t.Errorf("%s accepted: %v", bad, err)
		}
	}
	// Flood itself is not called with an outside target here: were its
	// check broken, the test would send there.
}

// The flood's datagrams are what they claim: forged initiations parse and
// name the site, keyed ones also carry a mac1 the target accepts, and
// spoofed ones come from the testbed range.
func TestFloodPackets(t *testing.T) {
	priv, _ := keys.Generate(nil)
	target := netip.MustParseAddrPort("198.18.0.2:4800")
	checker := session.NewCookieChecker(2, priv.Public(), nil)
	for _, kind := range []string{FloodForged, FloodKeyed} {
		pkts, err := floodPackets(FloodOptions{To: target, Kind: kind, As: 7, Key: priv.Public()})
		if err != nil {
			t.Fatal(err)
		}
		var m wire.Handshake
		if err := wire.ParseHandshake(pkts[0], &m); err != nil || m.Sender != 7 {
			t.Fatalf("%s: %v, sender %v", kind, err, m.Sender)
		}
		if got := checker.CheckMAC1(pkts[1]); got != (kind == FloodKeyed) {
			t.Fatalf("%s: mac1 valid %v", kind, got)
		}
	}
	pkts, _ := floodPackets(FloodOptions{To: target, Kind: FloodRandom, Spoof: true})
	for _, p := range pkts[:100] {
		src := netip.AddrFrom4([4]byte(p[12:16]))
		dst := netip.AddrFrom4([4]byte(p[16:20]))
		if !testbedRange.Contains(src) || dst != target.Addr() || p[9] != 17 || int(p[2])<<8|int(p[3]) != len(p) {
			t.Fatalf("spoofed packet from %v to %v", src, dst)
		}
	}
}
