package control

import (
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Roam records that an authenticated datagram from the member site came
// from the underlay address from, as WireGuard endpoints roam: the member
// is then sent to at that address, whatever it advertises. This follows a
// site behind NAT (whose advertised address, if any, is not the one its
// packets come from, and whose mapping may change), a site that moved,
// and a site that answers each member over the address family they share.
// Only the shell knows that a datagram was authenticated (the site core
// calls Roam for sealed datagrams only): an address taken from a datagram
// in the clear could be forged. It reports whether the address changed;
// a change refreshes the routes, so the data path follows at once.
func (n *Node) Roam(now time.Time, site wire.SiteID, from netip.AddrPort) bool {
	m := n.members[site]
	if m == nil || m.state == StateLeft || !from.IsValid() || m.addr == from {
		return false
	}
	m.addr = from
	n.counters.Roamed++
	n.refreshSoon(now)
	return true
}
