package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
// routed, not bridged. They keep their addresses in the common /16; each
// gateway offers its site's /24 to the others as a proxied subnet (-n),
// which EasyTier's other nodes route into their TUN, and answers the ARP
// requests of its hosts for the other sites' addresses (proxy ARP), then
// forwards their packets into EasyTier. The gateway has no address on
// br0: EasyTier binds its outgoing peer connections to every address of
// the machine's other interfaces in turn (SO_BINDTODEVICE), and one on
// br0 would send them to the hosts. What a gateway sends to its own hosts
// takes its EasyTier address as source.
//
// Per site i (0-based):
//
//	host k  198.19.(i+1).k/16, as on every overlay
//	br0     no address; proxy ARP, IPv4 forwarding, a route to
//	        198.19.(i+1).0/24 with source 198.19.255.(i+1)
//	et0     EasyTier's TUN, 198.19.255.(i+1)/24
//	wan0    UDP 11010 on 198.18.0.(i+1)

// etMTUGap is how much smaller than its --mtu EasyTier 2.0.3 makes its
// TUN device: with --mtu 1400 et0 has 1380. The hosts' MTU is et0's.
const etMTUGap = 20

// etPort is EasyTier's UDP listening port on the underlay.
const etPort = 11010

// etRPC is EasyTier's local management address in each gateway, where
// easytier-cli finds it (each namespace has its own loopback).
const etRPC = "127.0.0.1:15888"

// siteSubnet is the /24 of site i's hosts on a routed overlay.
func siteSubnet(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i + 1), 0}), 24)
}

// etAddr is site i's address on EasyTier's TUN.
func etAddr(i int) string { return fmt.Sprintf("198.19.255.%d", i+1) }

// etDir is where the easytier overlay keeps its network secret, for
// RestartAgent to start a site's node again with the same command line.
func etDir(dir string) string { return filepath.Join(dir, "easytier") }

// startEasyTier routes the hosts through their gateways, then starts
// easytier-core on every gateway, one after the other.
func startEasyTier(ctx context.Context, st *State, o Options) error {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	secret := hex.EncodeToString(raw)
	if err := os.MkdirAll(etDir(o.StateDir), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(etDir(o.StateDir), "secret"), []byte(secret), 0o600); err != nil {
		return err
	}
	for i := range st.Sites {
		p, err := startEasyTierNode(ctx, st, o.StateDir, o.peers["easytier-core"], i, secret)
		if p.PID != 0 {
			// Recorded even when it failed to come up, for Down.
			st.Procs = append(st.Procs, p)
			if serr := st.Save(o.StateDir); serr != nil && err == nil {
				err = serr
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startEasyTierNode starts easytier-core on site i's gateway, waits
// until its TUN has its address (the later sites dial this one, and the
// route to the hosts takes that address as source), then routes the
// site's hosts through it. The caller records the process; it is also
// returned, recorded by name, when the wait fails.
func startEasyTierNode(ctx context.Context, st *State, dir, core string, i int, secret string) (Proc, error) {
	site := st.Sites[i]
	args := append([]string{"netns", "exec", site.Gateway, core}, easyTierArgs(st, i, secret)...)
	p, err := startDetached(dir, "easytier-"+tincName(site.Name), "ip", args...)
	if err != nil {
		return p, err
	}
	gw, addr := site.Gateway, etAddr(i)
	err = waitFor(ctx, 15*time.Second, p, dir, func() bool {
		out, err := exec.Command("ip", "-n", gw, "-4", "-o", "addr", "show", "dev", "et0").Output()
		return err == nil && strings.Contains(string(out), " "+addr+"/")
	})
	if err != nil {
		return p, err
	}
	return p, routeHosts(st, i)
}

// restartEasyTier is RestartAgent for the easytier overlay: it stops
// site's easytier-core by its recorded PID (if it still runs) and starts
// it again with the command line and secret of the first start. Its TUN
// goes with the old process, and with it the route to the hosts; both
// come back with the new one.
func restartEasyTier(dir string, st *State, site string, o RestartOptions) (*Restart, error) {
	i := -1
	for k := range st.Sites {
		if st.Sites[k].Name == site {
			i = k
		}
	}
	if i < 0 {
		return nil, fmt.Errorf("unknown site %q", site)
	}
	secret, err := os.ReadFile(filepath.Join(etDir(dir), "secret"))
	if err != nil {
		return nil, fmt.Errorf("easytier's network secret: %w", err)
	}
	bins, err := findPeerBinaries("easytier")
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	idx := stopAgent(st, "easytier-"+tincName(site), o.Kill)
	time.Sleep(o.Pause)
	p, err := startEasyTierNode(context.Background(), st, dir, bins["easytier-core"], i, string(secret))
	if p.PID != 0 {
		if idx >= 0 {
			st.Procs[idx] = p
		} else {
			st.Procs = append(st.Procs, p)
		}
		if serr := st.Save(dir); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return nil, err
	}
	return &Restart{Down: time.Since(t0), PID: p.PID}, nil
}

// easyTierArgs is site i's easytier-core command line.
func easyTierArgs(st *State, i int, secret string) []string {
	site := st.Sites[i]
	args := []string{
		"--network-name", "detour-testbed", "--network-secret", secret,
		"--hostname", site.Name, "--instance-name", tincName(site.Name),
		"--ipv4", etAddr(i) + "/24",
		"--proxy-networks", siteSubnet(i).String(),
		"--latency-first",
		"--dev-name", "et0", "--mtu", fmt.Sprint(st.HostMTU + etMTUGap),
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

// routeHosts makes site i's gateway the router of its hosts for the
// addresses of the other sites, by proxy ARP on br0.
func routeHosts(st *State, i int) error {
	gw := st.Sites[i].Gateway
	for _, kv := range [][2]string{{"net.ipv4.ip_forward", "1"}, {"net.ipv4.conf.br0.proxy_arp", "1"}} {
		if err := sysctlIn(gw, kv[0], kv[1]); err != nil {
			return err
		}
	}
	// replace, not add: a restarted node (restartEasyTier) may find the
	// route still there.
	return ipBatch(gw, []string{fmt.Sprintf("route replace %s dev br0 src %s", siteSubnet(i), etAddr(i))})
}

// sysctlIn sets a sysctl inside namespace ns.
func sysctlIn(ns, key, value string) error {
	out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", key+"="+value).CombinedOutput()
	if err != nil {
		return fmt.Errorf("sysctl %s=%s in %s: %v: %s", key, value, ns, err, out)
	}
	return nil
}
