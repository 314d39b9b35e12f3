package session

import (
	"slices"

	"github.com/detour-overlay/detour/internal/wire"
)

// SealControl appends to out a sealed message carrying the control
// datagram inner (a probe, link state, membership message...) to site dst,
// and returns the extended slice. It allocates only if out lacks the
// capacity (len(inner) + wire.SealedOverhead). inner must not overlap out.
func (n *Node) SealControl(out []byte, dst wire.SiteID, inner []byte) ([]byte, error) {
	k, err := n.sendKey(dst)
	if err != nil {
		return out, err
	}
	return n.sealControlWith(k, out, inner)
}

// sealControlWith seals inner with keypair k, appending to out.
func (n *Node) sealControlWith(k *keypair, out, inner []byte) ([]byte, error) {
	ctr, err := k.nextCounter()
	if err != nil {
		return out, err
	}
	start := len(out)
	out = slices.Grow(out, wire.SealedOverhead+len(inner))
	out = out[:start+wire.SealedHeaderLen+len(inner)]
	m := out[start:]
	wire.PutSealedHeader(m, n.self, k.remote, ctr)
	body := m[wire.SealedHeaderLen:]
	copy(body, inner)
	sealed := k.send.Seal(body[:0], m[8:wire.SealedHeaderLen], body, m[:wire.SealedHeaderLen])
	return out[:start+wire.SealedHeaderLen+len(sealed)], nil
}

// OpenControl authenticates and decrypts, in place, a sealed message and
// returns its sender and the inner control datagram (aliasing pkt). An
// empty inner message is a keepalive: it only confirms a session. The
// inner datagram is then parsed by the control plane as usual.
func (n *Node) OpenControl(pkt []byte) (wire.SiteID, []byte, error) {
	var m wire.Sealed
	if err := wire.ParseSealed(pkt, &m); err != nil {
		n.stats.malformed.Add(1)
		return 0, nil, err
	}
	p := n.peer(m.Sender)
	if p == nil {
		n.stats.unknownPeer.Add(1)
		return 0, nil, ErrUnknownPeer
	}
	k := p.byIndex(m.Index)
	if k == nil {
		n.stats.noSession.Add(1)
		return 0, nil, ErrNoSession
	}
	if !k.window.fresh(m.Counter) {
		n.stats.replays.Add(1)
		return 0, nil, ErrReplay
	}
	inner, err := k.recv.Open(m.Body[:0], pkt[8:wire.SealedHeaderLen], m.Body, pkt[:wire.SealedHeaderLen])
	if err != nil {
		n.stats.authFailures.Add(1)
		return 0, nil, ErrAuth
	}
	if !k.window.accept(m.Counter) {
		n.stats.replays.Add(1)
		return 0, nil, ErrReplay
	}
	p.received(k)
	return m.Sender, inner, nil
}
