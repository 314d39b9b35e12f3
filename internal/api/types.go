// Package api is the agent's local HTTP JSON API: the response types (the
// contract between the agent and the CLI), the server that serves them with
// the Prometheus metrics, and the client the CLI uses.
//
// The API is served twice. The agent's TCP address (api:, 127.0.0.1:7447
// by default) serves only the read-only views (GET and HEAD): it answers
// 405 to any other method, 403 to a Host header that is not its own
// address or localhost (DNS rebinding), 401 without the bearer token when
// it has one (required off loopback), and sends no CORS headers. The
// agent's unix socket (api_socket:, see LocalSocket) serves everything,
// changes included, to root and the members of group detour: the file's
// mode lets only them connect, and each caller's credentials are checked
// again (SO_PEERCRED) and logged with each change. Changes with a body
// must send it as Content-Type: application/json (415 otherwise).
//
// Endpoints (all JSON; those marked * on the unix socket only):
//
//	 GET    /v1/status                 Status
//	 GET    /v1/links                  []Link: the measured matrix
//	 GET    /v1/routes                 []Route: the path to every site
//	 GET    /v1/tivs                   []TIV: pairs where a detour beats the direct path
//	 GET    /v1/why/{site}             Why: the candidates for one destination
//	 GET    /v1/fdb                    []FDBEntry
//	*POST   /v1/pins                   Pin: force a path to a destination
//	*DELETE /v1/pins/{site}            remove a pin
//	*POST   /v1/forbidden/{site}       never use site as a relay
//	*DELETE /v1/forbidden/{site}       allow it again
//	 GET    /v1/networks               []Network: the networks this site carries
//	*POST   /v1/networks               Network: attach a network at run time
//	*DELETE /v1/networks/{name}        detach it
//	*PUT    /v1/networks/{name}/limits Limits: change its rates
//	*PUT    /v1/egress                 Egress: the site's total egress capacity
//	 GET    /v1/kv/pools               []KVPool: the key router's pools (kv.go)
//	 GET    /v1/kv/pools/{name}        KVPool
//	*POST   /v1/kv/pools/{name}/servers ...  ring changes (kv.go)
//	 GET    /metrics                   Prometheus text format
//
// Errors are returned as {"error": "..."} with a 4xx or 5xx status.
package api

import "time"

