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
	m.addr, m.alt = from, netip.AddrPort{}
	n.counters.Roamed++
	n.refreshSoon(now)
	// Tell the other members at once: those that reached the site directly
	// (a hole punched through its NAT) no longer can, and take the new
	// address from the list (relearnAddr), which re-punches the hole.
	for _, o := range n.sortedMembers() {
		if o != m && o.state == StateAlive {
			n.sendMembers(o.addr)
		}
	}
	return true
}

// relearnAddr takes a member's address from a member list when it differs
// from the known one and the member has not been heard from directly for
// the suspect time (its address changed, or a NAT is in the way): sending
// to where a third site reaches it may work, and opens this site's own NAT
// towards it, and once the member is heard from again Roam takes over.
// If the member is still heard from, the address is kept aside (alt) and
// taken by the next probe once the member falls silent (takeAlt).
func (n *Node) relearnAddr(now time.Time, m *member, rec *wire.Member) {
	if rec.Addr == m.addr || !rec.Addr.IsValid() || rec.Addr.Addr().IsUnspecified() {
		m.alt = netip.AddrPort{}
		return
	}
	m.alt = rec.Addr
	n.takeAlt(now, m)
}

// takeAlt moves a member that has been silent for the suspect time to the
// address a member list gave for it.
func (n *Node) takeAlt(now time.Time, m *member) {
	if !m.alt.IsValid() || now.Sub(m.lastHeard) < n.timers.suspect {
		return
	}
	m.addr, m.alt = m.alt, netip.AddrPort{}
	n.counters.Roamed++
	m.nextProbe = now
	n.timersMoved()
}
