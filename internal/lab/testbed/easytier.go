package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
	"time"
)

// The easytier overlay runs easytier-core on every gateway with
// --latency-first (it relays through other nodes when their path has the
// lower latency), the gateways peering as a full mesh over the underlay:
// site i dials every site before it, every site listens on UDP 11010 of
// its underlay address. No public server or shared node takes part:
// --peers names only testbed addresses, there is no --external-node, and
// a gateway namespace has no route beyond 198.18.0.0/16, so the STUN
// servers EasyTier looks up for its NAT check are never reached.
//
// EasyTier has no Layer 2: it carries IP only. Its hosts are therefore
// routed, not bridged: each site's hosts get a /24 of their own and a
// route to the whole 198.19.0.0/16 through their gateway, which forwards
// into EasyTier; each gateway offers its site's /24 to the others as a
// proxied subnet (-n), which EasyTier's other nodes route into their TUN.
//
// Per site i (0-based):
//
//	host k  198.19.(i+1).k/24, via 198.19.(i+1).254 to 198.19.0.0/16
//	br0     198.19.(i+1).254/24 on the gateway, IPv4 forwarding on
//	et0     EasyTier's TUN, 198.19.255.(i+1)/24
//	wan0    UDP 11010 on 198.18.0.(i+1)

// etPort is EasyTier's UDP listening port on the underlay.
const etPort = 11010

// etRPC is EasyTier's local management address in each gateway, where
// easytier-cli finds it (each namespace has its own loopback).
const etRPC = "127.0.0.1:15888"

// siteSubnet is the /24 of site i's hosts on a routed overlay.
func siteSubnet(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i + 1), 0}), 24)
}

// siteRouter is the gateway's address on br0 on a routed overlay.
func siteRouter(i int) string { return fmt.Sprintf("198.19.%d.254", i+1) }

// startEasyTier routes the hosts through their gateways, then starts
// easytier-core on every gateway, one after the other.
func startEasyTier(ctx context.Context, st *State, o Options) error {
	if err := routeHosts(st); err != nil {
		return err
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	for i, site := range st.Sites {
		args := append([]string{"netns", "exec", site.Gateway, o.peers["easytier-core"]}, easyTierArgs(st, i, hex.EncodeToString(secret))...)
		p, err := startDetached(o.StateDir, "easytier-"+tincName(site.Name), "ip", args...)
		if err != nil {
			return err
		}
		st.Procs = append(st.Procs, p)
		if err := st.Save(o.StateDir); err != nil {
			return err
		}
		// The later sites dial this one: wait until it has its TUN.
		gw := site.Gateway
		err = waitFor(ctx, 15*time.Second, p, o.StateDir, func() bool {
			return ipBatch(gw, []string{"link show et0"}) == nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// easyTierArgs is site i's easytier-core command line.
func easyTierArgs(st *State, i int, secret string) []string {
	site := st.Sites[i]
	args := []string{
		"--network-name", "detour-testbed", "--network-secret", secret,
		"--hostname", site.Name, "--instance-name", tincName(site.Name),
		"--ipv4", fmt.Sprintf("198.19.255.%d/24", i+1),
		"--proxy-networks", siteSubnet(i).String(),
		"--latency-first",
		"--dev-name", "et0", "--mtu", fmt.Sprint(st.HostMTU),
		"--rpc-portal", etRPC,
		"--disable-ipv6",
		"--console-log-level", "info",
		"--listeners", fmt.Sprintf("udp://%s:%d", site.Underlay, etPort),
	}
	if i > 0 {
		args = append(args, "--peers")
		for _, peer := range st.Sites[:i] {
			args = append(args, fmt.Sprintf("udp://%s:%d", peer.Underlay, etPort))
		}
	}
	return args
}

// routeHosts turns the bridged sites into routed ones: the hosts move
// from the common /16 to their site's /24 with a route through the
// gateway, which takes the router address on br0 and forwards.
func routeHosts(st *State) error {
	for i, site := range st.Sites {
		err := ipBatch(site.Gateway, []string{fmt.Sprintf("addr add %s/24 dev br0", siteRouter(i))})
		if err != nil {
			return err
		}
		if err := sysctlIn(site.Gateway, "net.ipv4.ip_forward", "1"); err != nil {
			return err
		}
		for _, h := range site.Hosts {
			err := ipBatch(h.NS, []string{
				fmt.Sprintf("addr del %s/%d dev eth0", h.Addr, overlayBits),
				fmt.Sprintf("addr add %s/24 dev eth0", h.Addr),
				fmt.Sprintf("route add 198.19.0.0/%d via %s", overlayBits, siteRouter(i)),
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// sysctlIn sets a sysctl inside namespace ns.
func sysctlIn(ns, key, value string) error {
	out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", key+"="+value).CombinedOutput()
	if err != nil {
		return fmt.Errorf("sysctl %s=%s in %s: %v: %s", key, value, ns, err, out)
	}
	return nil
}
