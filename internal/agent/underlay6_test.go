package agent

import (
	"testing"

	"github.com/detour-overlay/detour/internal/config"
)

func TestUnderlayIPv6(t *testing.T) {
	for _, c := range []struct {
		listen, advertise, peer string
		want                    bool
	}{
		{"198.18.0.1:4789", "", "198.18.0.2:4789", false},
		{"[fd00::1]:4789", "", "198.18.0.2:4789", true},
		{"0.0.0.0:4789", "198.18.0.1:4789", "198.18.0.2:4789", false},
		{"0.0.0.0:4789", "198.18.0.1:4789", "[fd00::2]:4789", true},
		{"[::]:4789", "[fd00::1]:4789", "", true},
		{"[::]:4789", "198.18.0.1:4789", "[::ffff:198.18.0.2]:4789", false},
	} {
		cfg := config.Agent{Listen: c.listen, Advertise: c.advertise}
		if c.peer != "" {
			cfg.Peers = []config.Peer{{Name: "b", Address: c.peer}}
		}
		if got := underlayIPv6(&cfg); got != c.want {
			t.Errorf("listen %s advertise %s peer %s: IPv6 %v, want %v", c.listen, c.advertise, c.peer, got, c.want)
		}
	}
}
