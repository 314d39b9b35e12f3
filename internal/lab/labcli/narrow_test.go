package labcli

import (
	"io"
	"testing"
	"time"
)

func TestParseNarrow(t *testing.T) {
	o, err := parseNarrow([]string{"--overlays", "vxlan,detour", "--short", "--transfer", "12s"}, io.Discard)
	if err != nil || o.overlays != "vxlan,detour" || !o.short || o.transfer != 12*time.Second || o.scenario != "narrow-relay" {
		t.Errorf("options %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"--overlays", "zerotier"}, {"--transfer", "1s"}, {"extra"}} {
		if _, err := parseNarrow(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
