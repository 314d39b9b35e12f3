package wanem

import (
	"net/netip"
	"testing"
)

func TestIPv6Of(t *testing.T) {
	if got := IPv6Of(netip.MustParseAddr("198.18.0.1")); got != netip.MustParseAddr("fd18::c612:1") {
		t.Fatalf("IPv6Of(198.18.0.1) = %v", got)
	}
	e := &Emulator{byAddr: map[netip.Addr]int{IPv6Of(netip.MustParseAddr("198.18.0.2")): 1}}
	pkt := make([]byte, 60)
	pkt[0] = 6 << 4
	dst := IPv6Of(netip.MustParseAddr("198.18.0.2")).As16()
	copy(pkt[24:], dst[:])
	if got := e.destination(pkt); got != 1 {
		t.Errorf("destination of an IPv6 packet to fd18::c612:2 = %d, want 1", got)
	}
	if got := e.destination(pkt[:39]); got != -1 {
		t.Errorf("a truncated IPv6 header has destination %d", got)
	}
}
