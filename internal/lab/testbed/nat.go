package testbed

import (
	"fmt"
	"os/exec"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// Sites behind NAT (`nat: true` in a scenario). nftables in the gateway's
// namespace translates the agent's datagrams to another source port
// (NATPort), the same for every destination (endpoint-independent
// mapping), and lets in from the underlay only the datagrams that belong
// to a flow the gateway started (address-and-port-dependent filtering):
//
//	gateway namespace                      |  WAN (emulator)
//	agent 0.0.0.0:4800 --snat--> 198.18.0.N:NATPort --> other gateways
//	        <--- only replies to flows the agent started ---
//
// The agent listens on the wildcard and advertises nothing: it does not
// know its public port, and the other sites follow the source of its
// authenticated datagrams. The other sites list it without an address.
// Only encrypted overlays (detour) can run NATed sites.

// NATPort is the source port a NATed gateway's agent datagrams leave
// from.
const NATPort = 40000

// natRules returns the nftables ruleset of a NATed gateway with underlay
// address addr whose mapping is port.
func natRules(addr string, port int) string {
	return fmt.Sprintf(`table ip detour_nat {
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "wan0" udp sport %d snat to %s:%d
	}
	chain in {
		type filter hook input priority filter; policy accept;
		iifname "wan0" ct state established,related accept
		iifname "wan0" udp dport { %d, %d } drop
	}
}
`, agentPort, addr, port, agentPort, port)
}

// setupNAT installs the NAT of every site that has one.
func setupNAT(st *State, sc *scenario.Scenario, o Options) error {
	for i, s := range sc.Sites {
		if !s.NAT {
			continue
		}
		if o.Overlay != "detour" {
			return fmt.Errorf("site %s: nat needs the detour overlay (an encrypted one follows a site's source address)", s.Name)
		}
		if st.UnderlayIPv6 {
			return fmt.Errorf("site %s: nat is IPv4 only", s.Name)
		}
		cmd := exec.Command("ip", "netns", "exec", st.Sites[i].Gateway, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(natRules(st.Sites[i].Underlay, NATPort))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("site %s: nft: %v: %s", s.Name, err, out)
		}
	}
	return nil
}

// natAgent makes a NATed site's agent listen on the wildcard and
// advertise nothing.
func natAgent(sc *scenario.Scenario, i int, a *config.Agent) {
	if sc.Sites[i].NAT {
		a.Listen = fmt.Sprintf("0.0.0.0:%d", agentPort)
		a.Advertise = ""
	}
}

// peerAddr is the address other sites are given for site j: none for a
// NATed site, which cannot be reached before it sends.
func peerAddr(st *State, sc *scenario.Scenario, j int) string {
	if sc.Sites[j].NAT {
		return ""
	}
	return agentAddr(st, st.Sites[j])
}

// RebindNAT gives a NATed site a new mapping, as a NAT that restarts or
// times a mapping out does: its agent's datagrams leave from port from
// now on, and the old mappings (the gateway's conntrack entries) are
// flushed, so that every flow, the established ones too, takes the new
// one. The other sites are told nothing.
func RebindNAT(dir, site string, port int) error {
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	s := st.Site(site)
	if s == nil {
		return fmt.Errorf("unknown site %q", site)
	}
	if port <= 0 || port > 65535 || port == agentPort {
		return fmt.Errorf("--port %d: want 1..65535, not the agents' port %d", port, agentPort)
	}
	cmd := exec.Command("ip", "netns", "exec", s.Gateway, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader("delete table ip detour_nat\n" + natRules(s.Underlay, port))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("site %s: nft: %v: %s (is the site NATed? nat: true in the scenario)", site, err, out)
	}
	return inNamespace(s.Gateway, func() error {
		if err := netlink.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
			return fmt.Errorf("site %s: flushing the NAT's mappings: %w", site, err)
		}
		return nil
	})
}
