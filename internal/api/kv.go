package api

import (
	"fmt"
	"net/http"
)

// The key router's pools (issue 17): read views on both listeners, ring
// changes on the unix socket only.
//
//	 GET    /v1/kv/pools                                []KVPool
//	 GET    /v1/kv/pools/{name}                         KVPool (404 for an unknown pool)
//	*POST   /v1/kv/pools/{name}/servers                 KVServerAdd: add a server
//	*DELETE /v1/kv/pools/{name}/servers/{addr}          remove it
//	*POST   /v1/kv/pools/{name}/servers/{addr}/drain    drain it: no new keys
//	*DELETE /v1/kv/pools/{name}/servers/{addr}/drain    undrain it
//
// Each change answers with the pool as it is afterwards, at a higher
// version. A change is distributed to every gateway over the overlay's
// control plane (docs/kv.md); an added server answers once its own site
// has confirmed it (learned its MAC).

// KVPool is a pool of the key router at this gateway.
type KVPool struct {
	Name    string `json:"name"`
	Network string `json:"network"`
	// Address is the virtual address, IPv4:port.
	Address string `json:"address"`
	Hash    string `json:"hash"`
	// Version is the pool's version in force at this gateway: pools are
	// distributed, so once a change has spread every gateway shows the
	// same version. Origin is the site that made it.
	Version  uint64            `json:"version"`
	Origin   string            `json:"origin,omitempty"`
	Servers  []KVServer        `json:"servers"`
	Counters map[string]uint64 `json:"counters"`
	// Shards, Policy, Hedge and NearSites are set for a pool with shards
	// of replicas (docs/replicas.md): its shards, how a read picks a
	// replica, whether reads are hedged, and the declared near zone.
	Shards    []KVShard `json:"shards,omitempty"`
	Policy    string    `json:"policy,omitempty"`
	Hedge     bool      `json:"hedge,omitempty"`
	NearSites []string  `json:"near_sites,omitempty"`
}

// KVShard is one shard of a replicated pool.
type KVShard struct {
	Name   string `json:"name,omitempty"`
	Weight uint32 `json:"weight"`
}

// KVServer is one server of a pool.
type KVServer struct {
	Address string `json:"address"`
	Site    string `json:"site"`
	Weight  uint32 `json:"weight"`
	// Local is true for a server on this site's network (checked from
	// this gateway every 100 ms).
	Local bool `json:"local"`
	// Shard is the index of the shard the server holds (a replica of,
	// in a pool with shards; its own otherwise) and Tier its storage.
	Shard int    `json:"shard"`
	Tier  string `json:"tier,omitempty"`
	// State is up, down (health checks or passive detection), site-down
	// (the overlay lost its site) or drained.
	State        string  `json:"state"`
	SinceSeconds float64 `json:"since_seconds"`
	// StateChanges counts the changes of State since this gateway first
	// saw the server: a server that went down and was readmitted once
	// shows 2, one that flaps more.
	StateChanges uint64 `json:"state_changes"`
	Requests     uint64 `json:"requests"`
	// Replies counts the server's replies this gateway saw, those to
	// its health checks included.
	Replies uint64 `json:"replies"`
	// Errors counts health checks that went unanswered and the times
	// passive detection found requests unanswered in time.
	Errors uint64 `json:"errors"`
	// Failovers counts requests for the server's keys that went to
	// another server because it was down or drained.
	Failovers uint64 `json:"failovers"`
	// PaceMs is how long the server's oldest request usually waits for
	// its reply, as this gateway sees it (path and service time, the
	// slow end); passive detection waits three times that before it
	// takes the server out, and at least max(3 × path RTT, 50 ms).
	PaceMs float64 `json:"pace_ms"`
	// Latency is the gateway-seen round trip of the health checks (a
	// binary noop, so the network and memcached's own turnaround), nil
	// when the server is not checked from here (another site's) or not
	// answered yet.
	Latency *KVLatency `json:"latency,omitempty"`
}

// KVLatency summarises a server's recent health-check round trips.
type KVLatency struct {
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	Samples int     `json:"samples"`
}

// KVServerAdd is a server to add to a pool.
type KVServerAdd struct {
	// Address is IPv4:port on the pool's network.
	Address string `json:"address"`
	Site    string `json:"site"`
	// Weight is the server's share of keys; 0 means 1.
	Weight uint32 `json:"weight,omitempty"`
}

// KVChange is a change to a pool's servers, as the Backend receives it.
type KVChange struct {
	// Op is add-server, remove-server, drain or undrain.
	Op string
	KVServerAdd
}

// The operations of a KVChange.
const (
	KVAdd     = "add-server"
	KVRemove  = "remove-server"
	KVDrain   = "drain"
	KVUndrain = "undrain"
)

func (s *Server) kvReads(mux *http.ServeMux) {
	b := s.b
	mux.HandleFunc("GET /v1/kv/pools", func(w http.ResponseWriter, r *http.Request) { reply(w, b.KVPools(), nil) })
	mux.HandleFunc("GET /v1/kv/pools/{name}", func(w http.ResponseWriter, r *http.Request) {
		p, err := b.KVPool(r.PathValue("name"))
		reply(w, p, err)
	})
	s.kvWhy(mux)
}

func (s *Server) kvChanges(mux *http.ServeMux) {
	b := s.b
	mux.HandleFunc("POST /v1/kv/pools/{name}/servers", func(w http.ResponseWriter, r *http.Request) {
		var add KVServerAdd
		if err := decode(r, &add); err != nil {
			reply(w, nil, err)
			return
		}
		name := r.PathValue("name")
		what := fmt.Sprintf("kv add-server %s %s site %s weight %d", name, add.Address, add.Site, add.Weight)
		s.change(w, r, what, func() (any, error) { return b.KVChange(name, KVChange{Op: KVAdd, KVServerAdd: add}) })
	})
	one := func(op string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			name, addr := r.PathValue("name"), r.PathValue("addr")
			s.change(w, r, "kv "+op+" "+name+" "+addr, func() (any, error) {
				return b.KVChange(name, KVChange{Op: op, KVServerAdd: KVServerAdd{Address: addr}})
			})
		}
	}
	mux.HandleFunc("DELETE /v1/kv/pools/{name}/servers/{addr}", one(KVRemove))
	mux.HandleFunc("POST /v1/kv/pools/{name}/servers/{addr}/drain", one(KVDrain))
	mux.HandleFunc("DELETE /v1/kv/pools/{name}/servers/{addr}/drain", one(KVUndrain))
}

// KVPoolSummary is a pool in Status: its version, servers and counters.
type KVPoolSummary struct {
	Name       string `json:"name"`
	Address    string `json:"address"`
	Version    uint64 `json:"version"`
	Servers    int    `json:"servers"`
	Up         int    `json:"up"`
	Requests   uint64 `json:"requests"`
	Replies    uint64 `json:"replies"`
	Errors     uint64 `json:"errors"`
	FailedOver uint64 `json:"failed_over"`
}
