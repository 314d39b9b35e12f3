package agent

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sync"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/runstate"
	"github.com/detour-overlay/detour/internal/wire"
)

// The key router's pools are distributed over the control plane by the
// site core (site/kvpools.go); this file is the agent's side of it. The
// control loop, which owns the core, stores the set of pools in force in
// the state file each time it changes and hands it to the kv loop through
// kvBox, which never blocks the control loop. The kv loop turns the set
// into each network's router table (kvApply). A change made here (the
// API, kv_api.go) goes the other way: the kv loop asks the control loop
// to stamp and flood it (kvPublish), which stores it before answering.

// kvBox carries the latest pools, networks and site names from the
// control loop to the kv loop; nil fields mean unchanged.
type kvBox struct {
	mu    sync.Mutex
	pools []wire.KVPool
	nets  []config.Network
	names map[wire.SiteID]string
	wake  chan struct{}
}

func newKVBox() *kvBox { return &kvBox{wake: make(chan struct{}, 1)} }

// put leaves pools (nil: unchanged), nets (nil: unchanged) and names for
// the kv loop and wakes it.
func (b *kvBox) put(pools []wire.KVPool, nets []config.Network, names map[wire.SiteID]string) {
	b.mu.Lock()
	if pools != nil {
		b.pools = pools
	}
	if nets != nil {
		b.nets = nets
	}
	if len(names) > 0 {
		if b.names == nil {
			b.names = map[wire.SiteID]string{}
		}
		maps.Copy(b.names, names)
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take returns what was put since the last take.
func (b *kvBox) take() ([]wire.KVPool, []config.Network, map[wire.SiteID]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, n, names := b.pools, b.nets, b.names
	b.pools, b.nets, b.names = nil, nil, nil
	return p, n, names
}

// kvFromConfig is a validated pool of the configuration file as
// distributed: the network by its ID, version and origin unset; a pool
// with shards has each replica as a server of weight 1 naming its shard.
func kvFromConfig(pc config.KVPool, network uint32) wire.KVPool {
	h, _ := ring.ParseHash(pc.Hash)
	p := wire.KVPool{Name: pc.Name, Network: network, VIP: pc.VirtualAddr(), Hash: uint8(h)}
	if len(pc.Shards) > 0 {
		pol, _ := replica.ParsePolicy(pc.Policy)
		p.Policy, p.Hedge, p.NearSites = uint8(pol), pc.HedgeOn(), slices.Clone(pc.NearSites)
		for k, sh := range pc.Shards {
			p.Shards = append(p.Shards, wire.KVShard{Name: sh.Name, Weight: uint16(max(sh.Weight, 1))})
			for _, r := range sh.Replicas {
				ap, _ := netip.ParseAddrPort(r.Address)
				p.Servers = append(p.Servers, wire.KVServer{Addr: ap, Weight: 1, Site: r.Site, Shard: uint16(k), Tier: r.Tier})
			}
		}
		return p
	}
	for _, s := range pc.Servers {
		ap, _ := netip.ParseAddrPort(s.Address)
		p.Servers = append(p.Servers, wire.KVServer{Addr: ap, Weight: uint16(s.Weight), Site: s.Site})
	}
	return p
}

// kvFingerprint identifies a file pool's definition.
func kvFingerprint(pc config.KVPool, network uint32) string {
	b, _ := json.Marshal(struct {
		P config.KVPool
		N uint32
	}{pc, network})
	h := fnv.New64a()
	h.Write(b)
	return fmt.Sprintf("%016x", h.Sum64())
}

// kvToState converts a pool for the state file.
func kvToState(p wire.KVPool) runstate.KVPool {
	r := runstate.KVPool{Name: p.Name, Network: p.Network, Address: p.VIP.String(), Hash: ring.Hash(p.Hash).String(),
		Version: p.Version, Origin: uint32(p.Origin)}
	if p.Replicated() {
		r.Policy, r.Hedge, r.NearSites = replica.Policy(p.Policy).String(), p.Hedge, slices.Clone(p.NearSites)
		for _, sh := range p.Shards {
			r.Shards = append(r.Shards, runstate.KVShard{Name: sh.Name, Weight: int(sh.Weight)})
		}
	}
	for _, s := range p.Servers {
		r.Servers = append(r.Servers, runstate.KVServer{Address: s.Addr.String(), Weight: int(s.Weight), Site: s.Site,
			Drained: s.Flags&wire.KVServerDrained != 0, Joining: s.Flags&wire.KVServerJoining != 0, Shard: int(s.Shard), Tier: s.Tier})
	}
	return r
}

// kvFromState converts a pool of the state file back.
func kvFromState(r runstate.KVPool) (wire.KVPool, error) {
	vip, err := netip.ParseAddrPort(r.Address)
	if err != nil {
		return wire.KVPool{}, err
	}
	h, err := ring.ParseHash(r.Hash)
	if err != nil {
		return wire.KVPool{}, err
	}
	p := wire.KVPool{Name: r.Name, Network: r.Network, VIP: vip, Hash: uint8(h), Version: r.Version, Origin: wire.SiteID(r.Origin)}
	if len(r.Shards) > 0 {
		pol, err := replica.ParsePolicy(r.Policy)
		if err != nil {
			return wire.KVPool{}, err
		}
		p.Policy, p.Hedge, p.NearSites = uint8(pol), r.Hedge, slices.Clone(r.NearSites)
		for _, sh := range r.Shards {
			p.Shards = append(p.Shards, wire.KVShard{Name: sh.Name, Weight: uint16(sh.Weight)})
		}
	}
	for _, s := range r.Servers {
		ap, err := netip.ParseAddrPort(s.Address)
		if err != nil {
			return wire.KVPool{}, err
		}
		var f uint8
		if s.Drained {
			f |= wire.KVServerDrained
		}
		if s.Joining {
			f |= wire.KVServerJoining
		}
		p.Servers = append(p.Servers, wire.KVServer{Addr: ap, Weight: uint16(s.Weight), Site: s.Site, Flags: f, Shard: uint16(s.Shard), Tier: s.Tier})
	}
	return p, nil
}

// kvSpec is the router's spec of a pool: a joining server is drained
// until its site confirms it. A replicated pool's servers are the
// replicas of its shards, read by its policy.
func kvSpec(p wire.KVPool) router.PoolSpec {
	ps := router.PoolSpec{Name: p.Name, VIP: p.VIP, Hash: ring.Hash(p.Hash), Version: p.Version}
	if p.Replicated() {
		ps.Policy, ps.Hedge = replica.Policy(p.Policy), p.Hedge
		for _, s := range p.NearSites {
			ps.NearSites = append(ps.NearSites, wire.SiteIDFromName(s))
		}
		for _, sh := range p.Shards {
			ps.Shards = append(ps.Shards, router.ShardSpec{Name: sh.Name, Weight: uint32(sh.Weight)})
		}
	}
	for _, s := range p.Servers {
		ss := router.ServerSpec{Addr: s.Addr, Weight: uint32(s.Weight), Site: wire.SiteIDFromName(s.Site),
			SiteName: s.Site, Drained: s.Flags&(wire.KVServerDrained|wire.KVServerJoining) != 0}
		if p.Replicated() {
			ss.Shard, ss.Tier = int(s.Shard), s.Tier
		}
		ps.Servers = append(ps.Servers, ss)
	}
	return ps
}

// kvStart gives the core the pools this site starts with: those of the
// state file, and the configuration file's as seeds (kvSeeds). A file
// pool too large for one control datagram stops the agent. It runs
// before the control loop.
func (a *Agent) kvStart() error {
	held := map[string]wire.KVPool{}
	for _, r := range a.state.KVPools {
		p, err := kvFromState(r)
		if err != nil {
			a.log.Warn("run-time state: kv pool dropped", "pool", r.Name, "err", err)
			continue
		}
		held[p.Name] = p
	}
	seeds, fp, err := a.kvSeeds(a.file, held, a.state.KVFile)
	if err != nil {
		return err
	}
	for _, p := range seeds {
		held[p.Name] = p
	}
	pools := slices.SortedFunc(maps.Values(held), func(x, y wire.KVPool) int { return cmp.Compare(x.Name, y.Name) })
	if err := a.core.LoadKVPools(pools); err != nil {
		return fmt.Errorf("kv_pools: %w", err)
	}
	if err := a.record(func(d *runstate.Doc) {
		d.SetKVPools(kvStates(pools))
		d.KVFile = fp
	}); err != nil {
		return err
	}
	a.kvBox.put(pools, a.netList(), map[wire.SiteID]string{wire.SiteIDFromName(a.cfg.Site): a.cfg.Site})
	return nil
}

// kvSeeds returns the pools of configuration file that are new or edited
// since they were last applied (applied: fingerprints by name), each as
// the next version of this site above the one held, and the
// fingerprints of all the file's pools (runstate/kv.go: a file pool
// unchanged since it was last applied leaves the pool held in force). A
// pool too large for one control datagram is an error naming it.
func (a *Agent) kvSeeds(file *config.Agent, held map[string]wire.KVPool, applied map[string]string) ([]wire.KVPool, map[string]string, error) {
	self := wire.SiteIDFromName(a.cfg.Site)
	fp := map[string]string{}
	var out []wire.KVPool
	for _, pc := range file.KVPools {
		var id uint32
		for _, n := range file.Networks {
			if n.Name == pc.Network {
				id = n.ID
			}
		}
		p := kvFromConfig(pc, id)
		f := kvFingerprint(pc, id)
		fp[pc.Name] = f
		old, ok := held[pc.Name]
		switch {
		case ok && applied[pc.Name] == f:
			continue // the file is as last applied: the pool held stands
		case ok:
			p.Version, p.Origin = old.Version+1, self
			a.log.Info("kv pool: the configuration file's definition changed; it becomes a new version", "pool", p.Name, "version", p.Version)
		default:
			p.Version, p.Origin = 1, self
		}
		if err := kvCheckLabels(pc); err != nil {
			return nil, nil, err
		}
		if _, err := wire.AppendKVPool(nil, self, &p); err != nil {
			what := fmt.Sprintf("%d servers", len(p.Servers))
			if p.Replicated() {
				what = fmt.Sprintf("%d shards of %d replicas in all", len(p.Shards), len(p.Servers))
			}
			return nil, nil, fmt.Errorf("kv_pools: pool %s: %s take %d bytes on the control plane, more than %d (%v): split it into smaller pools",
				pc.Name, what, wire.KVPoolLen(&p), wire.MaxKVPoolLen, err)
		}
		out = append(out, p)
	}
	return out, fp, nil
}

// kvCheckLabels refuses a shard name or tier longer than the control
// plane carries, naming it.
func kvCheckLabels(pc config.KVPool) error {
	for j, sh := range pc.Shards {
		if len(sh.Name) > wire.MaxKVLabelLen {
			return fmt.Errorf("kv_pools: pool %s: shards[%d].name: %d bytes, at most %d", pc.Name, j, len(sh.Name), wire.MaxKVLabelLen)
		}
		for k, r := range sh.Replicas {
			if len(r.Tier) > wire.MaxKVLabelLen {
				return fmt.Errorf("kv_pools: pool %s: shards[%d].replicas[%d].tier: %d bytes, at most %d", pc.Name, j, k, len(r.Tier), wire.MaxKVLabelLen)
			}
		}
	}
	return nil
}

// kvReloadCheck returns the pools a reloaded file changes, or why the
// file's pools cannot be distributed. It runs on the control loop,
// before the reload changes anything.
func (a *Agent) kvReloadCheck(file *config.Agent) ([]wire.KVPool, map[string]string, error) {
	held := map[string]wire.KVPool{}
	for _, p := range a.core.KVPools() {
		held[p.Name] = p
	}
	return a.kvSeeds(file, held, a.state.KVFile)
}

// kvReload distributes the pools a reloaded file changed, as changes of
// this site, and stores them with the file's fingerprints. It runs on
// the control loop.
func (a *Agent) kvReload(seeds []wire.KVPool, fp map[string]string) ([]string, error) {
	var done []string
	var errs []error
	for _, p := range seeds {
		got, err := a.core.SetKVPool(a.clock.Now(), p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, fmt.Sprintf("kv pool %s: version %d", got.Name, got.Version))
	}
	err := a.record(func(d *runstate.Doc) {
		d.SetKVPools(kvStates(a.core.KVPools()))
		d.KVFile = fp
	})
	return done, errors.Join(append(errs, err)...)
}

func kvStates(pools []wire.KVPool) []runstate.KVPool {
	out := make([]runstate.KVPool, len(pools))
	for i, p := range pools {
		out[i] = kvToState(p)
	}
	return out
}

// netList returns the networks in force, by ID, for the kv loop. It runs
// on the control loop (or before it).
func (a *Agent) netList() []config.Network {
	return slices.SortedFunc(maps.Values(a.netCfg), func(x, y config.Network) int { return cmp.Compare(x.ID, y.ID) })
}

// kvNetworksChanged tells the kv loop the networks changed (attached,
// detached, reloaded), so that a network attached at run time that a pool
// serves gets its key router. It runs on the control loop.
func (a *Agent) kvNetworksChanged() { a.kvBox.put(nil, a.netList(), nil) }

// kvHeld stores the set of pools the core now holds and hands it to the
// kv loop. It runs on the control loop, for every Ready with pools.
func (a *Agent) kvHeld(pools []wire.KVPool) {
	if err := a.kvStore(pools); err != nil {
		a.log.Error("kv pools not stored", "err", err)
	}
	names := map[wire.SiteID]string{}
	for _, p := range pools {
		names[p.Origin] = a.core.Control().NameOf(p.Origin)
	}
	a.kvBox.put(pools, nil, names)
}

// kvStore saves the pools in the state file unless it holds them already.
func (a *Agent) kvStore(pools []wire.KVPool) error {
	st := kvStates(pools)
	if reflect.DeepEqual(st, a.state.KVPools) || (len(st) == 0 && len(a.state.KVPools) == 0) {
		return nil
	}
	return a.record(func(d *runstate.Doc) { d.SetKVPools(st) })
}

// kvPublish makes a change at this site: the core stamps p (this site as
// origin, the next version) and floods it, and the pools in force are
// stored before it returns, so an acknowledged change survives a crash.
// It is called from the kv loop.
func (a *Agent) kvPublish(p wire.KVPool) (wire.KVPool, error) {
	var out wire.KVPool
	var err error
	if !a.do(func() {
		if out, err = a.core.SetKVPool(a.clock.Now(), p); err == nil {
			err = a.kvStore(a.core.KVPools())
		}
	}) {
		return out, errKVStopped
	}
	return out, err
}

// kvApply takes the pools and networks handed over (nil: unchanged),
// keeps for each pool the newest version seen, and makes each network's
// router table route by them: a table is built for a network that gets
// its first pool (one attached at run time included), and replaced when
// its pools changed. It runs on the kv loop.
func (a *Agent) kvApply(st *kvState, pools []wire.KVPool, nets []config.Network, now int64) {
	if nets != nil {
		st.netcfg = nets
	}
	for _, p := range pools {
		if cur, ok := st.records[p.Name]; ok && cur.Newer(&p) {
			continue // the kv loop installed a newer one itself
		}
		st.records[p.Name] = p.Clone()
	}
	self := wire.SiteIDFromName(a.cfg.Site)
	var kept []kvNet
	for _, n := range st.netcfg {
		port := a.engine.Port(n.ID)
		if port == nil {
			continue
		}
		var cur *router.Table
		if i := slices.IndexFunc(st.nets, func(k kvNet) bool { return k.port == port }); i >= 0 {
			cur = port.KV.Load()
		}
		want := st.wanted(n.ID, cur)
		if len(want) == 0 {
			if cur != nil { // its pools moved to another network
				port.KV.Store(nil)
			}
			continue
		}
		t, err := a.kvBuild(cur, self, n, want)
		if err != nil {
			if st.failed[n.Name] != fmt.Sprint(err) {
				a.log.Error("kv pools not routed", "network", n.Name, "err", err)
				st.failed[n.Name] = fmt.Sprint(err)
			}
			if cur != nil {
				kept = append(kept, kvNet{name: n.Name, port: port})
			}
			continue
		}
		delete(st.failed, n.Name)
		k := kvNet{name: n.Name, port: port}
		kept = append(kept, k)
		if t != cur {
			port.KV.Store(t)
			a.kvLogChanges(n.Name, cur, t)
			st.nets = append(slices.DeleteFunc(st.nets, func(o kvNet) bool { return o.port == port }), k)
			st.sync(k, t, now)
		}
	}
	// Networks gone (detached, or reopened on a new port) lose their
	// servers' watches.
	for _, o := range st.nets {
		if !slices.ContainsFunc(kept, func(k kvNet) bool { return k.port == o.port }) {
			st.sync(o, nil, now)
		}
	}
	st.nets = kept
	a.kvNets.Store(&kept)
}

// wanted returns the specs of network id's pools: those of the table in
// force first, in its order (flow slots name pools by index), then the
// new ones by name.
func (st *kvState) wanted(id uint32, cur *router.Table) []router.PoolSpec {
	var want []router.PoolSpec
	taken := map[string]bool{}
	if cur != nil {
		for _, p := range cur.Pools() {
			if r, ok := st.records[p.Name]; ok && r.Network == id {
				want = append(want, kvSpec(r))
				taken[p.Name] = true
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(st.records)) {
		if r := st.records[name]; r.Network == id && !taken[name] {
			want = append(want, kvSpec(r))
		}
	}
	return want
}

// kvBuild returns the table of network n with pools want: cur when it
// has them already, a new table otherwise.
func (a *Agent) kvBuild(cur *router.Table, self wire.SiteID, n config.Network, want []router.PoolSpec) (*router.Table, error) {
	if cur != nil {
		if reflect.DeepEqual(cur.Spec().Pools, want) {
			return cur, nil
		}
		return cur.WithPools(want)
	}
	spec := router.Spec{Self: self, Pools: want}
	if p, err := netip.ParsePrefix(n.Subnet); err == nil {
		spec.Subnet = p
	}
	return router.New(spec)
}

// kvLogChanges logs the pools of t that are new or at a new version.
func (a *Agent) kvLogChanges(network string, cur, t *router.Table) {
	for _, p := range t.Pools() {
		var old *router.Pool
		if cur != nil {
			old = cur.Pool(p.Name)
		}
		if old == nil {
			a.log.Info("kv pool routed", "pool", p.Name, "network", network, "address", p.VIP, "servers", len(p.Servers), "version", p.Version)
		} else if old.Version != p.Version {
			a.log.Info("kv pool version in force", "pool", p.Name, "network", network, "version", p.Version, "servers", len(p.Servers))
		}
	}
}

// kvActivate confirms the servers of this site that a change added
// (joining): once the server's MAC is known the pool goes out again
// without the flag, and the server takes its keys at every gateway; with
// no ARP reply within kvAddWait it goes out without the server. It runs
// on the kv loop, after every change and every tick.
func (a *Agent) kvActivate(st *kvState, now int64) {
	for _, name := range slices.Sorted(maps.Keys(st.records)) {
		p := st.records[name]
		for i, s := range p.Servers {
			if s.Flags&wire.KVServerJoining == 0 || s.Site != a.cfg.Site {
				continue
			}
			key := name + " " + s.Addr.String()
			if st.confirmed[key] >= p.Version {
				continue
			}
			srv, ks := st.server(p.Name, s.Addr)
			if srv == nil {
				continue // its network is not routed here
			}
			first, seen := st.joinSeen[key]
			if !seen {
				first = now
				st.joinSeen[key] = now
				if ks != nil {
					a.kvProbe(ks, now, false, true) // ARP for it at once
				}
			}
			q := p.Clone()
			_, known := srv.MAC()
			switch {
			case known:
				q.Servers[i].Flags &^= wire.KVServerJoining
				a.log.Info("kv server of this site confirmed", "pool", name, "server", s.Addr)
			case now-first > int64(kvAddWait):
				q.Servers = slices.Delete(q.Servers, i, i+1)
				a.log.Warn("kv server of this site not confirmed: no ARP reply; removed from the pool", "pool", name, "server", s.Addr, "waited", kvAddWait)
			default:
				continue
			}
			st.confirmed[key] = p.Version
			delete(st.joinSeen, key)
			q.Version++
			stamped, err := a.kvPublish(q)
			if err != nil {
				a.log.Error("kv pool change not published", "pool", name, "err", err)
				break
			}
			a.kvApply(st, []wire.KVPool{stamped}, nil, now)
			break // p changed: look again on the next call
		}
	}
}

// server returns the *Server of pool name at addr in force, and its watch.
func (st *kvState) server(pool string, addr netip.AddrPort) (*router.Server, *kvServer) {
	_, _, p := st.find(pool)
	if p == nil {
		return nil, nil
	}
	s := p.ServerAt(addr)
	if s == nil {
		return nil, nil
	}
	return s, st.watch(s)
}
