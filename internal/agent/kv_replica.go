package agent

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/router"
)

// Replicated pools (issue 18), the agent's side: feeding the router each
// server's path round trip from the overlay's routes, expiring the
// router's soft state, the API's `kv why` and the metrics of where reads
// went. Their shards travel in the pool's record (kvdist.go).

// kvShardsConfig returns the shards of a pool spec as configuration.
func kvShardsConfig(ps router.PoolSpec, pc *config.KVPool) {
	pc.Policy = ps.Policy.String()
	hedge := ps.Hedge
	pc.Hedge = &hedge
	for _, sh := range ps.Shards {
		pc.Shards = append(pc.Shards, config.KVShard{Name: sh.Name, Weight: int(sh.Weight)})
	}
	for _, s := range ps.Servers {
		if s.Shard >= 0 && s.Shard < len(pc.Shards) {
			pc.Shards[s.Shard].Replicas = append(pc.Shards[s.Shard].Replicas, config.KVReplica{Address: s.Addr.String(), Site: s.SiteName, Tier: s.Tier})
		}
	}
}

// kvPathRTT gives the router a server's path round trip: twice the
// one-way estimate of the route the overlay uses to its site, relays
// included (the figure `detour why` shows for the chosen path).
func kvPathRTT(s *router.Server, routes datapath.Routes) {
	if s.Local {
		return
	}
	if rt, ok := routes.Lookup(s.Site); ok {
		s.SetPathRTT(2 * int64(rt.OneWayEstimate))
	}
}

// kvExpire lets the replicated pools give up requests never answered.
func (st *kvState) kvExpire(now int64) {
	for _, n := range st.nets {
		for _, p := range n.port.KV.Load().Pools() {
			p.Expire(now)
		}
	}
}

// KVWhy implements api.KVWhyBackend.
func (a *Agent) KVWhy(pool, key string) (out api.KVWhy, err error) {
	err = fmt.Errorf("%w: no kv pool %q at this gateway", api.ErrNotFound, pool)
	a.kvDo(func(st *kvState, now int64) {
		if _, _, p := st.find(pool); p != nil {
			out, err = kvWhyView(p, key, now), nil
		}
	})
	return out, err
}

// kvWhyView explains where a read of key in pool p goes now.
func kvWhyView(p *router.Pool, key string, now int64) api.KVWhy {
	w := p.Why([]byte(key), now)
	v := api.KVWhy{Pool: p.Name, Key: key, Shard: w.Shard, Owner: w.Owner, Policy: w.Policy.String(), SizeBytes: w.Size,
		SizeKnown: w.SizeKnown, SizeClass: classText(replica.Class(w.Size)), Reads: w.Reads, Explored: w.Explored, Hedges: w.Hedges,
		Replicas: []api.KVReplicaWhy{}}
	if w.Shard >= 0 {
		v.ShardName = p.Shards[w.Shard].Name
	}
	for _, r := range w.Replicas {
		pr := r.Prediction
		rv := api.KVReplicaWhy{Address: r.Server.Addr.String(), Site: r.Server.SiteName, Tier: r.Server.Tier, Local: r.Server.Local,
			Usable: r.Usable, Chosen: r.Chosen, PredictedMs: nsMs(pr.Total), RTTMs: nsMs(pr.RTT), ServiceMs: nsMs(pr.Service),
			QueueMs: nsMs(pr.Queue), TransferMs: nsMs(pr.Transfer), ThroughputMBps: pr.Throughput / 1e6, Outstanding: r.Outstanding,
			Samples: r.Class.Samples, ServiceDevMs: nsMs(r.Class.Dev), SampleAgeSeconds: float64(r.Class.Age) / 1e9}
		if pr.From >= 0 && pr.From != pr.Class {
			rv.ServiceFrom = classText(pr.From)
		}
		if r.Chosen {
			v.Chosen = rv.Address
		}
		v.Replicas = append(v.Replicas, rv)
	}
	return v
}

// classText names a size class by its upper bound.
func classText(c int) string {
	if c >= replica.NumClasses-1 {
		return "> 1 MB"
	}
	n := replica.ClassLimit(c)
	if n >= 1<<20 {
		return fmt.Sprintf("<= %d MB", n>>20)
	}
	return fmt.Sprintf("<= %d KB", n>>10)
}

func nsMs(ns int64) float64 { return float64(ns) / 1e6 }

var (
	kvReadsDesc  = prometheus.NewDesc("detour_kv_reads_total", "Reads of a replicated pool by where the replica they went to is: local (this site), nearby (near_sites, or path RTT below 30 ms without them), remote.", []string{"pool", "where"}, nil)
	kvHedgesDesc = prometheus.NewDesc("detour_kv_hedges_total", "Hedged reads of a replicated pool: sent, and won (the hedge's reply reached the client first).", []string{"pool", "outcome"}, nil)
)

// collectReplicas exports a replicated pool's read placement and hedges.
func collectReplicas(ch chan<- prometheus.Metric, p *router.Pool) {
	if !p.Replicated() {
		return
	}
	st := p.Stats
	for where, v := range map[string]uint64{"local": st.ReadsLocal.Load(), "nearby": st.ReadsNearby.Load(), "remote": st.ReadsRemote.Load()} {
		ch <- prometheus.MustNewConstMetric(kvReadsDesc, prometheus.CounterValue, float64(v), p.Name, where)
	}
	ch <- prometheus.MustNewConstMetric(kvHedgesDesc, prometheus.CounterValue, float64(st.HedgesSent.Load()), p.Name, "sent")
	ch <- prometheus.MustNewConstMetric(kvHedgesDesc, prometheus.CounterValue, float64(st.HedgesWon.Load()), p.Name, "won")
}
