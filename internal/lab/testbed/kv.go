package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/lab/proc"
	"github.com/detour-overlay/detour/internal/lab/scenario"
	"github.com/detour-overlay/detour/internal/lab/tiers"
)

// KVPoolState is a memcached pool of the testbed, as `testbed status
// --json` lists it: where clients send requests and where the servers
// run.
type KVPoolState struct {
	Name string `json:"name"`
	// Address and Port are the pool's virtual address (routed by key at
	// every detour gateway).
	Address string `json:"address"`
	Port    int    `json:"port"`
	Hash    string `json:"hash"`
	// Servers are a sharded pool's servers.
	Servers []KVServerState `json:"servers,omitempty"`
	// Shards, Policy, NearSites and Hedge describe a replicated pool.
	Shards    []KVShardState `json:"shards,omitempty"`
	Policy    string         `json:"policy,omitempty"`
	NearSites []string       `json:"near_sites,omitempty"`
	Hedge     bool           `json:"hedge,omitempty"`
}

// KVShardState is one shard of a replicated pool.
type KVShardState struct {
	Name     string          `json:"name,omitempty"`
	Replicas []KVServerState `json:"replicas"`
}

// KVServerState is one memcached of a pool.
type KVServerState struct {
	Site    string `json:"site"`
	NS      string `json:"ns"`
	Address string `json:"address"` // IP:port; UDP and TCP for memory, TCP only for disk
	Weight  int    `json:"weight"`
	// Tier is memory or disk.
	Tier string `json:"tier"`
}

// AllServers returns a pool's servers or the replicas of all its shards.
func (p *KVPoolState) AllServers() []KVServerState {
	out := p.Servers
	for _, sh := range p.Shards {
		out = append(out, sh.Replicas...)
	}
	return out
}

// overlaySubnet is the hosts' subnet (HostAddr).
var overlaySubnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, 0, 0}), overlayBits)

// kvPools resolves the scenario's pools to hosts.
func kvPools(sc *scenario.Scenario, prefix string) []KVPoolState {
	var out []KVPoolState
	server := func(sv scenario.KVServer) KVServerState {
		i := sc.SiteIndex(sv.Site)
		name := sc.Sites[i].Name
		return KVServerState{
			Site: name, NS: HostNS(prefix, name, sv.Host), Tier: sv.Tier,
			Address: netip.AddrPortFrom(HostAddr(i, sv.Host), uint16(sv.Port)).String(), Weight: sv.Weight,
		}
	}
	for _, p := range sc.KVPools {
		ps := KVPoolState{Name: p.Name, Address: p.Address, Port: scenario.DefaultKVPort, Hash: p.Hash,
			Policy: p.Policy, Hedge: p.Hedge}
		for _, n := range p.NearSites {
			ps.NearSites = append(ps.NearSites, sc.Sites[sc.SiteIndex(n)].Name)
		}
		for _, sv := range p.Servers {
			ps.Servers = append(ps.Servers, server(sv))
		}
		for _, sh := range p.Shards {
			ss := KVShardState{Name: sh.Name}
			for _, sv := range sh.Replicas {
				ss.Replicas = append(ss.Replicas, server(sv))
			}
			ps.Shards = append(ps.Shards, ss)
		}
		out = append(out, ps)
	}
	return out
}

// agentKVPools is the agent configuration of the testbed's pools, and the
// subnet its network must declare for them. A replicated pool keeps its
// shards, replicas (site, tier), policy, near sites and hedging; hedging
// left off in the scenario is written as an explicit "no".
func agentKVPools(st *State) ([]config.KVPool, string) {
	if len(st.KVPools) == 0 {
		return nil, ""
	}
	var out []config.KVPool
	for _, p := range st.KVPools {
		cp := config.KVPool{Name: p.Name, Network: config.DefaultNetworkName,
			Address: netip.AddrPortFrom(netip.MustParseAddr(p.Address), uint16(p.Port)).String(), Hash: p.Hash}
		for _, s := range p.Servers {
			cp.Servers = append(cp.Servers, config.KVServer{Address: s.Address, Weight: s.Weight, Site: s.Site})
		}
		if len(p.Shards) > 0 {
			cp.Shards = agentKVShards(p.Shards)
			cp.Policy = p.Policy
			cp.NearSites = slices.Clone(p.NearSites)
			hedge := p.Hedge
			cp.Hedge = &hedge
		}
		out = append(out, cp)
	}
	return out, overlaySubnet.String()
}

// agentKVShards is the agent configuration of a replicated pool's shards.
// A shard's weight is its first replica's (the scenario weighs servers).
func agentKVShards(shards []KVShardState) []config.KVShard {
	out := make([]config.KVShard, 0, len(shards))
	for _, sh := range shards {
		cs := config.KVShard{Name: sh.Name}
		for _, r := range sh.Replicas {
			if cs.Weight == 0 {
				cs.Weight = r.Weight
			}
			cs.Replicas = append(cs.Replicas, config.KVReplica{Address: r.Address, Site: r.Site, Tier: r.Tier})
		}
		out = append(out, cs)
	}
	return out
}

