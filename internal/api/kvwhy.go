package api

import (
	"fmt"
	"net/http"
)

// Where a read of a replicated pool goes (issue 18), on both listeners:
//
//	GET /v1/kv/pools/{name}/why?key=KEY    KVWhy (404 for an unknown pool)
//
// A Backend that implements KVWhyBackend serves it.

// KVWhyBackend explains the choice of replica for a key.
type KVWhyBackend interface {
	KVWhy(pool, key string) (KVWhy, error)
}

// KVWhy explains where a read of a key goes now and why.
type KVWhy struct {
	Pool string `json:"pool"`
	Key  string `json:"key"`
	// Shard is the index of the key's shard now (its ring owner, or the
	// failover when every replica of the owner is down), Owner the ring
	// owner's; ShardName its ketama name.
	Shard     int    `json:"shard"`
	Owner     int    `json:"owner"`
	ShardName string `json:"shard_name"`
	// Policy is predicted, local-first, static-zone or nearest-rtt.
	Policy string `json:"policy"`
	// SizeBytes is the value size predicted for: the key's last seen
	// (SizeKnown) or the pool's typical reply; SizeClass its class.
	SizeBytes int    `json:"size_bytes"`
	SizeKnown bool   `json:"size_known"`
	SizeClass string `json:"size_class"`
	// Chosen is the address of the replica a read goes to now ("" when
	// none is usable).
	Chosen   string         `json:"chosen"`
	Replicas []KVReplicaWhy `json:"replicas"`
	// Reads, Explored and Hedges are the pool's reads chosen for, reads
	// also sent to refresh an estimate, and hedges sent.
	Reads    uint64 `json:"reads"`
	Explored uint64 `json:"explored"`
	Hedges   uint64 `json:"hedges"`
}

// KVReplicaWhy is one replica's predicted fetch time and its parts:
// PredictedMs = RTTMs + ServiceMs + QueueMs + TransferMs.
type KVReplicaWhy struct {
	Address string `json:"address"`
	Site    string `json:"site"`
	Tier    string `json:"tier,omitempty"`
	Local   bool   `json:"local"`
	Usable  bool   `json:"usable"`
	Chosen  bool   `json:"chosen"`
	// PredictedMs is the predicted fetch time; RTTMs the round trip of
	// the overlay's path to the replica's site; ServiceMs the server's
	// service time in the size class as seen from here (reply time minus
	// path RTT; the median of the class's last 8 samples); QueueMs the
	// penalty for the Outstanding requests; TransferMs the size over
	// ThroughputMBps, the path's observed throughput.
	PredictedMs    float64 `json:"predicted_ms"`
	RTTMs          float64 `json:"rtt_ms"`
	ServiceMs      float64 `json:"service_ms"`
	QueueMs        float64 `json:"queue_ms"`
	TransferMs     float64 `json:"transfer_ms"`
	ThroughputMBps float64 `json:"throughput_mbps"`
	Outstanding    int     `json:"outstanding"`
	// Samples is the service-time samples in the class; ServiceFrom the
	// class the service time was taken from when the read's has none
	// ("" when nothing is known yet); SampleAgeSeconds the age of the
	// class's last sample.
	Samples          int     `json:"samples"`
	ServiceFrom      string  `json:"service_from,omitempty"`
	ServiceDevMs     float64 `json:"service_dev_ms"`
	SampleAgeSeconds float64 `json:"sample_age_seconds"`
}

func (s *Server) kvWhy(mux *http.ServeMux) {
	b, ok := s.b.(KVWhyBackend)
	if !ok {
		return
	}
	mux.HandleFunc("GET /v1/kv/pools/{name}/why", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		if key == "" {
			reply(w, nil, fmt.Errorf("%w: the key is missing (?key=KEY)", ErrBadRequest))
			return
		}
		y, err := b.KVWhy(r.PathValue("name"), key)
		reply(w, y, err)
	})
}