// Status describes the agent and its view of the overlay.
type Status struct {
	Site          string  `json:"site"`
	ID            string  `json:"id"`
	Version       string  `json:"version"`
	Listen        string  `json:"listen"`
	Encrypted     bool    `json:"encrypted"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	// ProbeIntervalMS and DownAfterMS are the probe interval and failure
	// detection time in force (they grow with the members beyond what
	// max_probe_rate allows at the configured interval).
	ProbeIntervalMS float64   `json:"probe_interval_ms"`
	DownAfterMS     float64   `json:"down_after_ms"`
	Members         []Member  `json:"members"`
	Networks        []Network `json:"networks"`
	Pins            []Pin     `json:"pins"`
	Forbidden       []string  `json:"forbidden_relays"`
	// FloodLoops are the networks on which a flooding loop was seen in
	// the last 10 s (the looping frames are not flooded).
	FloodLoops []FloodLoop `json:"flood_loops,omitempty"`
	// Waiting are the pins and forbidden relays of the run-time state
	// whose sites have not joined since the agent started ("pin SITE",
	// "forbid SITE"); they apply when the sites join.
	Waiting []string `json:"waiting_overrides,omitempty"`
	// ProbeBytes is what this site's packet trains (available-throughput
	// probes) cost so far, IP and UDP headers included, and
	// ProbeBudgetBytesPerSecond the budget they are sent within (zero:
	// none are sent). See docs/throughput.md.
	ProbeBytes                uint64            `json:"probe_bytes"`
	ProbeBudgetBytesPerSecond int               `json:"probe_budget_bytes_per_second"`
	Counters                  map[string]uint64 `json:"counters"`
	// KVPools summarises the key router's pools at this gateway (their
	// totals are also in Counters: kv_requests, kv_replies, kv_errors,
	// kv_failed_over).
	KVPools []KVPoolSummary `json:"kv_pools,omitempty"`
	// LastChange is the last change made through the API since the agent
	// started; nil for none.
	LastChange *Change `json:"last_change,omitempty"`
}

// FloodLoop is a loop seen on a network: the same flooded frame read from
// the network's device again and again.
type FloodLoop struct {
	Network string `json:"network"`
	// Source is the source MAC address of the last looping frame.
	Source string `json:"source"`
	// Loops counts the loops seen on the network since the agent started.
	Loops uint64 `json:"loops"`
}

// Change is a change made through the API: what, by whom, when.
type Change struct {
	What string    `json:"what"`
	UID  uint32    `json:"uid"`
	User string    `json:"user"`
	PID  int32     `json:"pid"`
	At   time.Time `json:"at"`
}

// Member is a site of the overlay as this agent sees it.
type Member struct {
	Name         string  `json:"name"`
	ID           string  `json:"id"`
	Address      string  `json:"address"`
	State        string  `json:"state"`
	SinceSeconds float64 `json:"since_seconds"`
}

// Network is a virtual L2 network this site has joined, or asks to join
// (POST /v1/networks). Rates are written like "20mbit"; empty for none.
type Network struct {
	Name   string `json:"name"`
	ID     uint32 `json:"id"`
	TAP    string `json:"tap"`
	Bridge string `json:"bridge,omitempty"`
	MTU    int    `json:"mtu,omitempty"`
	// QueueLen is the TAP device's queue in frames; zero for the kernel's.
	QueueLen int    `json:"queue_len,omitempty"`
	MaxRate  string `json:"max_rate,omitempty"`
	MinRate  string `json:"min_rate,omitempty"`
	// Subnet is the network's IPv4 subnet at this site, needed by the
	// key-value pools that serve the network (empty: none).
	Subnet string `json:"subnet,omitempty"`
}

// Limits changes a network's rates (PUT /v1/networks/{name}/limits).
type Limits struct {
	MaxRate string `json:"max_rate"`
	MinRate string `json:"min_rate"`
}

// Egress changes the site's total egress capacity (PUT /v1/egress).
type Egress struct {
	Rate string `json:"rate"`
}

// Reload is the answer to POST /v1/reload: what the agent changed to
// follow its configuration file, and what it dropped of the run-time
// state because the file now says otherwise.
type Reload struct {
	Applied []string `json:"applied"`
	Notes   []string `json:"notes,omitempty"`
}

// Link is one directed pair of the measured matrix.
//
// ShiftedMs is the offset-shifted one-way delay d(from,to)+o(from)-o(to):
// exact for comparing paths with the same endpoints, but not an absolute
// delay. OneWayMs is an estimate of the absolute one-way delay: the pair's
// RTT split so that both directions keep their measured difference.
type Link struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	Up        bool    `json:"up"`
	ShiftedMs float64 `json:"shifted_ms"`
	// MeanShiftedMs is the mean of the recent offset-shifted samples,
	// queueing included; only for the agent's own links.
	MeanShiftedMs float64 `json:"mean_shifted_ms,omitempty"`
	OneWayMs      float64 `json:"one_way_ms"`
	RTTMs         float64 `json:"rtt_ms"`
	// LossPct is the loss of the link's direction (From → To), over
	// LossSamples probes, with its 95 % interval.
	LossPct     float64 `json:"loss_pct"`
	LossLowPct  float64 `json:"loss_low_pct"`
	LossHighPct float64 `json:"loss_high_pct"`
	LossSamples int     `json:"loss_samples"`
	// ReturnLossPct is the loss of the replies coming back (To → From),
	// over ReturnLossSamples; only for the agent's own links.
	ReturnLossPct     float64 `json:"return_loss_pct,omitempty"`
	ReturnLossSamples int     `json:"return_loss_samples,omitempty"`
	JitterMs          float64 `json:"jitter_ms"`
	AgeMs             float64 `json:"age_ms"`
	// RateMbps is the link's available throughput as its receiver (To)
	// estimates it, RateKind what that rests on (lower-bound, train,
	// saturated) and RateAgeS its age; absent when nothing is known.
	RateMbps float64 `json:"rate_mbps,omitempty"`
	RateKind string  `json:"rate_kind,omitempty"`
	RateAgeS float64 `json:"rate_age_s,omitempty"`
}

// Route is this site's path to one destination.
//
// LatencyMs and DirectMs are estimated one-way delays (see Link.OneWayMs);
// their difference, SavingMs, is exact.
type Route struct {
	Dest      string   `json:"dest"`
	Path      []string `json:"path"`
	Relayed   bool     `json:"relayed"`
	LatencyMs float64  `json:"latency_ms"`
	DirectMs  float64  `json:"direct_ms"`
	SavingMs  float64  `json:"saving_ms"`
	Pinned    bool     `json:"pinned"`
	Changes   uint64   `json:"changes"`
	// Backup is the second path frames are also sent on while Path is in
	// doubt (probes on it unanswered); empty otherwise.
	Backup []string `json:"backup,omitempty"`
	// RateMbps is the available throughput of Path's bottleneck (zero if
	// unknown), and Bulk the path bulk flows take when it is not Path.
	RateMbps float64    `json:"rate_mbps,omitempty"`
	Bulk     *BulkRoute `json:"bulk,omitempty"`
}

// BulkRoute is the path bulk flows take to a destination: the widest
// bottleneck within the latency bound of the latency path. ExtraMs is how
// much longer it is than the latency path (exact).
type BulkRoute struct {
	Path      []string `json:"path"`
	RateMbps  float64  `json:"rate_mbps"`
	LatencyMs float64  `json:"latency_ms"`
	ExtraMs   float64  `json:"extra_ms"`
}

// TIV is a directed pair for which a path through other sites is faster
// than the direct one: a triangle-inequality violation.
type TIV struct {
	From     string   `json:"from"`
	To       string   `json:"to"`
	Via      []string `json:"via"`
	DirectMs float64  `json:"direct_ms"`
	BestMs   float64  `json:"best_ms"`
	SavingMs float64  `json:"saving_ms"`
}

// Why explains the route to one destination.
type Why struct {
	Dest       string      `json:"dest"`
	Chosen     []string    `json:"chosen"`
	Reason     string      `json:"reason"`
	Candidates []Candidate `json:"candidates"`
	// Bulk explains the path bulk flows take.
	Bulk *WhyBulk `json:"bulk,omitempty"`
}

// WhyBulk explains the bulk path to a destination: Chosen is empty when
// bulk flows take the latency path. A bulk path may be BoundMs longer
// than the latency path and must offer MinGain times its rate.
type WhyBulk struct {
	Enabled      bool            `json:"enabled"`
	Chosen       []string        `json:"chosen,omitempty"`
	RateMbps     float64         `json:"rate_mbps"`
	PathRateMbps float64         `json:"path_rate_mbps"`
	BoundMs      float64         `json:"bound_ms"`
	MinGain      float64         `json:"min_gain"`
	Reason       string          `json:"reason"`
	Candidates   []BulkCandidate `json:"candidates"`
}

// BulkCandidate is a path considered for bulk flows, widest first: its
// bottleneck rate (zero: a link's rate is unknown), how much longer than
// the latency path it is, and each link's rate.
type BulkCandidate struct {
	Path        []string   `json:"path"`
	RateMbps    float64    `json:"rate_mbps"`
	ExtraMs     float64    `json:"extra_ms"`
	WithinBound bool       `json:"within_bound"`
	Note        string     `json:"note,omitempty"`
	Links       []LinkRate `json:"links"`
}

// LinkRate is one link's available throughput and what it rests on.
type LinkRate struct {
	From     string  `json:"from"`
	To       string  `json:"to"`
	RateMbps float64 `json:"rate_mbps"`
	Kind     string  `json:"kind"`
}

// Candidate is one path considered for a destination.
type Candidate struct {
	Path      []string `json:"path"`
	LatencyMs float64  `json:"latency_ms"`
	// LossCostMs is what the loss of the path's links adds to its cost
	// (the sum of the links' LossCostMs).
	LossCostMs float64         `json:"loss_cost_ms"`
	Links      []CandidateLink `json:"links"`
	Note       string          `json:"note,omitempty"`
}

// CandidateLink is one link of a candidate path: its loss (the origin's
// outgoing direction) with the confidence interval, the number of probes
// it is over, and what it adds to the path's cost.
type CandidateLink struct {
	From        string  `json:"from"`
	To          string  `json:"to"`
	LossPct     float64 `json:"loss_pct"`
	LossLowPct  float64 `json:"loss_low_pct"`
	LossHighPct float64 `json:"loss_high_pct"`
	LossSamples int     `json:"loss_samples"`
	LossCostMs  float64 `json:"loss_cost_ms"`
}

// FDBEntry is one learned Ethernet address.
type FDBEntry struct {
	Network    uint32  `json:"network"`
	MAC        string  `json:"mac"`
	Site       string  `json:"site"`
	AgeSeconds float64 `json:"age_seconds"`
}

// Pin forces the path to a destination: Via lists the relays in order
// (empty for the direct path).
type Pin struct {
	Dest string   `json:"dest"`
	Via  []string `json:"via"`
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}
