package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/detour-overlay/detour/internal/api"
)

// detour status shows the flow classes' flows, frames and bytes, and the
// reorder counter, when the data path classified anything.
func TestStatusShowsFlowClasses(t *testing.T) {
	raw, _ := json.Marshal(api.Status{Site: "lan", Counters: map[string]uint64{"flows_latency": 7, "flows_bulk": 1,
		"latency_frames": 1000, "latency_bytes": 90000, "bulk_frames": 50000, "bulk_bytes": 70000000, "class_changes": 1, "flow_reordered": 0}})
	var out bytes.Buffer
	if err := printStatus(&out, raw); err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{"latency 7 1000 90000", "bulk 1 50000 70000000", "class changes 1", "out of order 0"} {
		if !strings.Contains(flat, want) {
			t.Errorf("status does not show %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	raw, _ = json.Marshal(api.Status{Site: "lan", Counters: map[string]uint64{}})
	printStatus(&out, raw)
	if strings.Contains(out.String(), "CLASS") {
		t.Error("status shows flow classes before any frame")
	}
}
