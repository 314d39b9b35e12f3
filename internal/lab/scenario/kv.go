package scenario

import (
	"fmt"
	"net/netip"
	"strings"
)

// KVPool is a memcached pool of the scenario: the testbed runs memcached
// on the named hosts and, with a detour overlay, configures the pool at
// every gateway behind one virtual address.
type KVPool struct {
	Name string `yaml:"name"`
	// Address is the pool's virtual address, an address of the hosts'
	// overlay subnet that no host has (default DefaultKVAddress).
	Address string `yaml:"address,omitempty"`
	// Hash is ketama (default) or jump.
	Hash    string     `yaml:"hash,omitempty"`
	Servers []KVServer `yaml:"servers"`
}

// KVServer is one memcached server: host Host (1-based, default 1) of
// Site, on Port (default 11211, UDP and TCP).
type KVServer struct {
	Site   string `yaml:"site"`
	Host   int    `yaml:"host,omitempty"`
	Port   int    `yaml:"port,omitempty"`
	Weight int    `yaml:"weight,omitempty"`
}

// Defaults of key-value pools.
const (
	DefaultKVAddress = "198.19.255.250"
	DefaultKVPort    = 11211
)

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
		for j := range p.Servers {
			sv := &p.Servers[j]
			if sv.Host == 0 {
				sv.Host = 1
			}
			if sv.Port == 0 {
				sv.Port = DefaultKVPort
			}
			if sv.Weight == 0 {
				sv.Weight = 1
			}
		}
	}
}

// validateKV checks the pools against the sites.
func (s *Scenario) validateKV() error {
	names := map[string]bool{}
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
		if len(p.Servers) == 0 {
			return fieldErr(ErrMissing, f+".servers", "a pool needs servers")
		}
		seen := map[string]bool{}
		for j, sv := range p.Servers {
			sf := fmt.Sprintf("%s.servers[%d]", f, j)
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
			key := fmt.Sprintf("%s/%d:%d", strings.ToLower(sv.Site), sv.Host, sv.Port)
			if seen[key] {
				return fieldErr(ErrDuplicate, sf, "duplicate server %s", key)
			}
			seen[key] = true
		}
	}
	return nil
}
