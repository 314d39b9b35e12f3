package session

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// peerSet is one version of the accepted set: never modified once stored.
type peerSet struct {
	byID  map[wire.SiteID]*peer
	order []*peer // sorted by site, for Tick
}

// peer returns the accepted peer site, or nil.
func (n *Node) peer(site wire.SiteID) *peer { return n.peers.Load().byID[site] }

// Accepts reports whether site is in the accepted set, and with which key.
func (n *Node) Accepts(site wire.SiteID) (keys.PublicKey, bool) {
	p := n.peer(site)
	if p == nil {
		return keys.PublicKey{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.static, true
}

// Admit adds site with key pub to the accepted set at run time (a site
// that presented a valid certificate), or gives an accepted site a new
// key (it rotated its key). A new key applies to the next handshake: the
// sessions made with the old key keep carrying traffic until the new
// handshake replaces them, so a rotation loses nothing in flight. It
// reports whether the set changed.
func (n *Node) Admit(site wire.SiteID, pub keys.PublicKey) (bool, error) {
	if site == n.self || site == 0 || pub.IsZero() || pub == n.PublicKey() {
		return false, fmt.Errorf("session: cannot admit site %v with this key", site)
	}
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	old := n.peers.Load()
	for _, q := range old.order {
		if q.site != site && q.staticKey() == pub {
			return false, fmt.Errorf("session: site %v has the key of site %v", site, q.site)
		}
	}
	if p := old.byID[site]; p != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.static == pub {
			return false, nil
		}
		p.static, p.ck = pub, cookieState{keys: deriveMACKeys(pub)}
		p.clearPending() // an initiation to the old key would never be answered
		n.stats.admitted.Add(1)
		return true, nil
	}
	set := &peerSet{byID: make(map[wire.SiteID]*peer, len(old.byID)+1), order: make([]*peer, 0, len(old.order)+1)}
	for id, q := range old.byID {
		set.byID[id] = q
	}
	p := &peer{site: site, static: pub, ck: cookieState{keys: deriveMACKeys(pub)}}
	set.byID[site] = p
	set.order = append(append(set.order, old.order...), p)
	slices.SortFunc(set.order, func(a, b *peer) int { return cmp.Compare(a.site, b.site) })
	n.peers.Store(set)
	n.stats.admitted.Add(1)
	return true, nil
}

// Remove takes site out of the accepted set (its certificate was
// revoked): its sessions are dropped at once, its frames and handshakes
// are refused as those of an unknown site, and nothing is sent to it. It
// reports whether the site was accepted.
func (n *Node) Remove(site wire.SiteID) bool {
	n.peersMu.Lock()
	defer n.peersMu.Unlock()
	old := n.peers.Load()
	p := old.byID[site]
	if p == nil {
		return false
	}
	set := &peerSet{byID: make(map[wire.SiteID]*peer, len(old.byID)), order: make([]*peer, 0, len(old.order))}
	for id, q := range old.byID {
		if id != site {
			set.byID[id] = q
		}
	}
	for _, q := range old.order {
		if q != p {
			set.order = append(set.order, q)
		}
	}
	n.peers.Store(set)
	p.mu.Lock()
	p.dropAll()
	p.clearPending()
	p.mu.Unlock()
	n.stats.removed.Add(1)
	return true
}

// staticKey returns the peer's key.
func (p *peer) staticKey() keys.PublicKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.static
}
