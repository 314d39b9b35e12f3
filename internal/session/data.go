package session

import (
	"github.com/detour-overlay/detour/internal/wire"
)

// SealData builds a sealed data packet in b. On entry the Ethernet frame
// of frameLen bytes is at b[wire.FrameOffset(h.PathLen, true):], and b
// has TagLen bytes of room after it. SealData writes the header h (setting
// DataFlagSealed and hop 0), the security block, encrypts the frame in
// place and appends the tag; if the path has relays it also writes the hop
// tag for the first relay. It returns the packet length.
func (n *Node) SealData(b []byte, h *wire.DataHeader, frameLen int) (int, error) {
	if h.PathLen == 0 || h.PathLen > wire.MaxPath || h.Source != n.self || frameLen < 0 {
		n.stats.malformed.Add(1)
		return 0, ErrMisdirected
	}
	hl := h.Len()
	body := hl + wire.SealedDataPrefixLen(int(h.PathLen))
	end := body + frameLen + wire.TagLen
	if end > len(b) {
		return 0, ErrShortBuffer
	}
	e2e, err := n.sendKey(h.Destination())
	if err != nil {
		return 0, err
	}
	var hop *keypair
	if h.PathLen > 1 {
		if hop, err = n.sendKey(h.Path[0]); err != nil {
			return 0, err
		}
	}
	ctr, err := e2e.nextCounter()
	if err != nil {
		return 0, err
	}
	h.Flags |= wire.DataFlagSealed
	h.Hop = 0
	h.Put(b)
	wire.PutSealedDataE2E(b, hl, e2e.remote, ctr)
	pt := b[body : body+frameLen]
	e2e.send.Seal(pt[:0], b[hl:hl+wire.SealedDataE2ELen], pt, b[:hl+wire.SealedDataE2ELen])
	if hop != nil {
		if err := tagHop(b, hl+wire.SealedDataE2ELen, hop); err != nil {
			return 0, err
		}
	}
	return end, nil
}

// sendKey returns the current keypair of site, or ErrNoSession after
// marking the site as wanted so that the next Tick starts a handshake.
func (n *Node) sendKey(site wire.SiteID) (*keypair, error) {
	p := n.peer(site)
	if p == nil {
		n.stats.unknownPeer.Add(1)
		return nil, ErrUnknownPeer
	}
	k := p.current.Load()
	if k == nil {
		p.wanted.Store(true)
		n.stats.noSession.Add(1)
		return nil, ErrNoSession
	}
	return k, nil
}

// tagHop writes the hop index, counter and tag at b[off:] for the next
// receiver, with the keypair k of the link to it. The tag covers b[:off+12]
// with the hop index as it is in b.
func tagHop(b []byte, off int, k *keypair) error {
	ctr, err := k.nextHopCounter()
	if err != nil {
		return err
	}
	wire.PutSealedDataHop(b, off, k.remote, ctr)
	tag := off + 12
	k.hopSend.Seal(b[tag:tag], b[off:tag], nil, b[:tag])
	return nil
}

// Relay checks a sealed data packet that this site must relay (its parsed
// header h says this site is the receiver and not the destination; off is
// what ParseData returned): the hop tag must come from the previous site
// of the path under a session with it and must not be a replay. Relay then
// advances the hop index (in b and in h) and, if the next site is another
// relay, re-tags the packet for it. It returns the next site; the caller
// sends b unchanged in length to its address. A packet that fails is to be
// dropped; it has not been changed.
func (n *Node) Relay(b []byte, h *wire.DataHeader, off int) (wire.SiteID, error) {
	if h.Flags&wire.DataFlagSealed == 0 {
		n.stats.malformed.Add(1)
		return 0, ErrNotSealed
	}
	if int(h.Hop) >= int(h.PathLen)-1 || h.Path[h.Hop] != n.self {
		n.stats.malformed.Add(1)
		return 0, ErrMisdirected
	}
	var s wire.SealedData
	if err := wire.ParseSealedData(b, h, off, &s); err != nil {
		n.stats.malformed.Add(1)
		return 0, err
	}
	if err := n.checkHop(b, h, &s); err != nil {
		return 0, err
	}
	next := h.Hop + 1
	nextSite := h.Path[next]
	var k *keypair
	if int(next) < int(h.PathLen)-1 {
		var err error
		if k, err = n.sendKey(nextSite); err != nil {
			return 0, err
		}
	}
	wire.SetHop(b, next)
	h.Hop = next
	if k != nil {
		if err := tagHop(b, s.HopOff, k); err != nil {
			return 0, err
		}
	}
	return nextSite, nil
}

