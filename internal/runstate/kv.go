package runstate

import (
	"fmt"
	"net/netip"
	"slices"
)

// The key-value pools in force at a site. Pools are distributed over the
// overlay (package site, kvpools.go), so the state file keeps each pool
// whole with its overlay version (version and origin site ID), whether
// this site or another changed it last: a site that restarts routes by
// the pools it last held at once, and any member holding newer versions
// answers with them. The agent stores the set each time it changes,
// before it answers a change made through its API.
//
// The configuration file's kv_pools are seeds: a pool of the file enters
// the set as version 1 of this site. KVFile keeps a fingerprint of each
// file pool as last applied; at start, a file pool whose fingerprint is
// unchanged leaves the stored pool (perhaps changed since, anywhere) in
// force, and one the operator edited (or a new one) becomes a new version
// of this site, above the stored one, and is distributed: the more recent
// act wins, as for networks.

// KVPool is one pool in force.
type KVPool struct {
	Name string `json:"name"`
	// Network is the overlay's network ID (the pool's network is found
	// by ID, since names are each site's own).
	Network uint32 `json:"network_id"`
	// Address is the virtual address, IPv4:port.
	Address string `json:"address"`
	Hash    string `json:"hash"`
	Version uint64 `json:"version"`
	// Origin is the ID of the site that made this version.
	Origin  uint32     `json:"origin"`
	Servers []KVServer `json:"servers"`
	// Shards, when set, make the pool replicated (docs/replicas.md): each
	// server is then a replica of Shards[Server.Shard]. Policy (a read
	// policy's name), Hedge and NearSites are set only with Shards.
	Shards    []KVShard `json:"shards,omitempty"`
	Policy    string    `json:"policy,omitempty"`
	Hedge     bool      `json:"hedge,omitempty"`
	NearSites []string  `json:"near_sites,omitempty"`
}

// KVShard is one shard of a replicated pool.
type KVShard struct {
	// Name is its ketama name ("": its first replica's address).
	Name   string `json:"name,omitempty"`
	Weight int    `json:"weight"`
}

// KVServer is one server of a pool.
type KVServer struct {
	Address string `json:"address"`
	Weight  int    `json:"weight"`
	Site    string `json:"site"`
	// Drained keeps the server in the ring with no keys.
	Drained bool `json:"drained,omitempty"`
	// Joining marks a server just added that its site has not yet
	// confirmed (its MAC learned).
	Joining bool `json:"joining,omitempty"`
	// Shard is the index of the shard the server is a replica of, and
	// Tier its storage; in a pool with shards only.
	Shard int    `json:"shard,omitempty"`
	Tier  string `json:"tier,omitempty"`
}

func (p KVPool) clone() KVPool {
	p.Servers = slices.Clone(p.Servers)
	p.Shards = slices.Clone(p.Shards)
	p.NearSites = slices.Clone(p.NearSites)
	return p
}

// validateKV checks the pools: names present and unique, addresses that
// parse, versions and origins set, servers present, and for a pool with
// shards every shard held by a server and every server's shard listed.
func (d *Doc) validateKV() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	names := map[string]bool{}
	for _, p := range d.KVPools {
		switch {
		case p.Name == "" || names[p.Name]:
			bad("kv pool %q: no name, or listed twice", p.Name)
		case p.Network == 0 || p.Version == 0 || p.Origin == 0:
			bad("kv pool %q: network_id, version and origin must be set", p.Name)
		case len(p.Servers) == 0:
			bad("kv pool %q: no servers", p.Name)
		}
		names[p.Name] = true
		if _, err := netip.ParseAddrPort(p.Address); err != nil {
			bad("kv pool %q: address: %v", p.Name, err)
		}
		for _, s := range p.Servers {
			if _, err := netip.ParseAddrPort(s.Address); err != nil || s.Site == "" || s.Weight < 0 {
				bad("kv pool %q: server %q: address, site or weight wrong", p.Name, s.Address)
			}
		}
		errs = append(errs, p.validateShards()...)
	}
	return errs
}

// validateShards checks a pool's replication: none without shards; with
// them, a policy, weights of 1 or more, near sites named, and each shard
// held by at least one server whose shard index is in range.
func (p KVPool) validateShards() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("kv pool %q: "+format, append([]any{p.Name}, args...)...))
	}
	if len(p.Shards) == 0 {
		if p.Policy != "" || p.Hedge || len(p.NearSites) > 0 ||
			slices.ContainsFunc(p.Servers, func(s KVServer) bool { return s.Shard != 0 || s.Tier != "" }) {
			bad("policy, hedge, near_sites, or a server's shard or tier, without shards")
		}
		return errs
	}
	if p.Policy == "" {
		bad("shards without a policy")
	}
	if slices.Contains(p.NearSites, "") {
		bad("a near site without a name")
	}
	held := make([]bool, len(p.Shards))
	for i, sh := range p.Shards {
		if sh.Weight < 1 {
			bad("shard %d: weight %d, want 1 or more", i, sh.Weight)
		}
	}
	for _, s := range p.Servers {
		if s.Shard < 0 || s.Shard >= len(p.Shards) {
			bad("server %q: shard %d of %d", s.Address, s.Shard, len(p.Shards))
			continue
		}
		held[s.Shard] = true
	}
	if i := slices.Index(held, false); i >= 0 {
		bad("shard %d has no server", i)
	}
	return errs
}

// SetKVPools records the pools in force.
func (d *Doc) SetKVPools(pools []KVPool) {
	d.KVPools = make([]KVPool, len(pools))
	for i, p := range pools {
		d.KVPools[i] = p.clone()
	}
}
