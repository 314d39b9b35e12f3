package scenario

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// KVPool is a memcached pool of the scenario: the testbed runs memcached
// on the named hosts and, with a detour overlay, configures the pool at
// every gateway behind one virtual address.
//
// A pool is either sharded (Servers: each key on one server) or
// replicated (Shards: each key on every replica of its shard, reads
// served by one replica chosen by Policy).
type KVPool struct {
	Name string `yaml:"name"`
	// Address is the pool's virtual address, an address of the hosts'
	// overlay subnet that no host has (default DefaultKVAddress).
	Address string `yaml:"address,omitempty"`
	// Hash is ketama (default) or jump.
	Hash    string     `yaml:"hash,omitempty"`
	Servers []KVServer `yaml:"servers,omitempty"`
	// Shards, instead of Servers, make a replicated pool.
	Shards []KVShard `yaml:"shards,omitempty"`
	// Policy chooses the replica of each read in a replicated pool:
	// predicted (default), local-first, static-zone or nearest-rtt.
	Policy string `yaml:"policy,omitempty"`
	// NearSites are the declared near zone of the static-zone policy.
	NearSites []string `yaml:"near_sites,omitempty"`
	// Hedge sends a read still unanswered after the chosen replica's p95
	// to the next best replica.
	Hedge bool `yaml:"hedge,omitempty"`
}

// KVShard is one shard of a replicated pool.
type KVShard struct {
	Name     string     `yaml:"name,omitempty"`
	Replicas []KVServer `yaml:"replicas"`
}

// KVServer is one memcached server: host Host (1-based, default 1) of
// Site, on Port (default 11211, UDP and TCP), in storage tier Tier.
type KVServer struct {
	Site   string `yaml:"site"`
	Host   int    `yaml:"host,omitempty"`
	Port   int    `yaml:"port,omitempty"`
	Weight int    `yaml:"weight,omitempty"`
	// Tier is memory (default: plain memcached) or disk (memcached with
	// its items in extstore on a capped block device, KVDisk). A disk
	// server speaks TCP only: memcached refuses UDP with extstore.
	Tier string `yaml:"tier,omitempty"`
}

// KVDisk sets up the disk tier: every server with tier disk gets a loop
// device of its own with these caps (zero fields take the defaults of
// package tiers, documented in docs/locality.md).
type KVDisk struct {
	// ReadMBps and ReadIOPS cap the device's reads (blkio throttle).
	ReadMBps int `yaml:"read_mbps,omitempty"`
	ReadIOPS int `yaml:"read_iops,omitempty"`
	// MemoryLimitMB caps the server's memory, page cache included.
	MemoryLimitMB int `yaml:"memory_limit_mb,omitempty"`
	// CacheMB is memcached's own RAM (-m).
	CacheMB int `yaml:"cache_mb,omitempty"`
	// FileMB is the size of the device.
	FileMB int `yaml:"file_mb,omitempty"`
	// ReadAheadKB is the device's read-ahead.
	ReadAheadKB int `yaml:"read_ahead_kb,omitempty"`
	// LoadDepth is the number of 4 KB random direct reads a background
	// reader keeps outstanding on the device (other work sharing the
	// disk); -1 for none.
	LoadDepth int `yaml:"load_depth,omitempty"`
	// DropCacheMS is the period at which the extstore file's page cache
	// is dropped; -1 for never.
	DropCacheMS int `yaml:"drop_cache_ms,omitempty"`
}

// Defaults of key-value pools.
const (
	DefaultKVAddress = "198.19.255.250"
	DefaultKVPort    = 11211
	TierMemory       = "memory"
	TierDisk         = "disk"
	DefaultKVPolicy  = "predicted"
)

// KVPolicies are the replica choices a replicated pool may name.
var KVPolicies = []string{"predicted", "local-first", "static-zone", "nearest-rtt"}

// Replicated reports whether the pool has shards of replicas.
func (p *KVPool) Replicated() bool { return len(p.Shards) > 0 }

// AllServers returns the pool's servers, or the replicas of all its
// shards in order.
func (p *KVPool) AllServers() []KVServer {
	if !p.Replicated() {
		return p.Servers
	}
	var out []KVServer
	for _, sh := range p.Shards {
		out = append(out, sh.Replicas...)
	}
	return out
}

// applyKVDefaults fills the pools' defaults.
func (s *Scenario) applyKVDefaults() {
	for i := range s.KVPools {
		p := &s.KVPools[i]
		if p.Address == "" {
			p.Address = DefaultKVAddress
		}
		if p.Hash == "" {
			p.Hash = "ketama"
		}
		if p.Replicated() && p.Policy == "" {
			p.Policy = DefaultKVPolicy
		}
		fill := func(sv *KVServer) {
			if sv.Host == 0 {
				sv.Host = 1
			}
			if sv.Port == 0 {
				sv.Port = DefaultKVPort
			}
			if sv.Weight == 0 {
				sv.Weight = 1
			}
			if sv.Tier == "" {
				sv.Tier = TierMemory
			}
		}
		for j := range p.Servers {
			fill(&p.Servers[j])
		}
		for j := range p.Shards {
			for k := range p.Shards[j].Replicas {
				fill(&p.Shards[j].Replicas[k])
			}
		}
	}
}

