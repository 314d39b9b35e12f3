package testbed

import (
	"fmt"
	"os/exec"
	"strings"
)

// Migrate moves a host, with its namespace, MAC and IP address (and so its
// open connections), from its site to site to: its veth in the old
// gateway is removed, a new one joins it to the new gateway's bridge, and
// the host sends gratuitous ARP so that every site learns where it is now.
func Migrate(dir, target, to string) (*HostState, error) {
	st, err := LoadState(dir)
	if err != nil {
		return nil, err
	}
	ns, err := Target(st, target, false)
	if err != nil {
		return nil, err
	}
	from, idx := hostIndex(st, ns)
	dst := st.Site(to)
	if dst == nil {
		return nil, fmt.Errorf("unknown site %q", to)
	}
	if dst == from {
		return nil, fmt.Errorf("host %s is already at site %s", target, to)
	}
	h := from.Hosts[idx]
	mac, err := hostMAC(ns)
	if err != nil {
		return nil, err
	}
	oldPort := h.Port
	if oldPort == "" {
		oldPort = fmt.Sprintf("h%d", idx+1)
	}
	st.Migrations++
	h.Port = fmt.Sprintf("mig%d", st.Migrations)
	if err := ipBatch(from.Gateway, []string{"link del " + oldPort}); err != nil {
		return nil, err
	}
	err = ipBatch(dst.Gateway, []string{
		fmt.Sprintf("link add %s type veth peer name eth0 netns %s", h.Port, ns),
		fmt.Sprintf("link set %s master br0 mtu %d up", h.Port, st.HostMTU),
	})
	if err != nil {
		return nil, err
	}
	err = ipBatch(ns, []string{
		fmt.Sprintf("link set eth0 address %s mtu %d up", mac, st.HostMTU),
		fmt.Sprintf("addr add %s/%d dev eth0", h.Addr, overlayBits),
	})
	if err != nil {
		return nil, err
	}
	from.Hosts = append(from.Hosts[:idx], from.Hosts[idx+1:]...)
	dst.Hosts = append(dst.Hosts, h)
	if err := st.Save(dir); err != nil {
		return nil, err
	}
	return &h, announce(ns, h.Addr)
}

// hostIndex finds the site and index of the host in namespace ns.
func hostIndex(st *State, ns string) (*SiteState, int) {
	for i := range st.Sites {
		for k, h := range st.Sites[i].Hosts {
			if h.NS == ns {
				return &st.Sites[i], k
			}
		}
	}
	return nil, -1
}

// hostMAC reads the MAC address of eth0 in namespace ns.
func hostMAC(ns string) (string, error) {
	out, err := exec.Command("ip", "-n", ns, "-br", "link", "show", "eth0").Output()
	if err != nil {
		return "", fmt.Errorf("reading the MAC of eth0 in %s: %w", ns, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return "", fmt.Errorf("unexpected output of ip link in %s: %q", ns, out)
	}
	return f[2], nil
}

// announce sends gratuitous ARP from the host, as a hypervisor does after
// a live migration.
func announce(ns, addr string) error {
	out, err := exec.Command("ip", "netns", "exec", ns, "arping", "-U", "-c", "2", "-w", "1", "-I", "eth0", addr).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Sent 2") {
		return fmt.Errorf("gratuitous ARP from %s: %v: %s", ns, err, out)
	}
	return nil
}
