package agent

import (
	"net"
	"strings"
	"testing"

	"github.com/detour-overlay/detour/internal/config"
)

// Preflight names a missing bridge and a UDP port already taken as
// problems, and running in the clear as a warning; it binds nothing it
// keeps.
func TestPreflight(t *testing.T) {
	taken, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := &config.Agent{
		Site:     "a",
		Listen:   taken.LocalAddr().String(),
		API:      "127.0.0.1:0",
		Networks: []config.Network{{Name: "lan", ID: 3, TAP: "dt-pre0", Bridge: "br-detour-none", MTU: 1400}},
	}
	got := map[string]Finding{}
	for _, f := range Preflight(cfg) {
		got[f.Field] = f
	}
	if f := got["networks[0].bridge"]; !f.Problem || !strings.Contains(f.Msg, "br-detour-none does not exist") {
		t.Errorf("missing bridge: %+v", f)
	}
	if f := got["listen"]; !f.Problem || !strings.Contains(f.Msg, "address already in use") {
		t.Errorf("port in use: %+v", f)
	}
	if f := got["private_key_file"]; f.Problem || !strings.Contains(f.Msg, "in the clear") {
		t.Errorf("no key: %+v", f)
	}
	if f, ok := got["api"]; ok {
		t.Errorf("a free API address reported: %+v", f)
	}
	taken.Close()
	c, err := net.ListenPacket("udp", cfg.Listen)
	if err != nil {
		t.Fatalf("preflight kept %s bound: %v", cfg.Listen, err)
	}
	c.Close()
}
