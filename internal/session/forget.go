package session

import "github.com/detour-overlay/detour/internal/wire"

// Forget drops every keypair of site and any handshake under way with it,
// so that the next message to it starts a new handshake. The control
// plane calls it when it holds the site down: a site that restarted has
// lost its keys and cannot open what is sealed with the old ones, and a
// site without a bootstrap address would otherwise never learn it has to
// handshake again (package site, Core.forgetDown).
func (n *Node) Forget(site wire.SiteID) {
	p := n.peer(site)
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropAll()
	p.clearPending()
	n.stats.forgotten.Add(1)
}
