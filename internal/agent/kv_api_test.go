package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/runstate"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// kvTestConfig is site lan with network default (10.20.0.0/24) and pool
// cache: 10.20.0.11 at lan, 10.20.0.12 at man.
func kvTestConfig() *config.Agent {
	cfg := &config.Agent{Site: "lan", Listen: "198.18.0.1:4800", API: "127.0.0.1:0",
		Networks: []config.Network{{Name: "default", ID: config.DefaultNetworkID, TAP: "detour0", MTU: 1400, Subnet: "10.20.0.0/24"}},
		KVPools: []config.KVPool{{Name: "cache", Network: "default", Address: "10.20.0.250", Servers: []config.KVServer{
			{Address: "10.20.0.11:11211", Site: "lan"}, {Address: "10.20.0.12:11211", Site: "man"}}}}}
	cfg.ApplyDefaults()
	return cfg
}

// kvTestAgent builds (does not run) an agent of cfg with fake devices for
// networks 1 and 7, keeping its state in statePath (empty: none), and
// the kv loop's state after its first take.
func kvTestAgent(t *testing.T, cfg *config.Agent, statePath string) (*Agent, *kvState) {
	t.Helper()
	a, err := New(cfg, Options{
		Conn:      transport.NewFakeNetwork().Listen(netip.MustParseAddrPort("198.18.0.1:4800")),
		Devices:   map[uint32]device.Device{config.DefaultNetworkID: device.NewFake("detour0", 1400, 64), 7: device.NewFake("dt-blue", 1400, 64)},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		StatePath: statePath,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.closeAll)
	st := newKVState()
	a.kvTake(st)
	return a, st
}

// change runs one change on the loop's state and returns its outcome, or
// nil when it waits.
func change(a *Agent, st *kvState, now int64, c api.KVChange) *kvResult {
	reply := make(chan kvResult, 1)
	a.kvChange(st, now, "cache", c, reply)
	select {
	case r := <-reply:
		return &r
	default:
		return nil
	}
}

// corePool is the pool cache as the site core holds it.
func corePool(t *testing.T, a *Agent) wire.KVPool {
	t.Helper()
	for _, p := range a.core.KVPools() {
		if p.Name == "cache" {
			return p
		}
	}
	t.Fatal("the core holds no pool cache")
	return wire.KVPool{}
}

// A change is stamped and held by the core (to be flooded), installed
// here at once, and a server of another site joins drained until its
// site confirms it; bad changes say what is wrong.
func TestKVChangeRemote(t *testing.T) {
	a, st := kvTestAgent(t, kvTestConfig(), "")
	port := st.nets[0].port
	old := port.KV.Load()
	if old.Pool("cache").Version != 1 {
		t.Fatalf("the file's pool is at version %d, want 1", old.Pool("cache").Version)
	}
	add := api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "10.20.0.14:11211", Site: "man", Weight: 2}}
	if r := change(a, st, 1, add); r != nil {
		t.Fatalf("answered before man confirmed the server: %+v", r)
	}
	p := port.KV.Load().Pool("cache")
	if p == nil || p.Version != 2 || len(p.Servers) != 3 || !p.Drained[2] || len(st.servers) != 3 {
		t.Fatalf("joining: %+v", p)
	}
	if c := corePool(t, a); c.Version != 2 || c.Origin != wire.SiteIDFromName("lan") || c.Servers[2].Flags != wire.KVServerJoining {
		t.Fatalf("the core holds %+v", c)
	}
	// man confirms it: its version arrives over the control plane.
	conf := corePool(t, a)
	conf.Servers[2].Flags, conf.Version, conf.Origin = 0, 3, wire.SiteIDFromName("man")
	a.kvApply(st, []wire.KVPool{conf}, nil, 2)
	reply := st.pending[0].reply
	a.kvFinishPending(st, 2)
	r := <-reply
	if r.err != nil || r.pool.Version != 3 || len(r.pool.Servers) != 3 || r.pool.Servers[2].Weight != 2 || r.pool.Servers[2].State != "up" {
		t.Fatalf("after man's confirmation: %+v", r)
	}
	if port.KV.Load() == old || port.KV.Load().Pool("cache").Drained[2] {
		t.Fatalf("table not swapped, or the server still drained")
	}
	if r := change(a, st, 3, api.KVChange{Op: api.KVDrain, KVServerAdd: api.KVServerAdd{Address: "10.20.0.14:11211"}}); r == nil || r.err != nil ||
		r.pool.Servers[2].State != "drained" || r.pool.Version != 4 || r.pool.Origin != "lan" {
		t.Fatalf("drain: %+v", r)
	}
	if r := change(a, st, 4, api.KVChange{Op: api.KVRemove, KVServerAdd: api.KVServerAdd{Address: "10.20.0.14:11211"}}); r == nil || r.err != nil ||
		len(r.pool.Servers) != 2 || len(st.servers) != 2 {
		t.Fatalf("remove: %+v, %d watched", r, len(st.servers))
	}
	for _, c := range []struct {
		c    api.KVChange
		want error
		msg  string
	}{
		{api.KVChange{Op: api.KVRemove, KVServerAdd: api.KVServerAdd{Address: "10.20.0.99:11211"}}, api.ErrNotFound, "no such server"},
		{api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "10.20.0.99"}}, api.ErrBadRequest, `"10.20.0.99" is not IPv4:port`},
		{api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "10.20.0.99:11211"}}, api.ErrBadRequest, "the site is missing"},
		{api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "127.0.0.9:11211", Site: "man"}}, api.ErrBadRequest, "subnet"},
		{api.KVChange{Op: api.KVUndrain, KVServerAdd: api.KVServerAdd{Address: "10.20.0.11:11211"}}, api.ErrBadRequest, "not drained"},
	} {
		r := change(a, st, 5, c.c)
		if r == nil || !errors.Is(r.err, c.want) || !strings.Contains(r.err.Error(), c.msg) {
			t.Errorf("%+v: %+v, want %v saying %q", c.c, r, c.want, c.msg)
		}
	}
	if v := port.KV.Load().Pool("cache").Version; v != 5 {
		t.Errorf("version %d after the changes and refused ones, want 5", v)
	}
	reply = make(chan kvResult, 1)
	a.kvChange(st, 6, "nope", api.KVChange{Op: api.KVDrain}, reply)
	if r := <-reply; !errors.Is(r.err, api.ErrNotFound) {
		t.Errorf("unknown pool: %v", r.err)
	}
}