// kvServers returns every server of the pools once (a server may serve
// several pools), in the order the pools list them.
func kvServers(st *State) []KVServerState {
	seen := map[string]bool{}
	var out []KVServerState
	for _, p := range st.KVPools {
		for _, s := range p.AllServers() {
			if k := s.NS + " " + s.Address; !seen[k] {
				seen[k] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// startMemcached runs memcached 1.6 on every server of the pools (UDP
// and TCP for memory servers; TCP only, over a disk of its own, for disk
// servers), recorded by PID so that Down kills it, and waits until each
// listens.
func startMemcached(ctx context.Context, st *State, dir, self string, disk tiers.Config) error {
	if len(st.KVPools) == 0 {
		return nil
	}
	bin, err := exec.LookPath("memcached")
	if err != nil {
		return fmt.Errorf("the scenario has kv_pools but memcached is not installed (scripts/install-deps.sh): %w", err)
	}
	for _, s := range kvServers(st) {
		ap := netip.MustParseAddrPort(s.Address)
		port := strconv.Itoa(int(ap.Port()))
		name := "memcached-" + s.NS
		argv := []string{bin, "-u", "nobody", "-l", ap.Addr().String(), "-p", port, "-t", "2", "-c", "4096"}
		// ip netns exec mounts a sysfs of the namespace over /sys, which
		// hides the cgroup hierarchies: a disk server joins its cgroups
		// before it enters the namespace.
		argv = append([]string{"ip", "netns", "exec", s.NS}, argv...)
		if s.Tier == scenario.TierDisk {
			d, err := makeDisk(st, dir, s.NS+"-"+port, s.Address, disk)
			if err != nil {
				return err
			}
			// Root: the disk lives under the state directory, which
			// other users may not be able to enter.
			argv[slices.Index(argv, "nobody")] = "root"
			argv = d.Wrap(append(argv, d.MemcachedArgs()...)...)
			if d.HasBackground() {
				if err := startDiskLoad(st, dir, d, s.NS, self); err != nil {
					return err
				}
			}
		} else {
			argv = append(argv, "-U", port, "-m", "512", "-I", "2m")
		}
		r, err := startDetached(dir, name, argv[0], argv[1:]...)
		if err != nil {
			return err
		}
		st.Procs = append(st.Procs, r)
		if err := st.Save(dir); err != nil {
			return err
		}
		if err := waitFor(ctx, 10*time.Second, r, dir, func() bool { return proc.Listening(r.PID, "memcached", int(ap.Port())) }); err != nil {
			return err
		}
	}
	return nil
}

// DiskState is a disk tier of the testbed: the kv server it belongs to
// and the disk as built.
type DiskState struct {
	// Server is the server's address (IP:port).
	Server string     `json:"server"`
	Disk   tiers.Disk `json:"disk"`
}

// makeDisk builds the disk tier of the server at address, recording it in
// the state at every step.
func makeDisk(st *State, dir, name, address string, c tiers.Config) (*tiers.Disk, error) {
	i := len(st.Disks)
	st.Disks = append(st.Disks, DiskState{Server: address})
	return tiers.Create(dir, name, c, func(d *tiers.Disk) error {
		st.Disks[i].Disk = *d
		return st.Save(dir)
	})
}

// startDiskLoad starts the disk's background reader inside its cgroups.
func startDiskLoad(st *State, dir string, d *tiers.Disk, ns, self string) error {
	argv := d.Wrap(append([]string{self}, d.LoadArgs()...)...)
	r, err := startDetached(dir, "diskload-"+ns, argv[0], argv[1:]...)
	if err != nil {
		return err
	}
	st.Procs = append(st.Procs, r)
	return st.Save(dir)
}

// DiskOf returns the disk tier of the kv server at address (IP:port), or
// nil when it has none.
func (s *State) DiskOf(address string) *tiers.Disk {
	for i := range s.Disks {
		if s.Disks[i].Server == address {
			return &s.Disks[i].Disk
		}
	}
	return nil
}

// removeDisks removes every disk tier (their processes killed first).
func removeDisks(st *State) error {
	var first error
	for i := range st.Disks {
		if err := st.Disks[i].Disk.Remove(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// diskConfig is the scenario's disk tier settings (zero: the defaults).
func diskConfig(sc *scenario.Scenario) tiers.Config {
	d := sc.KVDisk
	if d == nil {
		return tiers.Config{}
	}
	return tiers.Config{ReadMBps: d.ReadMBps, ReadIOPS: d.ReadIOPS, MemoryLimitMB: d.MemoryLimitMB,
		CacheMB: d.CacheMB, FileMB: d.FileMB, ReadAheadKB: d.ReadAheadKB, LoadDepth: d.LoadDepth, DropCacheMS: d.DropCacheMS}
}
