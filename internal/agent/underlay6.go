package agent

import (
	"net/netip"

	"github.com/detour-overlay/detour/internal/config"
)

// underlayIPv6 reports whether the site's data packets may cross the
// underlay in IPv6, whose header is 20 bytes longer than IPv4's, so that
// the inner MTU must leave room for it: when the agent listens on an IPv6
// address, or on a wildcard (a dual-stack socket) and its advertised
// address or a peer's address is IPv6. A site that talks IPv4 to some
// sites and IPv6 to others takes the smaller MTU for all.
func underlayIPv6(cfg *config.Agent) bool {
	is6 := func(s string) bool {
		ap, err := netip.ParseAddrPort(s)
		return err == nil && ap.Addr().Is6() && !ap.Addr().Is4In6()
	}
	lp, err := netip.ParseAddrPort(cfg.Listen)
	if err != nil {
		return false
	}
	if !lp.Addr().IsUnspecified() {
		return is6(cfg.Listen)
	}
	if is6(cfg.Advertise) {
		return true
	}
	for _, p := range cfg.Peers {
		if is6(p.Address) {
			return true
		}
	}
	return false
}
