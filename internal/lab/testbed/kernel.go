package testbed

import (
	"fmt"
)

// Underlays the testbed can join the gateways with.
const (
	// UnderlayEmulator carries every underlay packet through the
	// user-space WAN emulator (package wanem): delays, loss, rates and
	// queues as the scenario says. It is the default.
	UnderlayEmulator = "emulator"
	// UnderlayKernel joins the gateways with plain kernel links: each
	// gateway's wan0 is one end of a veth pair whose other end is a port
	// of a bridge in a namespace of its own. No user-space process sits in
	// the path, the scenario's link properties are ignored, and the
	// emulator's operations (link set, truth, traffic) are unavailable:
	// only the overlays are measured.
	UnderlayKernel = "kernel"
)

// Underlays lists the accepted values of Options.Underlay.
var Underlays = []string{UnderlayEmulator, UnderlayKernel}

// UnderlayNS is the namespace that holds the bridge of a kernel underlay.
// Site names contain no '.', so no gateway or host namespace can take
// this name.
func UnderlayNS(prefix string) string { return prefix + ".wan" }

// makeKernelUnderlay creates the bridge namespace and one veth pair per
// gateway, with the gateway's underlay address on its end (wan0).
func makeKernelUnderlay(st *State) error {
	ns := UnderlayNS(st.Prefix)
	if err := ip("netns", "add", ns); err != nil {
		return err
	}
	lines := []string{"link set lo up", "link add br0 type bridge", "link set br0 up"}
	for i, site := range st.Sites {
		port := fmt.Sprintf("w%d", i)
		lines = append(lines,
			fmt.Sprintf("link add %s type veth peer name wan0 netns %s", port, site.Gateway),
			fmt.Sprintf("link set %s master br0 mtu %d up", port, st.UnderlayMTU))
	}
	if err := ipBatch(ns, lines); err != nil {
		return err
	}
	for _, site := range st.Sites {
		err := ipBatch(site.Gateway, append([]string{
			fmt.Sprintf("link set wan0 mtu %d up", st.UnderlayMTU),
			fmt.Sprintf("addr add %s/%d dev wan0", site.Underlay, underlayBits),
		}, underlay6Lines(st, site)...))
		if err != nil {
			return err
		}
	}
	return nil
}
