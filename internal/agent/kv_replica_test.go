package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/runstate"
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

// TestKVReplicatedPoolEndToEnd: a pool with shards in the configuration
// file is held by the core, stored in the state file and routed with its
// shards, policy, near sites and tiers; the API shows them; run-time
// changes are refused with an error that says what to do; a restart
// keeps it replicated, and an edited tier becomes the next version.
func TestKVReplicatedPoolEndToEnd(t *testing.T) {
	replicated := func(tier string) *config.Agent {
		cfg := kvTestConfig()
		cfg.Peers = []config.Peer{{Name: "man", Address: "198.18.0.2:4800"}}
		cfg.KVPools = append(cfg.KVPools, config.KVPool{Name: "objects", Network: "default", Address: "10.20.0.251", Policy: "static-zone",
			NearSites: []string{"man"}, Shards: []config.KVShard{
				{Name: "s0", Replicas: []config.KVReplica{{Address: "10.20.0.21:11211", Site: "lan", Tier: "disk"}, {Address: "10.20.0.22:11211", Site: "man", Tier: tier}}},
				{Replicas: []config.KVReplica{{Address: "10.20.0.23:11211", Site: "man"}}}}})
		cfg.ApplyDefaults()
		return cfg
	}
	check := func(a *Agent, st *kvState, version uint64, tier string) {
		t.Helper()
		p := st.nets[0].port.KV.Load().Pool("objects")
		if p == nil || !p.Replicated() || p.Version != version {
			t.Fatalf("objects routed as %+v, want replicated at version %d", p, version)
		}
		ps := p.Spec()
		if len(ps.Shards) != 2 || ps.Shards[0].Name != "s0" || ps.Policy != replica.StaticZone || ps.Hedge ||
			!reflect.DeepEqual(ps.NearSites, []wire.SiteID{wire.SiteIDFromName("man")}) || p.Servers[0].Tier != "disk" || p.Servers[1].Tier != tier ||
			p.Servers[2].Shard != 1 || !p.Servers[0].Local || p.Servers[1].Local {
			t.Errorf("objects' spec %+v", ps)
		}
		v := st.view(st.nets[0], p, 1)
		if v.Policy != "static-zone" || v.Hedge || !reflect.DeepEqual(v.NearSites, []string{"man"}) || len(v.Shards) != 2 || v.Servers[1].Tier != tier || v.Servers[2].Shard != 1 {
			t.Errorf("objects' view %+v", v)
		}
		var held *wire.KVPool
		for _, c := range a.core.KVPools() {
			if c.Name == "objects" {
				held = &c
			}
		}
		if held == nil || len(held.Shards) != 2 || held.Servers[1].Tier != tier {
			t.Errorf("the core holds %+v", held)
		}
	}
	statePath := filepath.Join(t.TempDir(), "site.state.json")
	a, st := kvTestAgent(t, replicated("memory"), statePath)
	check(a, st, 1, "memory")
	cur := st.nets[0].port.KV.Load()
	a.kvApply(st, a.core.KVPools(), nil, 2) // the same records again: the table stands
	if st.nets[0].port.KV.Load() != cur {
		t.Error("the same records built a new table")
	}
	d, err := runstate.NewStore(statePath).Load("lan")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(d.KVPools, func(p runstate.KVPool) bool { return p.Name == "objects" })
	if i < 0 || d.KVPools[i].Policy != "static-zone" || len(d.KVPools[i].Shards) != 2 || d.KVPools[i].Servers[1].Tier != "memory" || d.KVPools[i].Servers[2].Shard != 1 {
		t.Fatalf("state file: %+v", d.KVPools)
	}
	for _, c := range []api.KVChange{{Op: api.KVDrain, KVServerAdd: api.KVServerAdd{Address: "10.20.0.21:11211"}},
		{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "10.20.0.24:11211", Site: "lan"}}} {
		reply := make(chan kvResult, 1)
		a.kvChange(st, 1, "objects", c, reply)
		r := <-reply
		if !errors.Is(r.err, api.ErrBadRequest) || !strings.Contains(fmt.Sprint(r.err), "detour reload") {
			t.Errorf("kv %s on a replicated pool: %v, want a bad request saying to edit the configuration", c.Op, r.err)
		}
	}
	a.closeAll()

	a, st = kvTestAgent(t, replicated("memory"), statePath) // the file as last applied: the stored pool stands
	check(a, st, 1, "memory")
	a.closeAll()
	a, st = kvTestAgent(t, replicated("flash"), statePath) // an edited tier is the next version
	check(a, st, 2, "flash")
}

// The wire format's bounds are the configuration's and the chooser's: a
// policy travels as replica.Policy's value, and a shard holds as many
// replicas everywhere.
func TestKVWireBoundsAgree(t *testing.T) {
	if len(config.KVPolicies) != wire.KVPolicies {
		t.Errorf("%d policies in the configuration, %d on the wire", len(config.KVPolicies), wire.KVPolicies)
	}
	for i, name := range config.KVPolicies {
		if p, err := replica.ParsePolicy(name); err != nil || int(p) != i || p.String() != name {
			t.Errorf("policy %q is %v (%v), want value %d", name, p, err, i)
		}
	}
	w, r, c := wire.MaxKVReplicas, replica.MaxReplicas, config.MaxKVReplicas
	if w != r || w != c {
		t.Errorf("replicas per shard: wire %d, replica %d, config %d", w, r, c)
	}
}
