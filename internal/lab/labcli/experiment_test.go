package labcli

import (
	"io"
	"testing"
)

// TestParseExperimentOverlays checks that lanman2017 takes the peers
// wireguard and easytier beside vxlan, tinc and detour, and refuses an
// overlay it cannot run (none: the hosts of different sites share no
// network without an overlay).
func TestParseExperimentOverlays(t *testing.T) {
	o, err := parseExperiment([]string{"--overlays", "vxlan,tinc,wireguard,easytier,detour"}, io.Discard)
	if err != nil {
		t.Fatalf("every overlay: %v", err)
	}
	c := o.config("lab", "detour", io.Discard)
	if len(c.Overlays) != 5 || c.Overlays[3] != "easytier" {
		t.Errorf("overlays %v, want the five in order", c.Overlays)
	}
	for _, bad := range []string{"none", "wg", "detour,foo"} {
		if _, err := parseExperiment([]string{"--overlays", bad}, io.Discard); err == nil {
			t.Errorf("--overlays %s accepted", bad)
		}
	}
}