// A server of this site joins drained until its MAC is known, then this
// site confirms it (a new version) and it takes keys; without an ARP
// reply within kvAddWait this site takes it out again.
func TestKVChangeLocalWaitsForMAC(t *testing.T) {
	a, st := kvTestAgent(t, kvTestConfig(), "")
	port := st.nets[0].port
	add := api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "10.20.0.15:11211", Site: "lan"}}
	if r := change(a, st, 1, add); r != nil {
		t.Fatalf("answered before the MAC is known: %+v", r)
	}
	p := port.KV.Load().Pool("cache")
	if p.Version != 2 || len(p.Servers) != 3 || !p.Drained[2] {
		t.Fatalf("joining pool: version %d, drained %v", p.Version, p.Drained)
	}
	if r := change(a, st, 2, api.KVChange{Op: api.KVDrain, KVServerAdd: api.KVServerAdd{Address: "10.20.0.11:11211"}}); r == nil || !errors.Is(r.err, api.ErrBadRequest) {
		t.Fatalf("a second change while one waits: %+v", r)
	}
	reply := st.pending[0].reply
	a.kvActivate(st, 3)
	a.kvFinishPending(st, 3)
	if len(st.pending) != 1 {
		t.Fatal("finished without a MAC")
	}
	p.ServerAt(netip.MustParseAddrPort("10.20.0.15:11211")).SetMAC([6]byte{2, 0, 0, 0, 0, 15})
	a.kvActivate(st, 4)
	a.kvFinishPending(st, 4)
	r := <-reply
	if r.err != nil || r.pool.Version != 3 || r.pool.Servers[2].State != "up" || len(st.pending) != 0 {
		t.Fatalf("after the MAC: %+v", r)
	}

	add.Address = "10.20.0.16:11211"
	change(a, st, 5, add)
	reply = st.pending[0].reply
	a.kvActivate(st, 6)
	a.kvActivate(st, 6+int64(kvAddWait)+1)
	a.kvFinishPending(st, 6+int64(kvAddWait)+1)
	if r := <-reply; r.err == nil || !strings.Contains(r.err.Error(), "no ARP reply") {
		t.Fatalf("timeout: %+v", r)
	}
	if p := port.KV.Load().Pool("cache"); len(p.Servers) != 3 || p.Version != 5 {
		t.Fatalf("not taken out: %d servers, version %d", len(p.Servers), p.Version)
	}
	if cs := st.configs(); len(cs) != 1 || len(cs[0].Servers) != 3 || cs[0].Servers[2].Address != "10.20.0.15:11211" || cs[0].Servers[2].Site != "lan" {
		t.Fatalf("configs: %+v", cs)
	}
}

