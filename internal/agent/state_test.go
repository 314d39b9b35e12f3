package agent

import (
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/runstate"
	"github.com/detour-overlay/detour/internal/transport"
)

// TestRunTimeChangesSurviveARestart: networks attached and limited and the
// egress rate set through the backend are in the state file when the call
// returns, and a new agent on the same files starts with them.
func TestRunTimeChangesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	statePath := filepath.Join(dir, "site.state.json")
	nw := transport.NewFakeNetwork()
	start := func() *Agent {
		cfg := &config.Agent{Site: "fujisawa", Listen: "198.18.0.1:4800", API: "127.0.0.1:0"}
		cfg.ApplyDefaults()
		a, err := New(cfg, Options{
			Conn:      nw.Listen(netip.MustParseAddrPort("198.18.0.1:4800")),
			Devices:   map[uint32]device.Device{config.DefaultNetworkID: device.NewFake("detour0", 1400, 64), 7: device.NewFake("dt-blue", 1400, 64)},
			Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
			StatePath: statePath,
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := start()
	if _, err := a.Attach(api.Network{Name: "blue", ID: 7, TAP: "dt-blue", MaxRate: "20mbit"}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetEgress("200mbit"); err != nil {
		t.Fatal(err)
	}
	if err := a.SetLimits("default", "50mbit", "1mbit"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := runstate.Decode(b); err != nil || len(d.Attached) != 1 || d.Limits["default"].MaxRate != 50e6 || *d.Egress != 200e6 {
		t.Fatalf("state file after the calls: %v\n%s", err, b)
	}
	a.closeAll()

	a = start()
	defer a.closeAll()
	got := map[string]api.Network{}
	for _, n := range a.Networks() {
		got[n.Name] = n
	}
	if got["blue"].MaxRate != "20mbit" || got["default"].MaxRate != "50mbit" || got["default"].MinRate != "1mbit" || a.cfg.EgressRate != 200e6 {
		t.Errorf("after the restart: %+v, egress %v", got, a.cfg.EgressRate)
	}
	if err := a.Detach("default"); err != nil {
		t.Fatal(err)
	}
	if d, _ := runstate.NewStore(statePath).Load("fujisawa"); len(d.Detached) != 1 || len(d.Limits) != 0 {
		t.Errorf("detaching the file's network: %s", d.Encode())
	}
}
