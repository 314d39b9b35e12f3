package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
)

// Defaults and bounds of key-value pools.
const (
	// DefaultKVPort is memcached's port, the default of a pool's virtual
	// address.
	DefaultKVPort = 11211
	// DefaultKVHash is the placement of keys on servers when a pool names
	// none: libmemcached's weighted ketama (twemproxy's md5 + ketama).
	DefaultKVHash = "ketama"
	// MaxKVWeight bounds a server's weight.
	MaxKVWeight = 1000
	// MaxKVServers bounds the servers (or shards) of one pool.
	MaxKVServers = 1024
	// MaxKVReplicas bounds the replicas of one shard.
	MaxKVReplicas = 8
	// DefaultKVPolicy is how a read picks a replica when a pool names no
	// policy: the lowest predicted fetch time (docs/replicas.md).
	DefaultKVPolicy = "predicted"
)

// KVHashes are the placements a pool may name.
var KVHashes = []string{"ketama", "jump"}

// KVPolicies are the ways a read may pick among a shard's replicas.
var KVPolicies = []string{"predicted", "local-first", "static-zone", "nearest-rtt"}

// KVPool is a pool of memcached servers that the hosts of a virtual network
// reach at one virtual address: every gateway routes each request by its
// key straight to the server that owns it.
type KVPool struct {
	// Name names the pool in the CLI, the API and the metrics.
	Name string `yaml:"name"`
	// Network is the name of the virtual network whose hosts use the pool;
	// it must have a subnet.
	Network string `yaml:"network"`
	// Address is the pool's virtual address: an IPv4 address of the
	// network's subnet that no host has, with an optional port
	// ("10.20.0.250" or "10.20.0.250:11211"; default port 11211).
	Address string `yaml:"address"`
	// Hash is the placement of keys: ketama (default) or jump.
	Hash string `yaml:"hash,omitempty"`
	// Servers are the pool's memcached servers, each a shard of its own
	// with one replica. A pool has either Servers or Shards.
	Servers []KVServer `yaml:"servers,omitempty"`
	// Shards are the pool's shards, each with one or more replicas (issue
	// 18): reads go to one replica, writes to all.
	Shards []KVShard `yaml:"shards,omitempty"`
	// Policy is how a read picks a shard's replica: predicted (default),
	// local-first, static-zone or nearest-rtt (docs/replicas.md).
	Policy string `yaml:"policy,omitempty"`
	// NearSites is, for static-zone, the declared near zone: its replicas
	// are tried after this site's own. Every policy counts reads served
	// there as "nearby" in the metrics.
	NearSites []string `yaml:"near_sites,omitempty"`
	// Hedge sends a read still unanswered after its replica's p95 to the
	// next best replica too (default true for predicted, false otherwise).
	Hedge *bool `yaml:"hedge,omitempty"`
}

// KVShard is one shard of a replicated pool: a point set on the ring
// whose keys every replica holds.
type KVShard struct {
	// Name is the shard's ketama name (default: its first replica's
	// address, as a server's would be).
	Name string `yaml:"name,omitempty"`
	// Weight is its share of the keys relative to the others (default 1).
	Weight int `yaml:"weight,omitempty"`
	// Replicas are the servers holding the shard's keys.
	Replicas []KVReplica `yaml:"replicas"`
}

// KVReplica is one server holding a shard's keys.
type KVReplica struct {
	// Address is the server's address on the virtual network (IPv4:port).
	Address string `yaml:"address"`
	// Site is the site whose network the server is attached to.
	Site string `yaml:"site"`
	// Tier is free text describing its storage (memory, flash, disk).
	Tier string `yaml:"tier,omitempty"`
}

// HedgeOn reports whether reads of the pool are hedged.
func (p *KVPool) HedgeOn() bool {
	if p.Hedge != nil {
		return *p.Hedge
	}
	return p.Policy == "predicted" || p.Policy == ""
}

// KVServer is one memcached server of a pool.
type KVServer struct {
	// Address is the server's address on the virtual network (IPv4:port).
	Address string `yaml:"address"`
	// Weight is its share of the keys relative to the others (default 1).
	Weight int `yaml:"weight,omitempty"`
	// Site is the site whose network the server is attached to.
	Site string `yaml:"site"`
}