// checkHop verifies the hop tag of b, addressed to this site.
func (n *Node) checkHop(b []byte, h *wire.DataHeader, s *wire.SealedData) error {
	prev := h.Source
	if h.Hop > 0 {
		prev = h.Path[h.Hop-1]
	}
	p := n.peer(prev)
	if p == nil {
		n.stats.unknownPeer.Add(1)
		return ErrUnknownPeer
	}
	k := p.byIndex(s.HopIndex)
	if k == nil {
		n.stats.noSession.Add(1)
		return ErrNoSession
	}
	if !k.hopWindow.fresh(s.HopCounter) {
		n.stats.replays.Add(1)
		return ErrReplay
	}
	tag := s.HopOff + 12
	if _, err := k.hopRecv.Open(b[tag:tag], b[s.HopOff:tag], b[tag:tag+wire.TagLen], b[:tag]); err != nil {
		n.stats.hopAuthFailures.Add(1)
		return ErrAuth
	}
	if !k.hopWindow.accept(s.HopCounter) {
		n.stats.replays.Add(1)
		return ErrReplay
	}
	p.received(k)
	return nil
}

// OpenData authenticates and decrypts, in place, a sealed data packet that
// reached its destination (this site): h is its parsed header and off what
// ParseData returned. It checks the replay window and returns the frame,
// which aliases b. A packet that fails is to be dropped (its frame bytes
// may have been overwritten).
func (n *Node) OpenData(b []byte, h *wire.DataHeader, off int) ([]byte, error) {
	if h.Flags&wire.DataFlagSealed == 0 {
		n.stats.malformed.Add(1)
		return nil, ErrNotSealed
	}
	if int(h.Hop) != int(h.PathLen)-1 || h.Path[h.Hop] != n.self || h.Source == n.self {
		n.stats.malformed.Add(1)
		return nil, ErrMisdirected
	}
	var s wire.SealedData
	if err := wire.ParseSealedData(b, h, off, &s); err != nil {
		n.stats.malformed.Add(1)
		return nil, err
	}
	p := n.peer(h.Source)
	if p == nil {
		n.stats.unknownPeer.Add(1)
		return nil, ErrUnknownPeer
	}
	k := p.byIndex(s.Index)
	if k == nil {
		n.stats.noSession.Add(1)
		return nil, ErrNoSession
	}
	return n.openBody(b, off, &s, p, k)
}

// openBody decrypts the frame of b with k, the hop index read as zero.
func (n *Node) openBody(b []byte, off int, s *wire.SealedData, p *peer, k *keypair) ([]byte, error) {
	if !k.window.fresh(s.Counter) {
		n.stats.replays.Add(1)
		return nil, ErrReplay
	}
	ct := b[s.BodyOff:]
	nonceEnd := off + wire.SealedDataE2ELen
	hop := b[4]
	b[4] = 0
	frame, err := k.recv.Open(ct[:0], b[off:nonceEnd], ct, b[:nonceEnd])
	b[4] = hop
	if err != nil {
		n.stats.authFailures.Add(1)
		return nil, ErrAuth
	}
	if !k.window.accept(s.Counter) {
		n.stats.replays.Add(1)
		return nil, ErrReplay
	}
	p.received(k)
	return frame, nil
}
