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
}

func (p KVPool) clone() KVPool {
	p.Servers = slices.Clone(p.Servers)
	return p
}

// validateKV checks the pools: names present and unique, addresses that
// parse, versions and origins set, servers present.
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
