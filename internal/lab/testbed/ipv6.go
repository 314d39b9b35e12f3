package testbed

import (
	"fmt"
	"net/netip"

	"github.com/detour-overlay/detour/internal/lab/wanem"
)

// An IPv6 underlay (Options.UnderlayIPv6): every gateway's wan0 gets, on
// top of its IPv4 underlay address 198.18.0.N, the IPv6 address
// fd18::c612:N (wanem.IPv6Of) in one /64, and the detour agents listen on
// and join through the IPv6 addresses. The emulator carries IPv6 packets
// over the same links, with the same delays and losses, so a scenario runs
// the same over either family.

// underlay6Bits is the prefix length of the IPv6 underlay.
const underlay6Bits = 64

// underlay6 returns a site's IPv6 underlay address.
func underlay6(site SiteState) netip.Addr {
	return wanem.IPv6Of(netip.MustParseAddr(site.Underlay))
}

// underlay6Lines are the ip commands that give a gateway's wan0 its IPv6
// address (none without an IPv6 underlay). Duplicate address detection is
// off: the addresses are unique by construction, and it would hold the
// address back for a second.
func underlay6Lines(st *State, site SiteState) []string {
	if !st.UnderlayIPv6 {
		return nil
	}
	return []string{fmt.Sprintf("addr add %s/%d dev wan0 nodad", underlay6(site), underlay6Bits)}
}

// agentAddr is the underlay address and port of a site's agent, IPv6 when
// the testbed has an IPv6 underlay.
func agentAddr(st *State, site SiteState) string {
	if st.UnderlayIPv6 {
		return netip.AddrPortFrom(underlay6(site), agentPort).String()
	}
	return fmt.Sprintf("%s:%d", site.Underlay, agentPort)
}