// TestKVPoolsSurviveARestart: a change is in the state file when the
// call returns, and a restarted agent routes by it; an unchanged file
// leaves the stored version in force, an edited one becomes the next.
func TestKVPoolsSurviveARestart(t *testing.T) {
	statePath := filepath.Join(t.TempDir(), "site.state.json")
	a, st := kvTestAgent(t, kvTestConfig(), statePath)
	if r := change(a, st, 1, api.KVChange{Op: api.KVDrain, KVServerAdd: api.KVServerAdd{Address: "10.20.0.12:11211"}}); r == nil || r.err != nil {
		t.Fatalf("drain: %+v", r)
	}
	d, err := runstate.NewStore(statePath).Load("lan")
	if err != nil || len(d.KVPools) != 1 || d.KVPools[0].Version != 2 || !d.KVPools[0].Servers[1].Drained || d.KVFile["cache"] == "" {
		t.Fatalf("state file after the change: %v %+v", err, d)
	}
	a.closeAll()

	a, st = kvTestAgent(t, kvTestConfig(), statePath)
	if p := st.nets[0].port.KV.Load().Pool("cache"); p.Version != 2 || !p.Drained[1] {
		t.Fatalf("after a restart: version %d, drained %v", p.Version, p.Drained)
	}
	a.closeAll()

	cfg := kvTestConfig()
	cfg.KVPools[0].Servers = append(cfg.KVPools[0].Servers, config.KVServer{Address: "10.20.0.13:11211", Site: "man", Weight: 1})
	a, st = kvTestAgent(t, cfg, statePath)
	p := st.nets[0].port.KV.Load().Pool("cache")
	if p.Version != 3 || len(p.Servers) != 3 || p.Drained[1] {
		t.Fatalf("after editing the file: version %d, %d servers, drained %v", p.Version, len(p.Servers), p.Drained)
	}
	if c := corePool(t, a); c.Version != 3 || c.Origin != wire.SiteIDFromName("lan") {
		t.Fatalf("the core holds %+v", c)
	}
}

// TestKVNetworkAttachedAtRunTime: a pool of a network this site does not
// have is held but not routed; attaching the network with a subnet
// routes it.
func TestKVNetworkAttachedAtRunTime(t *testing.T) {
	a, st := kvTestAgent(t, kvTestConfig(), "")
	blue := wire.KVPool{Name: "blue-cache", Network: 7, VIP: netip.MustParseAddrPort("10.30.0.250:11211"), Version: 1, Origin: wire.SiteIDFromName("man"),
		Servers: []wire.KVServer{{Addr: netip.MustParseAddrPort("10.30.0.11:11211"), Weight: 1, Site: "man"}}}
	a.kvApply(st, []wire.KVPool{blue}, nil, 1)
	if len(st.nets) != 1 {
		t.Fatalf("%d networks routed before blue is attached, want 1", len(st.nets))
	}
	if _, err := a.Attach(api.Network{Name: "blue", ID: 7, TAP: "dt-blue", Subnet: "10.30.0.0/24"}); err != nil {
		t.Fatal(err)
	}
	a.kvTake(st)
	if len(st.nets) != 2 {
		t.Fatalf("%d networks routed after blue is attached, want 2", len(st.nets))
	}
	if p := a.engine.Port(7).KV.Load().Pool("blue-cache"); p == nil || len(p.Servers) != 1 {
		t.Fatalf("blue's table: %+v", p)
	}
	if err := a.Detach("blue"); err != nil {
		t.Fatal(err)
	}
	a.kvTake(st)
	if len(st.nets) != 1 || len(st.servers) != 2 {
		t.Fatalf("after detaching blue: %d networks, %d servers watched", len(st.nets), len(st.servers))
	}
}

