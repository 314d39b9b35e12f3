package site

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// Peer is a site the operator lists in the configuration, as a reload
// adds or removes it.
type Peer struct {
	ID wire.SiteID
	// Key is the site's public key; zero for a site admitted by
	// certificate, or in the clear.
	Key keys.PublicKey
	// Addr is its bootstrap address; invalid when it has none (a site
	// behind NAT, only accepted).
	Addr netip.AddrPort
}

// AddPeer admits a site added to the configuration at run time: its key
// joins the accepted set, and its address is greeted at once, so that it
// becomes a member without anything restarted.
func (c *Core) AddPeer(now time.Time, p Peer) error {
	now = c.observe(now)
	if c.sec != nil && !p.Key.IsZero() {
		if _, err := c.sec.node.Admit(p.ID, p.Key); err != nil {
			return err
		}
	}
	if p.Addr.IsValid() {
		if c.sec != nil {
			c.sec.learn(p.ID, p.Addr)
		}
		c.node.AddBootstrap(now, p.Addr)
	}
	return nil
}

// RemovePeer takes out a site removed from the configuration at run
// time: its address is no longer a bootstrap, and when the site was
// accepted by its key, the key leaves the accepted set and its sessions
// end, so its datagrams are refused as those of an unknown site (as for a
// revoked site; in the clear nothing can refuse it).
func (c *Core) RemovePeer(now time.Time, p Peer) error {
	c.observe(now)
	if p.Addr.IsValid() {
		c.node.RemoveBootstrap(p.Addr)
	}
	if c.sec == nil || p.Key.IsZero() {
		return nil
	}
	if !c.sec.node.Remove(p.ID) {
		return fmt.Errorf("site: %v is not in the accepted set", p.ID)
	}
	delete(c.sec.pending, p.ID)
	return nil
}