// validateKV checks the pools against the sites.
func (s *Scenario) validateKV() error {
	names := map[string]bool{}
	// tiers remembers each server's tier across pools: one memcached
	// serves every pool that lists it, so the pools must agree.
	tiers := map[string]string{}
	for i, p := range s.KVPools {
		f := fmt.Sprintf("kv_pools[%d]", i)
		if !nameRE.MatchString(p.Name) || names[p.Name] {
			return fieldErr(ErrMalformed, f+".name", "%q is not a valid, unique pool name", p.Name)
		}
		names[p.Name] = true
		a, err := netip.ParseAddr(p.Address)
		if err != nil || !a.Is4() || !netip.MustParsePrefix("198.19.0.0/16").Contains(a) {
			return fieldErr(ErrMalformed, f+".address", "%q is not an address of the hosts' subnet 198.19.0.0/16", p.Address)
		}
		if p.Hash != "ketama" && p.Hash != "jump" {
			return fieldErr(ErrMalformed, f+".hash", "%q: ketama or jump", p.Hash)
		}
		if err := s.validatePoolShape(f, &p); err != nil {
			return err
		}
		seen := map[string]bool{}
		check := func(sf string, sv KVServer) error {
			if err := s.validateServer(sf, sv); err != nil {
				return err
			}
			key := fmt.Sprintf("%s/%d:%d", strings.ToLower(sv.Site), sv.Host, sv.Port)
			if seen[key] {
				return fieldErr(ErrDuplicate, sf, "duplicate server %s", key)
			}
			seen[key] = true
			if t, ok := tiers[key]; ok && t != sv.Tier {
				return fieldErr(ErrMalformed, sf+".tier", "server %s is %s in another pool", key, t)
			}
			tiers[key] = sv.Tier
			return nil
		}
		for j, sv := range p.Servers {
			if err := check(fmt.Sprintf("%s.servers[%d]", f, j), sv); err != nil {
				return err
			}
		}
		for j, sh := range p.Shards {
			sf := fmt.Sprintf("%s.shards[%d]", f, j)
			if len(sh.Replicas) == 0 {
				return fieldErr(ErrMissing, sf+".replicas", "a shard needs at least one replica")
			}
			for k, sv := range sh.Replicas {
				if err := check(fmt.Sprintf("%s.replicas[%d]", sf, k), sv); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// validatePoolShape checks that a pool is either sharded or replicated,
// and a replicated pool's policy.
func (s *Scenario) validatePoolShape(f string, p *KVPool) error {
	switch {
	case len(p.Servers) == 0 && len(p.Shards) == 0:
		return fieldErr(ErrMissing, f+".servers", "a pool needs servers (or shards of replicas)")
	case len(p.Servers) > 0 && len(p.Shards) > 0:
		return fieldErr(ErrMalformed, f+".shards", "a pool has servers or shards, not both")
	}
	if !p.Replicated() {
		if p.Policy != "" || len(p.NearSites) > 0 || p.Hedge {
			return fieldErr(ErrMalformed, f+".policy", "policy, near_sites and hedge belong to pools with shards")
		}
		return nil
	}
	if !slices.Contains(KVPolicies, p.Policy) {
		return fieldErr(ErrMalformed, f+".policy", "%q: one of %s", p.Policy, strings.Join(KVPolicies, ", "))
	}
	if p.Policy == "static-zone" && len(p.NearSites) == 0 {
		return fieldErr(ErrMissing, f+".near_sites", "static-zone needs near_sites")
	}
	if p.Policy != "static-zone" && len(p.NearSites) > 0 {
		return fieldErr(ErrMalformed, f+".near_sites", "near_sites belong to the static-zone policy")
	}
	for j, n := range p.NearSites {
		if s.SiteIndex(n) < 0 {
			return fieldErr(ErrUnknownSite, fmt.Sprintf("%s.near_sites[%d]", f, j), "unknown site %q (sites: %s)", n, s.siteList())
		}
	}
	return nil
}

// validateServer checks one server or replica.
func (s *Scenario) validateServer(sf string, sv KVServer) error {
	k := s.SiteIndex(sv.Site)
	if k < 0 {
		return fieldErr(ErrUnknownSite, sf+".site", "unknown site %q (sites: %s)", sv.Site, s.siteList())
	}
	if sv.Host < 1 || sv.Host > s.Sites[k].Hosts {
		return fieldErr(ErrRange, sf+".host", "%d is outside 1..%d (the site's hosts)", sv.Host, s.Sites[k].Hosts)
	}
	if sv.Port < 1 || sv.Port > 65535 || sv.Weight < 1 || sv.Weight > 1000 {
		return fieldErr(ErrRange, sf, "port %d or weight %d out of range", sv.Port, sv.Weight)
	}
	if sv.Tier != TierMemory && sv.Tier != TierDisk {
		return fieldErr(ErrMalformed, sf+".tier", "%q: memory or disk (the tiers the testbed builds)", sv.Tier)
	}
	return nil
}

// validateKVDisk checks the disk tier's settings.
func (s *Scenario) validateKVDisk() error {
	d := s.KVDisk
	if d == nil {
		return nil
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"read_mbps", d.ReadMBps}, {"read_iops", d.ReadIOPS}, {"memory_limit_mb", d.MemoryLimitMB},
		{"cache_mb", d.CacheMB}, {"file_mb", d.FileMB}, {"read_ahead_kb", d.ReadAheadKB}} {
		if c.v < 0 {
			return fieldErr(ErrNegative, "kv_disk."+c.name, "%d is negative", c.v)
		}
	}
	if d.LoadDepth < -1 || d.LoadDepth > 256 {
		return fieldErr(ErrRange, "kv_disk.load_depth", "%d is outside -1..256", d.LoadDepth)
	}
	if d.DropCacheMS < -1 || d.DropCacheMS > 60000 {
		return fieldErr(ErrRange, "kv_disk.drop_cache_ms", "%d is outside -1..60000", d.DropCacheMS)
	}
	return nil
}
