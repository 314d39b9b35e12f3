package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/wire"
)

// The key router's side of api.Backend: views of the pools and ring
// changes at run time. Each is a request into the kv loop (runKV), which
// owns kvState and is the only writer of the ports' KV pointers. A change
// builds a new table (router.Apply, Table.Replace) and swaps the pointer,
// so the data path never sees a half-made change and loses no request.
// A change is distributed to every gateway (kvdist.go): the control loop
// stamps it with the pool's next version, floods it and stores it before
// the API answers.

// kvAddWait bounds how long the site of an added server waits for its MAC
// (ARP) before it gives the server up.
const kvAddWait = time.Second

// kvConfirmWait bounds how long an add-server request waits for the
// server's site to confirm the server (kvActivate there) before it
// answers that the server is still joining.
const kvConfirmWait = 3 * time.Second

// kvPending is an add-server request waiting for the server's site to
// confirm it: the pool is distributed with the server joining (drained at
// every gateway, so the ring in force is the old one), its site learns
// its MAC and distributes the next version with the server taking its
// keys; only then does no gateway send it a request its site could not
// deliver.
type kvPending struct {
	pool     string
	addr     netip.AddrPort
	site     string
	deadline int64
	reply    chan kvResult
}

type kvResult struct {
	pool api.KVPool
	err  error
}

// errKVStopped answers requests made when the kv loop does not run.
var errKVStopped = errors.New("the agent's key router is not running")

// kvDo runs f on the kv loop and waits for it; false when the loop does
// not run.
func (a *Agent) kvDo(f func(st *kvState, now int64)) bool {
	if !a.running.Load() {
		return false
	}
	done := make(chan struct{})
	select {
	case a.kvReqs <- func(st *kvState, now int64) { f(st, now); close(done) }:
		<-done
		return true
	case <-a.stopped:
		return false
	}
}

// KVPools implements api.Backend.
func (a *Agent) KVPools() []api.KVPool {
	out := []api.KVPool{}
	a.kvDo(func(st *kvState, now int64) {
		for _, n := range st.nets {
			for _, p := range n.port.KV.Load().Pools() {
				out = append(out, st.view(n, p, now))
			}
		}
	})
	return out
}

// KVPool implements api.Backend.
func (a *Agent) KVPool(name string) (out api.KVPool, err error) {
	err = fmt.Errorf("%w: no kv pool %q at this gateway", api.ErrNotFound, name)
	a.kvDo(func(st *kvState, now int64) {
		if n, _, p := st.find(name); p != nil {
			out, err = st.view(n, p, now), nil
		}
	})
	return out, err
}

// KVChange implements api.Backend.
func (a *Agent) KVChange(pool string, c api.KVChange) (api.KVPool, error) {
	reply := make(chan kvResult, 1)
	if !a.kvDo(func(st *kvState, now int64) { a.kvChange(st, now, pool, c, reply) }) {
		return api.KVPool{}, errKVStopped
	}
	select {
	case r := <-reply:
		return r.pool, r.err
	case <-a.stopped:
		return api.KVPool{}, errKVStopped
	}
}

// KVPoolConfigs returns the pools in force at this gateway, changes made
// at run time included, as configuration values: the hook for storing
// run-time state durably. A drained server is returned as a plain server
// (the configuration has no drain yet).
func (a *Agent) KVPoolConfigs() []config.KVPool {
	var out []config.KVPool
	a.kvDo(func(st *kvState, _ int64) { out = st.configs() })
	return out
}

// configs returns the pools as configuration values.
func (st *kvState) configs() []config.KVPool {
	var out []config.KVPool
	for _, n := range st.nets {
		for _, p := range n.port.KV.Load().Pools() {
			ps := p.Spec()
			pc := config.KVPool{Name: ps.Name, Network: n.name, Address: ps.VIP.String(), Hash: ps.Hash.String()}
			if len(ps.Shards) > 0 {
				kvShardsConfig(ps, &pc)
				if r, ok := st.records[ps.Name]; ok && r.Version == ps.Version {
					pc.NearSites = slices.Clone(r.NearSites) // the spec has their IDs only
				}
				out = append(out, pc)
				continue
			}
			for _, s := range ps.Servers {
				pc.Servers = append(pc.Servers, config.KVServer{Address: s.Addr.String(), Weight: int(s.Weight), Site: s.SiteName})
			}
			out = append(out, pc)
		}
	}
	return out
}

