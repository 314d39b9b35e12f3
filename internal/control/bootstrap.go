package control

import (
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// AddBootstrap adds addr to the bootstrap addresses and says hello to it
// at once, as to a site the operator added to the configuration of a
// running agent (a reload): the site answers with its member list and
// joins, whether or not this site already has live members.
func (n *Node) AddBootstrap(now time.Time, addr netip.AddrPort) {
	if !addr.IsValid() || addr == n.cfg.Advertise {
		return
	}
	if !slices.Contains(n.cfg.Bootstrap, addr) {
		n.cfg.Bootstrap = append(n.cfg.Bootstrap, addr)
	}
	n.emit(addr, n.buildHello(wire.HelloFlagReply))
}

// RemoveBootstrap forgets a bootstrap address (a site the operator took
// out of the configuration).
func (n *Node) RemoveBootstrap(addr netip.AddrPort) {
	n.cfg.Bootstrap = slices.DeleteFunc(n.cfg.Bootstrap, func(a netip.AddrPort) bool { return a == addr })
}
