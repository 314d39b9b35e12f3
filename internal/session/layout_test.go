package session

import (
	"testing"

	"github.com/detour-overlay/detour/internal/wire"
)

// TestSealedPacketFillsUnderlayMTU seals, for every path length, a frame
// carrying a host packet of wire.InnerMTU bytes and checks that the outer
// IPv4 and UDP headers and the sealed packet make exactly the underlay
// MTU: wire's overhead is what sealing really adds, no more, no less.
func TestSealedPacketFillsUnderlayMTU(t *testing.T) {
	nodes := mesh(t, 1+wire.MaxPath)
	connectAll(t, t0, nodes)
	const underlay = 1500
	for n := 1; n <= wire.MaxPath; n++ {
		path := make([]wire.SiteID, n)
		for i := range path {
			path[i] = nodes[i+1].Self()
		}
		frame := testFrame(wire.InnerEtherLen + wire.InnerMTU(underlay, n, true, false))
		pkt := dataPacket(t, nodes[0], path, frame)
		if got := wire.OuterIPv4Len + wire.OuterUDPLen + len(pkt); got != underlay {
			t.Errorf("path of %d: %d bytes on the underlay, want %d", n, got, underlay)
		}
		if len(pkt)-len(frame) != wire.DataOverhead(n, true) {
			t.Errorf("path of %d: sealing added %d bytes, DataOverhead says %d", n, len(pkt)-len(frame), wire.DataOverhead(n, true))
		}
	}
}