// find returns the network, table and pool named name; a nil pool when
// there is none.
func (st *kvState) find(name string) (kvNet, *router.Table, *router.Pool) {
	for _, n := range st.nets {
		t := n.port.KV.Load()
		if p := t.Pool(name); p != nil {
			return n, t, p
		}
	}
	return kvNet{}, nil, nil
}

// kvParseChange turns the API's change into the router's, or says what is
// wrong with it.
func kvParseChange(c api.KVChange) (router.Change, error) {
	var ch router.Change
	switch c.Op {
	case api.KVAdd:
		ch.Op = router.AddServer
	case api.KVRemove:
		ch.Op = router.RemoveServer
	case api.KVDrain:
		ch.Op = router.Drain
	case api.KVUndrain:
		ch.Op = router.Undrain
	default:
		return ch, fmt.Errorf("%w: unknown change %q", api.ErrBadRequest, c.Op)
	}
	addr, err := netip.ParseAddrPort(c.Address)
	if err != nil {
		return ch, fmt.Errorf("%w: server address %q is not IPv4:port", api.ErrBadRequest, c.Address)
	}
	ch.Server.Addr = addr
	if ch.Op == router.AddServer {
		if c.Site == "" {
			return ch, fmt.Errorf("%w: server %v: the site is missing (the site whose network the server is on)", api.ErrBadRequest, addr)
		}
		ch.Server.Site, ch.Server.SiteName = wire.SiteIDFromName(c.Site), c.Site
		ch.Server.Weight = max(c.Weight, 1)
	}
	return ch, nil
}

// kvChange carries out a change on the kv loop: it checks it against the
// pool in force (router.Apply), has the control loop stamp, flood and
// store the next version, installs it here, and answers at once, or for
// an added server once the server's site has confirmed it.
func (a *Agent) kvChange(st *kvState, now int64, name string, c api.KVChange, reply chan kvResult) {
	fail := func(err error) { reply <- kvResult{err: err} }
	n, t, p := st.find(name)
	rec, ok := st.records[name]
	if p == nil || !ok {
		fail(fmt.Errorf("%w: no kv pool %q at this gateway", api.ErrNotFound, name))
		return
	}
	if slices.ContainsFunc(st.pending, func(q *kvPending) bool { return q.pool == name }) {
		fail(fmt.Errorf("%w: pool %s: another change is waiting for a new server's site to confirm it; try again", api.ErrBadRequest, name))
		return
	}
	ch, err := kvParseChange(c)
	if err != nil {
		fail(err)
		return
	}
	_, err = router.Apply(t.Subnet(), p.Spec(), ch)
	switch {
	case errors.Is(err, router.ErrReplicated):
		fail(fmt.Errorf("%w: pool %s has shards of replicas, which kv %s does not change yet: edit its shards in the configuration file of one site and run `detour reload` there; the new version reaches every gateway",
			api.ErrBadRequest, name, c.Op))
		return
	case errors.Is(err, router.ErrUnknownServer):
		fail(fmt.Errorf("%w: %v", api.ErrNotFound, err))
		return
	case err != nil:
		fail(fmt.Errorf("%w: %v", api.ErrBadRequest, err))
		return
	}
	q := kvChanged(rec, ch)
	stamped, err := a.kvPublish(q)
	if err != nil {
		fail(fmt.Errorf("%w: %v", api.ErrBadRequest, err))
		return
	}
	a.kvApply(st, []wire.KVPool{stamped}, nil, now)
	a.log.Info("kv pool changed", "pool", name, "change", ch.Op, "server", ch.Server.Addr, "version", stamped.Version)
	if ch.Op != router.AddServer {
		reply <- kvResult{pool: st.view(n, n.port.KV.Load().Pool(name), now)}
		return
	}
	st.pending = append(st.pending, &kvPending{pool: name, addr: ch.Server.Addr, site: ch.Server.SiteName, deadline: now + int64(kvConfirmWait), reply: reply})
	a.kvActivate(st, now) // a server of this site whose MAC is known
	a.kvFinishPending(st, now)
}

