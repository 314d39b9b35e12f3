package session

import (
	"crypto/subtle"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
)

// Key rotation. A site that gets a new key (and a new certificate for it)
// keeps every session it has: keypairs do not depend on the static keys
// once made. Rotate makes the new key the one every later handshake
// uses, and starts a handshake at once with every peer that has a session,
// as a rekey does: the old keypair stays current until the new one is
// confirmed and then stays valid for receiving, so nothing in flight is
// lost. The peers must know the new key first (its certificate, flooded
// by the site core); an initiation that reaches a peer before it is
// refused and retried after 0.5 s. Until the next rotation, handshake
// messages whose mac1 was made for the previous key are still screened
// in (mac1 only shows that the sender knows a public key, which the old
// one still is), so peers that have not yet learned the new key and
// initiate are not taken for strangers: their initiation fails the Noise
// handshake, and they retry once they know the new key.

// Rotate makes priv this site's static key from now on and returns the
// initiations of a handshake with every peer that has a session.
func (n *Node) Rotate(now time.Time, priv keys.PrivateKey) []Output {
	pub := priv.Public()
	n.idMu.Lock()
	n.static, n.public = priv, pub
	n.idMu.Unlock()
	n.checker.rotate(pub)
	var out []Output
	for _, p := range n.peers.Load().order {
		p.mu.Lock()
		if p.current.Load() != nil || p.next.Load() != nil {
			p.clearPending()
			if pkt, err := n.initiate(now, p, true); err == nil {
				out = append(out, Output{To: p.site, Packet: pkt})
			}
		}
		p.mu.Unlock()
	}
	return out
}

// rotate makes the checker verify mac1 for the new key, and for the
// previous one until the next rotation.
func (c *CookieChecker) rotate(pub keys.PublicKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prevMAC1 = c.mac1
	c.keys = deriveMACKeys(pub)
	c.mac1 = newMAC(c.keys.mac1[:])
}

// checkPrevMAC1 reports whether pkt's mac1 was made for the key before
// the last rotation. Caller holds c.mu; o1 and o2 are the offsets of the
// MACs.
func (c *CookieChecker) checkPrevMAC1(pkt []byte, o1, o2 int) bool {
	if c.prevMAC1 == nil {
		return false
	}
	mac(c.prevMAC1, &c.sum, pkt[:o1])
	return subtle.ConstantTimeCompare(c.sum[:], pkt[o1:o2]) == 1
}
