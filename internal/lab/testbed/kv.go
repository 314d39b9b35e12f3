package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"time"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/lab/proc"
	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// KVPoolState is a memcached pool of the testbed, as `testbed status
// --json` lists it: where clients send requests and where the servers
// run.
type KVPoolState struct {
	Name string `json:"name"`
	// Address and Port are the pool's virtual address (routed by key at
	// every detour gateway).
	Address string          `json:"address"`
	Port    int             `json:"port"`
	Hash    string          `json:"hash"`
	Servers []KVServerState `json:"servers"`
}

// KVServerState is one memcached of a pool.
type KVServerState struct {
	Site    string `json:"site"`
	NS      string `json:"ns"`
	Address string `json:"address"` // IP:port, UDP and TCP
	Weight  int    `json:"weight"`
}

// overlaySubnet is the hosts' subnet (HostAddr).
var overlaySubnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, 0, 0}), overlayBits)

// kvPools resolves the scenario's pools to hosts.
func kvPools(sc *scenario.Scenario, prefix string) []KVPoolState {
	var out []KVPoolState
	for _, p := range sc.KVPools {
		ps := KVPoolState{Name: p.Name, Address: p.Address, Port: scenario.DefaultKVPort, Hash: p.Hash}
		for _, sv := range p.Servers {
			i := sc.SiteIndex(sv.Site)
			name := sc.Sites[i].Name
			ps.Servers = append(ps.Servers, KVServerState{
				Site: name, NS: HostNS(prefix, name, sv.Host),
				Address: netip.AddrPortFrom(HostAddr(i, sv.Host), uint16(sv.Port)).String(), Weight: sv.Weight,
			})
		}
		out = append(out, ps)
	}
	return out
}

// agentKVPools is the agent configuration of the testbed's pools, and the
// subnet its network must declare for them.
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
		out = append(out, cp)
	}
	return out, overlaySubnet.String()
}

// startMemcached runs memcached 1.6 (UDP and TCP) on every server of the
// pools, recorded by PID so that Down kills it, and waits until each
// listens.
func startMemcached(ctx context.Context, st *State, dir string) error {
	if len(st.KVPools) == 0 {
		return nil
	}
	bin, err := exec.LookPath("memcached")
	if err != nil {
		return fmt.Errorf("the scenario has kv_pools but memcached is not installed (scripts/install-deps.sh): %w", err)
	}
	for _, p := range st.KVPools {
		for _, s := range p.Servers {
			ap := netip.MustParseAddrPort(s.Address)
			port := strconv.Itoa(int(ap.Port()))
			name := "memcached-" + s.NS
			r, err := startDetached(dir, name, "ip", "netns", "exec", s.NS, bin,
				"-u", "nobody", "-l", ap.Addr().String(), "-p", port, "-U", port, "-m", "64", "-t", "2", "-c", "4096")
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
	}
	return nil
}