// kvChanged returns pool p after change ch (which router.Apply accepted),
// its version one higher; an added server is joining.
func kvChanged(p wire.KVPool, ch router.Change) wire.KVPool {
	q := p.Clone()
	q.Version++
	i := slices.IndexFunc(q.Servers, func(s wire.KVServer) bool { return s.Addr == ch.Server.Addr })
	switch ch.Op {
	case router.AddServer:
		q.Servers = append(q.Servers, wire.KVServer{Addr: ch.Server.Addr, Weight: uint16(ch.Server.Weight), Site: ch.Server.SiteName,
			Flags: wire.KVServerJoining})
	case router.RemoveServer:
		q.Servers = slices.Delete(q.Servers, i, i+1)
	case router.Drain:
		q.Servers[i].Flags |= wire.KVServerDrained
	case router.Undrain:
		q.Servers[i].Flags &^= wire.KVServerDrained
	}
	return q
}

// kvFinishPending answers the additions whose server's site confirmed the
// server (it takes keys), or gave it up, or did not answer in time.
func (a *Agent) kvFinishPending(st *kvState, now int64) {
	st.pending = slices.DeleteFunc(st.pending, func(q *kvPending) bool {
		rec := st.records[q.pool]
		i := slices.IndexFunc(rec.Servers, func(s wire.KVServer) bool { return s.Addr == q.addr })
		n, _, p := st.find(q.pool)
		switch {
		case i >= 0 && rec.Servers[i].Flags&wire.KVServerJoining == 0 && p != nil:
			q.reply <- kvResult{pool: st.view(n, p, now)}
		case i < 0:
			q.reply <- kvResult{err: fmt.Errorf("%w: pool %s, server %v: site %s had no ARP reply from it within %v on its network; not added",
				api.ErrBadRequest, q.pool, q.addr, q.site, kvAddWait)}
		case now > q.deadline:
			q.reply <- kvResult{err: fmt.Errorf("%w: pool %s, server %v: site %s has not confirmed it within %v (is the site up?); it is in the pool, joining, and takes no keys until the site confirms it",
				api.ErrBadRequest, q.pool, q.addr, q.site, kvConfirmWait)}
		default:
			return false
		}
		return true
	})
}

// failPending answers the changes still waiting when the loop stops.
func (st *kvState) failPending() {
	for _, q := range st.pending {
		q.reply <- kvResult{err: errKVStopped}
	}
	st.pending = nil
}

// sync makes the watched servers of network n those of table t: a server
// that stays keeps its watch (health, retries, round trips), a new one
// gets one, a removed one loses it.
func (st *kvState) sync(n kvNet, t *router.Table, now int64) {
	old := map[*router.Server]*kvServer{}
	var out []*kvServer
	for _, ks := range st.servers {
		if ks.port == n.port {
			old[ks.s] = ks
		} else {
			out = append(out, ks)
		}
	}
	var pools []*router.Pool
	if t != nil { // nil: the network is gone
		pools = t.Pools()
	}
	for _, p := range pools {
		for i, s := range p.Servers {
			ks := old[s]
			if ks == nil {
				ks = &kvServer{s: s, port: n.port, retry: kvRetryMin, since: now}
			}
			ks.pool, ks.drained = p, p.Drained[i]
			out = append(out, ks)
		}
	}
	st.servers = out
	st.track(now)
}

// track records when each server's state last changed.
func (st *kvState) track(now int64) {
	for _, ks := range st.servers {
		if s := ks.stateNow(); s != ks.state {
			if ks.state != "" {
				ks.changes++
			}
			ks.state, ks.since = s, now
		}
	}
}

// stateNow is the server's state as the API shows it.
func (ks *kvServer) stateNow() string {
	switch {
	case ks.drained:
		return "drained"
	case ks.siteDown:
		return "site-down"
	case ks.s.Down():
		return "down"
	}
	return "up"
}

