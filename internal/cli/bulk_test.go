package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/detour-overlay/detour/internal/api"
)

// TestPrintBulk: routes show the latency path's rate and the bulk path,
// links the rate column, and why the bulk candidates with their links'
// rates and the reason.
func TestPrintBulk(t *testing.T) {
	routes, _ := json.Marshal([]api.Route{
		{Dest: "B", Path: []string{"B"}, LatencyMs: 10, RateMbps: 20, Bulk: &api.BulkRoute{Path: []string{"C", "B"}, RateMbps: 200, LatencyMs: 12, ExtraMs: 2}},
		{Dest: "C", Path: []string{"C"}, LatencyMs: 6, RateMbps: 200},
	})
	var out bytes.Buffer
	if err := printRoutes(&out, routes); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[0], "BULK PATH") || !strings.Contains(lines[1], "C > B") || !strings.Contains(lines[1], "200.0") ||
		!strings.Contains(lines[1], "20.0") || !strings.Contains(lines[2], "(same)") {
		t.Fatalf("routes:\n%s", out.String())
	}
	links, _ := json.Marshal([]api.Link{{From: "A", To: "B", Up: true, RateMbps: 19.8, RateKind: "train"}, {From: "B", To: "A", Up: true}})
	out.Reset()
	if err := printLinks(&out, links); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(out.String(), "\n"); !strings.Contains(lines[0], "RATE Mbit/s") || !strings.Contains(lines[1], "19.8 (train)") || !strings.Contains(lines[2], " - ") {
		t.Fatalf("links:\n%s", out.String())
	}
	why, _ := json.Marshal(api.Why{Dest: "B", Chosen: []string{"B"}, Reason: "lowest latency", Bulk: &api.WhyBulk{
		Enabled: true, Chosen: []string{"C", "B"}, RateMbps: 200, PathRateMbps: 20, BoundMs: 10, MinGain: 1.5, Reason: "widest path within the bound",
		Candidates: []api.BulkCandidate{{Path: []string{"C", "B"}, RateMbps: 200, ExtraMs: 2, WithinBound: true, Note: "bulk path",
			Links: []api.LinkRate{{From: "A", To: "C", RateMbps: 200, Kind: "train"}, {From: "C", To: "B", RateMbps: 210, Kind: "saturated"}}}}}})
	out.Reset()
	if err := printWhy(&out, why); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bulk flows: C > B", "widest path within the bound", "10.00 ms longer", "210.0 (saturated)", "+2.00"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("why lacks %q:\n%s", want, out.String())
		}
	}
}
