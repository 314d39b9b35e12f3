package testbed

import (
	"path/filepath"
	"testing"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// TestKVScenarioAgentConfig: the kv scenario's pool appears in the state
// and in every gateway's configuration, which validates.
func TestKVScenarioAgentConfig(t *testing.T) {
	sc, err := scenario.Load("lanman2017-kv")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Scenario: "lanman2017-kv", Overlay: "detour-plain", Prefix: DefaultPrefix}
	st := newState(sc, o)
	if len(st.KVPools) != 1 || len(st.KVPools[0].Servers) != 3 || st.KVPools[0].Servers[2].Address != "198.19.4.1:11211" ||
		st.KVPools[0].Servers[2].NS != "dt-neu.h1" {
		t.Fatalf("pools %+v", st.KVPools)
	}
	dir := t.TempDir()
	for i := range st.Sites {
		file := filepath.Join(dir, "a.yaml")
		if err := writeAgentConfig(st, sc, i, nil, file, Options{}); err != nil {
			t.Fatal(err)
		}
		a, err := config.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.KVPools) != 1 || a.Networks[0].Subnet != "198.19.0.0/16" || a.KVPools[0].VirtualAddr().String() != "198.19.255.250:11211" {
			t.Fatalf("site %d: pools %+v", i, a.KVPools)
		}
	}
}