// VirtualAddr returns the pool's virtual address with its port. It is valid
// once the configuration validated.
func (p *KVPool) VirtualAddr() netip.AddrPort {
	if ap, err := netip.ParseAddrPort(p.Address); err == nil {
		return ap
	}
	a, _ := netip.ParseAddr(p.Address)
	return netip.AddrPortFrom(a, DefaultKVPort)
}

// prefix is the network's subnet, or an invalid prefix when it has none
// or a bad one (reported on its own).
func (n Network) prefix() netip.Prefix {
	p, err := netip.ParsePrefix(n.Subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
		return netip.Prefix{}
	}
	return p
}

// applyDefaults fills a pool's hash and its servers' weights.
func (p *KVPool) applyDefaults() {
	if p.Hash == "" {
		p.Hash = DefaultKVHash
	}
	if p.Policy == "" {
		p.Policy = DefaultKVPolicy
	}
	for i := range p.Servers {
		if p.Servers[i].Weight == 0 {
			p.Servers[i].Weight = 1
		}
	}
	for i := range p.Shards {
		if p.Shards[i].Weight == 0 {
			p.Shards[i].Weight = 1
		}
	}
}

// validateKVPools checks every pool against the networks it serves.
func validateKVPools(a *Agent, pr *Problems) {
	nets := map[string]Network{}
	for _, n := range a.Networks {
		nets[n.Name] = n
	}
	names := map[string]bool{}
	vips := map[netip.AddrPort]bool{}
	for i, p := range a.KVPools {
		field := fmt.Sprintf("kv_pools[%d]", i)
		if !nameRE.MatchString(p.Name) {
			pr.add(field+".name", "%q is not a valid pool name (letters, digits, '.', '_', '-')", p.Name)
		} else if names[p.Name] {
			pr.add(field+".name", "duplicate pool %q", p.Name)
		}
		names[p.Name] = true
		n, ok := nets[p.Network]
		switch {
		case p.Network == "":
			pr.add(field+".network", "missing: the virtual network whose hosts use the pool")
		case !ok:
			pr.add(field+".network", "unknown network %q (not in networks)", p.Network)
		case n.Subnet == "":
			pr.add(field+".network", "network %q has no subnet: give it one (networks[].subnet) so the pool's addresses can be checked", p.Network)
		}
		subnet := n.prefix()
		vip, ok := kvAddr(field+".address", p.Address, DefaultKVPort, subnet, pr)
		if ok && vips[vip] {
			pr.add(field+".address", "%v is already another pool's address", vip)
		}
		if ok {
			vips[vip] = true
		}
		if !slices.Contains(KVHashes, p.Hash) {
			pr.add(field+".hash", "%q is not a placement: ketama or jump", p.Hash)
		}
		if !slices.Contains(KVPolicies, p.Policy) {
			pr.add(field+".policy", "%q is not a policy: predicted, local-first, static-zone or nearest-rtt", p.Policy)
		}
		sites := knownSites(a)
		for j, s := range p.NearSites {
			if !sites[s] {
				pr.add(fmt.Sprintf("%s.near_sites[%d]", field, j), "unknown site %q (neither this site nor one of peers)", s)
			}
		}
		if p.Policy == "static-zone" && len(p.NearSites) == 0 {
			pr.add(field+".near_sites", "missing: static-zone needs the near zone's sites")
		}
		switch {
		case len(p.Shards) > 0 && len(p.Servers) > 0:
			pr.add(field+".shards", "a pool has either servers or shards, not both")
		case len(p.Shards) > 0:
			validateKVShards(field, p, subnet, vip, sites, pr)
		default:
			validateKVServers(field, p, subnet, vip, pr)
		}
	}
}

// knownSites returns this site and its peers by name.
func knownSites(a *Agent) map[string]bool {
	sites := map[string]bool{a.Site: true}
	for _, p := range a.Peers {
		sites[p.Name] = true
	}
	return sites
}

