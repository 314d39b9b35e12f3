package agent

import (
	"testing"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/edge"
)

// TestInnerMTUIsUnderlayLessWireOverhead checks the inner MTU and the MSS
// clamp the agent derives from the underlay MTU: the underlay MTU less the
// outer IP (20 or 40) and UDP (8) headers, the data header for max_hops
// sites (20 + 4n), with encryption the e2e fields (12), the hop fields
// with their tag (28, when paths may have relays) and the e2e tag (16),
// and the inner Ethernet header (14); then less 40 (IPv4 and TCP) or 60
// (IPv6 and TCP) for the MSS.
func TestInnerMTUIsUnderlayLessWireOverhead(t *testing.T) {
	cases := []struct {
		listen  string
		maxHops int
		sealed  bool
		mtu     int
	}{
		{"198.18.0.1:4789", 3, true, 1500 - 20 - 8 - (20 + 12) - 12 - 28 - 16 - 14},
		{"198.18.0.1:4789", 1, true, 1500 - 20 - 8 - (20 + 4) - 12 - 16 - 14},
		{"198.18.0.1:4789", 3, false, 1500 - 20 - 8 - (20 + 12) - 14},
		{"[fd00::1]:4789", 3, true, 1500 - 40 - 8 - (20 + 12) - 12 - 28 - 16 - 14},
		{"[::ffff:198.18.0.1]:4789", 2, true, 1500 - 20 - 8 - (20 + 8) - 12 - 28 - 16 - 14},
	}
	for _, c := range cases {
		a := &Agent{cfg: &config.Agent{Listen: c.listen, MaxHops: c.maxHops}}
		if c.sealed {
			a.sec = &secure{}
		}
		if got := a.innerMTU(1500); got != c.mtu {
			t.Errorf("%s, max_hops %d, sealed %v: inner MTU %d, want %d", c.listen, c.maxHops, c.sealed, got, c.mtu)
		}
		v4, v6 := edge.MSSForMTU(a.innerMTU(1500))
		if int(v4) != c.mtu-20-20 || int(v6) != c.mtu-40-20 {
			t.Errorf("%s, max_hops %d, sealed %v: MSS %d/%d, want %d/%d", c.listen, c.maxHops, c.sealed, v4, v6, c.mtu-40, c.mtu-60)
		}
	}
}