// The health checks' round trips give the latency percentiles.
func TestKVLatency(t *testing.T) {
	ks := &kvServer{}
	if ks.latency() != nil {
		t.Fatal("latency without samples")
	}
	for i := 1; i <= 300; i++ {
		ks.rtt[ks.nrtt%kvRTTSamples] = time.Duration(i) * time.Millisecond
		ks.nrtt++
	}
	l := ks.latency()
	if l.Samples != 256 || l.P50Ms != 172 || l.P99Ms != 297 {
		t.Fatalf("%+v", l)
	}
}

// TestKVChangeReachesTheOtherAgent: two running agents, encrypted; a pool
// only lan's file defines and a drain made at lan reach man's key router,
// and so does a replicated pool, replicated.
func TestKVChangeReachesTheOtherAgent(t *testing.T) {
	nw := transport.NewFakeNetwork()
	privs := [2]string{}
	pubs := [2]string{}
	for i := range privs {
		k, err := keys.Generate(nil)
		if err != nil {
			t.Fatal(err)
		}
		privs[i], pubs[i] = k.String(), k.Public().String()
	}
	names := []string{"lan", "man"}
	var sites []*testSite
	for i, name := range names {
		cfg := kvTestConfig()
		cfg.Site, cfg.Listen, cfg.PrivateKey = name, fmt.Sprintf("198.18.0.%d:4800", i+1), privs[i]
		cfg.APISocket = filepath.Join(t.TempDir(), "api.sock")
		cfg.Peers = []config.Peer{{Name: names[1-i], Address: fmt.Sprintf("198.18.0.%d:4800", 2-i), PublicKey: pubs[1-i]}}
		if name == "man" {
			cfg.KVPools = nil
		} else {
			cfg.KVPools = append(cfg.KVPools, config.KVPool{Name: "objects", Network: "default", Address: "10.20.0.251", Policy: "static-zone",
				NearSites: []string{"lan"}, Shards: []config.KVShard{{Name: "s0", Replicas: []config.KVReplica{
					{Address: "10.20.0.21:11211", Site: "lan", Tier: "disk"}, {Address: "10.20.0.22:11211", Site: "man", Tier: "memory"}}}}})
			cfg.ApplyDefaults()
		}
		sites = append(sites, runTestAgent(t, name, cfg, nw.Listen(netip.MustParseAddrPort(cfg.Listen))))
	}
	waitMembers(t, sites)
	lan, man := sites[0].a, sites[1].a
	waitPool := func(v uint64) api.KVPool {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if p, err := man.KVPool("cache"); err == nil && p.Version == v {
				return p
			}
			if time.Now().After(deadline) {
				p, err := man.KVPool("cache")
				t.Fatalf("man holds %+v, %v; want version %d", p, err, v)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	p := waitPool(1)
	if p.Origin != "lan" || len(p.Servers) != 2 {
		t.Fatalf("man's pool: %+v", p)
	}
	// The replicated pool only lan's file defines is routed at man as
	// replicated, as lan defined it.
	o, err := man.KVPool("objects")
	for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		o, err = man.KVPool("objects")
	}
	if err != nil || o.Origin != "lan" || o.Policy != "static-zone" || o.Hedge || len(o.NearSites) != 1 || o.NearSites[0] != "lan" ||
		len(o.Shards) != 1 || o.Shards[0].Name != "s0" || len(o.Servers) != 2 || o.Servers[0].Tier != "disk" || o.Servers[1].Tier != "memory" || !o.Servers[1].Local {
		t.Fatalf("man's replicated pool: %+v, %v", o, err)
	}
	start := time.Now()
	if _, err := lan.KVChange("cache", api.KVChange{Op: api.KVDrain, KVServerAdd: api.KVServerAdd{Address: "10.20.0.12:11211"}}); err != nil {
		t.Fatal(err)
	}
	p = waitPool(2)
	t.Logf("drain at lan in force at man after %v", time.Since(start))
	if p.Servers[1].State != "drained" {
		t.Fatalf("man's pool after the drain: %+v", p)
	}
}