// validateKVShards checks the shards of pool p (at field), whose virtual
// address is vip; a replica's site must be this site or a peer.
func validateKVShards(field string, p KVPool, subnet netip.Prefix, vip netip.AddrPort, sites map[string]bool, pr *Problems) {
	if len(p.Shards) > MaxKVServers {
		pr.add(field+".shards", "%d shards: a pool holds at most %d", len(p.Shards), MaxKVServers)
	}
	seen := map[netip.AddrPort]bool{}
	names := map[string]bool{}
	for j, sh := range p.Shards {
		sf := fmt.Sprintf("%s.shards[%d]", field, j)
		if sh.Name != "" && names[sh.Name] {
			pr.add(sf+".name", "duplicate shard name %q", sh.Name)
		}
		names[sh.Name] = true
		if sh.Weight < 1 || sh.Weight > MaxKVWeight {
			pr.add(sf+".weight", "%d is outside 1..%d", sh.Weight, MaxKVWeight)
		}
		if len(sh.Replicas) == 0 || len(sh.Replicas) > MaxKVReplicas {
			pr.add(sf+".replicas", "%d replicas: a shard needs 1..%d", len(sh.Replicas), MaxKVReplicas)
		}
		for k, r := range sh.Replicas {
			rf := fmt.Sprintf("%s.replicas[%d]", sf, k)
			ap, ok := kvAddr(rf+".address", r.Address, 0, subnet, pr)
			switch {
			case !ok:
			case ap.Addr() == vip.Addr():
				pr.add(rf+".address", "%v is the pool's own virtual address", ap.Addr())
			case seen[ap]:
				pr.add(rf+".address", "duplicate server %v (a server holds one replica of one shard)", ap)
			}
			seen[ap] = true
			switch {
			case !nameRE.MatchString(r.Site):
				pr.add(rf+".site", "%q is not a site name: the site whose network the replica is on", r.Site)
			case !sites[r.Site]:
				pr.add(rf+".site", "unknown site %q (neither this site nor one of peers)", r.Site)
			}
		}
	}
}

// validateKVServers checks the servers of pool p (at field), whose virtual
// address is vip.
func validateKVServers(field string, p KVPool, subnet netip.Prefix, vip netip.AddrPort, pr *Problems) {
	if len(p.Servers) == 0 || len(p.Servers) > MaxKVServers {
		pr.add(field+".servers", "%d servers: a pool needs 1..%d", len(p.Servers), MaxKVServers)
	}
	seen := map[netip.AddrPort]bool{}
	for j, s := range p.Servers {
		sf := fmt.Sprintf("%s.servers[%d]", field, j)
		ap, ok := kvAddr(sf+".address", s.Address, 0, subnet, pr)
		switch {
		case !ok:
		case ap.Addr() == vip.Addr():
			pr.add(sf+".address", "%v is the pool's own virtual address", ap.Addr())
		case seen[ap]:
			pr.add(sf+".address", "duplicate server %v", ap)
		}
		seen[ap] = true
		if s.Weight < 1 || s.Weight > MaxKVWeight {
			pr.add(sf+".weight", "%d is outside 1..%d", s.Weight, MaxKVWeight)
		}
		if !nameRE.MatchString(s.Site) {
			pr.add(sf+".site", "%q is not a site name: the site whose network the server is on", s.Site)
		}
	}
}

// kvAddr parses an IPv4 address with a port (or without, when defPort is
// not 0) that must lie in subnet when subnet is valid.
func kvAddr(field, s string, defPort uint16, subnet netip.Prefix, pr *Problems) (netip.AddrPort, bool) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil && defPort != 0 {
		if a, err2 := netip.ParseAddr(s); err2 == nil {
			ap, err = netip.AddrPortFrom(a, defPort), nil
		}
	}
	want := "IPv4:port"
	if defPort != 0 {
		want = "IPv4 address with an optional port (default " + strconv.Itoa(int(defPort)) + ")"
	}
	switch {
	case s == "":
		pr.add(field, "missing: an %s", want)
	case err != nil || !ap.Addr().Is4() || ap.Port() == 0:
		pr.add(field, "%q is not an %s", s, want)
	case subnet.IsValid() && !subnet.Contains(ap.Addr()):
		pr.add(field, "%v is outside the network's subnet %v", ap.Addr(), subnet)
	case subnet.IsValid() && (ap.Addr() == subnet.Masked().Addr() || isBroadcast(ap.Addr(), subnet)):
		pr.add(field, "%v is the subnet's network or broadcast address", ap.Addr())
	default:
		return ap, true
	}
	return ap, false
}

// isBroadcast reports whether a is the last address of an IPv4 subnet.
func isBroadcast(a netip.Addr, p netip.Prefix) bool {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= host
	return a == netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}) && p.Bits() < 31
}
