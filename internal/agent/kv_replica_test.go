package agent

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/wire"
)

// A configured pool with shards becomes the router's replicated pool; the
// agent feeds it path RTTs, explains a key and exports where reads went.
func TestKVReplicatedPool(t *testing.T) {
	pc := config.KVPool{Name: "objects", Network: "tenant", Address: "198.19.255.251", Hash: "ketama", Policy: "predicted",
		NearSites: []string{"NEU"}, Shards: []config.KVShard{{Name: "s0", Weight: 1, Replicas: []config.KVReplica{
			{Address: "198.19.2.1:11211", Site: "LAN", Tier: "disk"},
			{Address: "198.19.3.1:11211", Site: "NEU", Tier: "memory"},
			{Address: "198.19.0.1:11211", Site: "BOR", Tier: "memory"},
		}}}}
	// The pool goes the way a file's pool goes: to a record, over the
	// wire, through the state file, and to the router's spec.
	rec := kvFromConfig(pc, 1)
	rec.Version, rec.Origin = 1, wire.SiteIDFromName("LAN")
	b, err := wire.AppendKVPool(nil, rec.Origin, &rec)
	if err != nil {
		t.Fatal(err)
	}
	var parsed wire.KVPool
	if _, err := wire.ParseKVPool(b, &parsed); err != nil {
		t.Fatal(err)
	}
	stored, err := kvFromState(kvToState(parsed))
	if err != nil {
		t.Fatal(err)
	}
	ps := kvSpec(stored)
	if !reflect.DeepEqual(ps, kvSpec(rec)) {
		t.Errorf("the spec changed on the way:\n%+v\n%+v", ps, kvSpec(rec))
	}
	if len(ps.Shards) != 1 || ps.Shards[0] != (router.ShardSpec{Name: "s0", Weight: 1}) || len(ps.Servers) != 3 || !ps.Hedge ||
		ps.Policy != replica.Predicted || !reflect.DeepEqual(ps.NearSites, []wire.SiteID{wire.SiteIDFromName("NEU")}) ||
		ps.Servers[0].Tier != "disk" || ps.Servers[1].Tier != "memory" || ps.Servers[2].Shard != 0 || ps.Servers[2].SiteName != "BOR" {
		t.Fatalf("spec %+v", ps)
	}
	lan := wire.SiteIDFromName("LAN")
	tb, err := router.New(router.Spec{Self: lan, Subnet: netip.MustParsePrefix("198.19.0.0/16"), Pools: []router.PoolSpec{ps}})
	if err != nil {
		t.Fatal(err)
	}
	p := tb.Pools()[0]
	if !p.Replicated() {
		t.Fatal("not replicated")
	}
	routes := kvRoutes{up: map[wire.SiteID]bool{wire.SiteIDFromName("NEU"): true, wire.SiteIDFromName("BOR"): true}}
	for _, s := range p.Servers {
		kvPathRTT(s, routes)
	}
	if p.Servers[0].PathRTT() != 0 || p.Servers[1].PathRTT() != 10e6 {
		t.Errorf("path RTTs %d %d, want 0 and twice the route's 5 ms one-way estimate", p.Servers[0].PathRTT(), p.Servers[1].PathRTT())
	}
	y := kvWhyView(p, "user:1", 0)
	if y.ShardName != "s0" || len(y.Replicas) != 3 || y.Replicas[1].RTTMs != 10 || y.Replicas[0].Tier != "disk" || y.Chosen == "" {
		t.Errorf("why %+v", y)
	}
	// The configuration comes back as it was given.
	var back config.KVPool
	kvShardsConfig(p.Spec(), &back)
	if len(back.Shards) != 1 || len(back.Shards[0].Replicas) != 3 || back.Shards[0].Replicas[1] != pc.Shards[0].Replicas[1] || back.Policy != "predicted" {
		t.Errorf("config %+v", back)
	}
	p.Stats.ReadsNearby.Add(7)
	p.Stats.HedgesSent.Add(2)
	reg := prometheus.NewRegistry()
	port := &datapath.Port{Network: 1}
	port.KV.Store(tb)
	a := &Agent{}
	a.kvNets.Store(&[]kvNet{{name: "tenant", port: port}})
	reg.MustRegister(kvCollector{a})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "pool" {
					name += "/" + l.GetValue()
				}
			}
			got[name] = m.GetCounter().GetValue()
		}
	}
	for name, v := range map[string]float64{"detour_kv_reads_total/nearby": 7, "detour_kv_reads_total/local": 0, "detour_kv_reads_total/remote": 0,
		"detour_kv_hedges_total/sent": 2, "detour_kv_hedges_total/won": 0} {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
}