// view describes pool p of network n.
func (st *kvState) view(n kvNet, p *router.Pool, now int64) api.KVPool {
	spec := p.Spec()
	v := api.KVPool{Name: p.Name, Network: n.name, Address: p.VIP.String(), Hash: p.Hash.String(), Version: p.Version,
		Counters: kvPoolCounters(p), Servers: []api.KVServer{}}
	if r, ok := st.records[p.Name]; ok && r.Version == p.Version {
		v.Origin = st.names[r.Origin]
		if v.Origin == "" {
			v.Origin = r.Origin.String()
		}
		v.NearSites = slices.Clone(r.NearSites) // the spec has their IDs only
	}
	if len(spec.Shards) > 0 {
		v.Policy, v.Hedge = spec.Policy.String(), spec.Hedge
		for _, sh := range spec.Shards {
			v.Shards = append(v.Shards, api.KVShard{Name: sh.Name, Weight: sh.Weight})
		}
	}
	for i, s := range p.Servers {
		sv := api.KVServer{Address: s.Addr.String(), Site: s.SiteName, Weight: max(spec.Servers[i].Weight, 1), Local: s.Local, Shard: s.Shard, Tier: s.Tier,
			Requests: s.Requests.Load(), Replies: s.Replies.Load(), Failovers: s.FailedOver.Load(),
			PaceMs: float64(s.Pace()) / 1e6}
		if ks := st.watch(s); ks != nil {
			sv.State, sv.SinceSeconds, sv.StateChanges, sv.Errors = ks.state, float64(now-ks.since)/1e9, ks.changes, ks.errors
			sv.Latency = ks.latency()
		}
		if r, ok := st.records[p.Name]; ok {
			if j := slices.IndexFunc(r.Servers, func(x wire.KVServer) bool { return x.Addr == s.Addr }); j >= 0 && r.Servers[j].Flags&wire.KVServerJoining != 0 {
				sv.State = "joining"
			}
		}
		v.Servers = append(v.Servers, sv)
	}
	return v
}

// watch returns the watch of server s.
func (st *kvState) watch(s *router.Server) *kvServer {
	for _, ks := range st.servers {
		if ks.s == s {
			return ks
		}
	}
	return nil
}

// latency summarises the kept health-check round trips; nil for none.
func (ks *kvServer) latency() *api.KVLatency {
	n := min(ks.nrtt, kvRTTSamples)
	if n == 0 {
		return nil
	}
	d := slices.Clone(ks.rtt[:n])
	slices.Sort(d)
	return &api.KVLatency{P50Ms: ms(d[(n-1)*50/100]), P99Ms: ms(d[(n-1)*99/100]), Samples: n}
}

// kvStatus adds the pools' summaries to a status, and their totals to its
// counters (kv_requests, kv_replies, kv_errors, kv_failed_over), which the
// map page shows.
func (a *Agent) kvStatus(s *api.Status) {
	for _, p := range a.KVPools() {
		sum := api.KVPoolSummary{Name: p.Name, Address: p.Address, Version: p.Version, Servers: len(p.Servers),
			Requests: p.Counters["requests"], Replies: p.Counters["replies"], Errors: p.Counters["errors"], FailedOver: p.Counters["failed_over"]}
		for _, sv := range p.Servers {
			if sv.State == "up" {
				sum.Up++
			}
		}
		s.KVPools = append(s.KVPools, sum)
		if s.Counters == nil {
			s.Counters = map[string]uint64{}
		}
		s.Counters["kv_requests"] += sum.Requests
		s.Counters["kv_replies"] += sum.Replies
		s.Counters["kv_errors"] += sum.Errors
		s.Counters["kv_failed_over"] += sum.FailedOver
		// Where reads of replicated pools went (issue 18), for the map page.
		if reads := p.Counters["reads_local"] + p.Counters["reads_nearby"] + p.Counters["reads_remote"]; reads > 0 {
			for _, k := range []string{"reads_local", "reads_nearby", "reads_remote", "hedges_sent"} {
				s.Counters["kv_"+k] += p.Counters[k]
			}
		}
	}
}
