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

// TestLocalityScenarioAgentConfig: the locality scenario's replicated
// pools reach every gateway's configuration with their shards, replicas
// (site, tier), policy, near sites and hedging, and the configuration
// validates.
func TestLocalityScenarioAgentConfig(t *testing.T) {
	sc, err := scenario.Load("locality")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Scenario: "locality", Overlay: "detour-plain", Prefix: DefaultPrefix}
	st := newState(sc, o)
	dir := t.TempDir()
	file := filepath.Join(dir, "a.yaml")
	if err := writeAgentConfig(st, sc, 0, nil, file, Options{}); err != nil {
		t.Fatal(err)
	}
	a, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]config.KVPool{}
	for _, p := range a.KVPools {
		pools[p.Name] = p
	}
	if len(pools) != len(st.KVPools) {
		t.Fatalf("%d pools in the configuration, %d in the state", len(pools), len(st.KVPools))
	}
	pred, ok := pools["obj-predicted"]
	if !ok || len(pred.Shards) != 1 || len(pred.Servers) != 0 || pred.Policy != "predicted" || !pred.HedgeOn() {
		t.Fatalf("obj-predicted %+v", pred)
	}
	reps := pred.Shards[0].Replicas
	if len(reps) != 3 || reps[0].Tier != "disk" || reps[1].Tier != "memory" ||
		reps[0].Site != st.KVPools[0].Shards[0].Replicas[0].Site || reps[0].Address != st.KVPools[0].Shards[0].Replicas[0].Address ||
		pred.Shards[0].Name != "s0" || pred.Shards[0].Weight != 1 {
		t.Fatalf("obj-predicted shard %+v", pred.Shards[0])
	}
	zone := pools["obj-static-zone"]
	if zone.Policy != "static-zone" || len(zone.NearSites) != 1 || zone.NearSites[0] != reps[1].Site {
		t.Fatalf("obj-static-zone %+v", zone)
	}
	if lf := pools["obj-local-first"]; lf.Policy != "local-first" || lf.HedgeOn() || len(lf.Shards) != 1 {
		t.Fatalf("obj-local-first %+v", lf)
	}
}

// TestNarrowRelayAgentConfig: the scenario's bulk section reaches every
// gateway's configuration, with the defaults for what it leaves out.
func TestNarrowRelayAgentConfig(t *testing.T) {
	sc, err := scenario.Load("narrow-relay")
	if err != nil {
		t.Fatal(err)
	}
	st := newState(sc, Options{Scenario: "narrow-relay", Overlay: "detour-plain", Prefix: DefaultPrefix})
	file := filepath.Join(t.TempDir(), "a.yaml")
	if err := writeAgentConfig(st, sc, 0, nil, file, Options{}); err != nil {
		t.Fatal(err)
	}
	a, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Bulk.On() || a.Bulk.Threshold != 1_000_000 || a.Bulk.MinGain != config.DefaultBulkMinGain {
		t.Errorf("bulk section %+v", a.Bulk)
	}
}
