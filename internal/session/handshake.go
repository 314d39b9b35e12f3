package session

import (
	"crypto/subtle"
	"encoding/binary"
	"slices"
	"time"

	"github.com/flynn/noise"

	"github.com/detour-overlay/detour/internal/wire"
)

// cipherSuite is Noise_IK_25519_ChaChaPoly_BLAKE2s.
var cipherSuite = noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashBLAKE2s)

// Result tells the caller what a handshake message did.
type Result struct {
	// Peer is the site the message came from.
	Peer wire.SiteID
	// Reply, when not nil, is to be sent back to Peer (to the address the
	// message came from): a response to an initiation, or the keepalive
	// that confirms a completed handshake to its responder.
	Reply []byte
	// Established is true when this message completed a session this site
	// can send on at once (the initiator's side).
	Established bool
}

// staticKey returns this node's key pair in flynn/noise's form.
func (n *Node) staticKey() noise.DHKey {
	n.idMu.RLock()
	defer n.idMu.RUnlock()
	return noise.DHKey{Private: slices.Clone(n.static[:]), Public: slices.Clone(n.public[:])}
}

// Connect marks site as wanted and, unless a session exists or a
// handshake is under way, returns the initiation to send to it now.
// Later retries and rekeys come from Tick.
func (n *Node) Connect(now time.Time, site wire.SiteID) ([]byte, error) {
	p := n.peer(site)
	if p == nil {
		return nil, ErrUnknownPeer
	}
	p.wanted.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.current.Load() != nil || p.next.Load() != nil || p.hs != nil {
		return nil, nil
	}
	return n.initiate(now, p, true)
}

// initiate starts a handshake with p (first) or sends its initiation
// again, and returns the initiation. Caller holds p.mu.
//
// A retry sends the same initiation (the same ephemeral key, index and
// timestamp) with fresh MACs, as long as the attempt lasts. A responder
// that answered it answers the copy with the same response (handleInit),
// so whichever response arrives first completes the handshake: on a
// loaded machine or a long path, where answers come later than the
// first retries, a new initiation at every retry would make every
// answer in flight stale and cost both ends a Diffie-Hellman each time.
func (n *Node) initiate(now time.Time, p *peer, first bool) ([]byte, error) {
	if !first && p.hs != nil {
		return n.resend(now, p), nil
	}
	idx, err := n.newIndex()
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, wire.HandshakeHeaderLen, wire.HandshakeInitLen)
	wire.PutHandshakeHeader(hdr, wire.TypeHandshakeInit, n.self, idx)
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite:   cipherSuite,
		Random:        n.rand,
		Pattern:       noise.HandshakeIK,
		Initiator:     true,
		Prologue:      hdr,
		StaticKeypair: n.staticKey(),
		PeerStatic:    p.static[:],
	})
	if err != nil {
		return nil, err
	}
	ts := n.timestamp(now)
	msg, _, _, err := hs.WriteMessage(hdr, ts[:])
	if err != nil {
		return nil, err
	}
	msg = append(msg, make([]byte, wire.HandshakeMACsLen)...)
	p.ck.addMACs(now, msg)
	if first {
		p.attemptStart = now
		p.retryDelay = RetryInitial
	} else {
		p.retryDelay = min(2*p.retryDelay, RetryMax)
	}
	p.hs, p.hsIndex, p.hsPacket, p.hsSent = hs, idx, slices.Clone(msg), now
	p.nextRetry = now.Add(p.retryDelay)
	n.stats.initiations.Add(1)
	return msg, nil
}

// resend returns the pending initiation again, with fresh MACs, and backs
// off the next retry. Caller holds p.mu.
func (n *Node) resend(now time.Time, p *peer) []byte {
	msg := slices.Clone(p.hsPacket)
	p.ck.addMACs(now, msg)
	p.retryDelay = min(2*p.retryDelay, RetryMax)
	p.hsSent, p.nextRetry = now, now.Add(p.retryDelay)
	n.stats.initiations.Add(1)
	n.stats.resent.Add(1)
	return msg
}

// HandleHandshake processes a handshake initiation or response received
// from the underlay. Errors say why the message was dropped (they are also
// counted in Stats); a dropped message changes no session. It checks mac1
// before anything else, but neither mac2 nor any rate: that is the
// Guard's, which should screen every message first.
func (n *Node) HandleHandshake(now time.Time, pkt []byte) (Result, error) {
	var m wire.Handshake
	if err := wire.ParseHandshake(pkt, &m); err != nil {
		n.stats.handshakeMalformed.Add(1)
		return Result{}, err
	}
	if !n.checker.CheckMAC1(pkt) {
		n.stats.badMAC1.Add(1)
		return Result{}, ErrBadMAC1
	}
	p := n.peer(m.Sender)
	if p == nil {
		n.stats.unknownPeer.Add(1)
		return Result{}, ErrUnknownPeer
	}
	if m.Type == wire.TypeHandshakeInit {
		return n.handleInit(now, p, pkt, &m)
	}
	return n.handleResponse(now, p, &m)
}

// handleInit answers an initiation from p, as responder.
func (n *Node) handleInit(now time.Time, p *peer, pkt []byte, m *wire.Handshake) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lastInitAt.IsZero() && now.Sub(p.lastInitAt) < MinInitiationInterval {
		n.stats.handshakeRejected.Add(1)
		return Result{}, ErrRateLimited
	}
	if r, ok := p.answered.again(p, pkt); ok {
		// A copy of the initiation answered last, sent again because our
		// answer has not arrived yet: the same answer, without any
		// Diffie-Hellman.
		p.lastInitAt = now
		p.ck.addMACs(now, r)
		n.stats.responses.Add(1)
		n.stats.resent.Add(1)
		return Result{Peer: p.site, Reply: r}, nil
	}
	// Simultaneous initiation: the higher site ID's initiation wins; the
	// lower site drops its own and answers. Ours wins only while its
	// answer may still come: one sent longer ago than a retry interval
	// was most likely lost, or its answer was, and the peer's initiation,
	// which did arrive, is answered instead of left to wait for our next
	// retry, seconds later once the retries have backed off.
	if p.hs != nil && n.self > p.site && now.Sub(p.hsSent) < RetryInitial {
		n.stats.collisions.Add(1)
		return Result{}, ErrCollision
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite:   cipherSuite,
		Random:        n.rand,
		Pattern:       noise.HandshakeIK,
		Prologue:      pkt[:wire.HandshakeHeaderLen],
		StaticKeypair: n.staticKey(),
	})
	if err != nil {
		return Result{}, err
	}
	payload, _, _, err := hs.ReadMessage(nil, m.Noise)
	if err != nil || len(payload) != wire.TimestampLen {
		n.stats.handshakeRejected.Add(1)
		return Result{}, ErrAuth
	}
	if subtle.ConstantTimeCompare(hs.PeerStatic(), p.static[:]) != 1 {
		n.stats.handshakeRejected.Add(1)
		return Result{}, ErrUnknownKey
	}
	var ts [wire.TimestampLen]byte
	copy(ts[:], payload)
	if !tsAfter(ts, p.lastTS) {
		n.stats.initiationReplays.Add(1)
		return Result{}, ErrReplayedInitiation
	}
	return n.respond(now, p, pkt, hs, m.Index, ts)
}

// respond writes the response to an authenticated initiation and installs
// the new keypair as next. Caller holds p.mu.
func (n *Node) respond(now time.Time, p *peer, init []byte, hs *noise.HandshakeState, theirIndex uint32, ts [wire.TimestampLen]byte) (Result, error) {
	idx, err := n.newIndex()
	if err != nil {
		return Result{}, err
	}
	out := make([]byte, wire.HandshakeHeaderLen, wire.HandshakeResponseLen)
	wire.PutHandshakeHeader(out, wire.TypeHandshakeResponse, n.self, theirIndex)
	var payload [4]byte
	binary.BigEndian.PutUint32(payload[:], idx)
	out, cs1, cs2, err := hs.WriteMessage(out, payload[:])
	if err != nil {
		return Result{}, err
	}
	out = append(out, make([]byte, wire.HandshakeMACsLen)...)
	p.ck.addMACs(now, out)
	age, err := n.rekeyAge(false)
	if err != nil {
		return Result{}, err
	}
	p.lastTS, p.lastInitAt = ts, now
	p.clearPending()
	k := newKeypair(cs2.UnsafeKey(), cs1.UnsafeKey(), idx, theirIndex, now, age, false)
	p.installResponder(k)
	p.answered.remember(init, out, k)
	p.lastActive = now
	n.stats.responses.Add(1)
	return Result{Peer: p.site, Reply: out}, nil
}

// handleResponse completes this site's pending initiation to p.
func (n *Node) handleResponse(now time.Time, p *peer, m *wire.Handshake) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hs == nil || m.Index != p.hsIndex {
		n.stats.handshakeRejected.Add(1)
		return Result{}, ErrUnexpected
	}
	payload, cs1, cs2, err := p.hs.ReadMessage(nil, m.Noise)
	if err != nil || len(payload) != 4 || cs1 == nil {
		n.stats.handshakeRejected.Add(1)
		return Result{}, ErrAuth
	}
	theirs := binary.BigEndian.Uint32(payload)
	age, err := n.rekeyAge(true)
	if err != nil {
		return Result{}, err
	}
	k := newKeypair(cs1.UnsafeKey(), cs2.UnsafeKey(), p.hsIndex, theirs, now, age, true)
	p.clearPending()
	p.installInitiator(k)
	p.wanted.Store(false)
	p.lastActive = now
	n.stats.established.Add(1)
	keepalive, err := n.sealControlWith(k, nil, nil)
	if err != nil {
		return Result{}, err
	}
	return Result{Peer: p.site, Reply: keepalive, Established: true}, nil
}

// HandleCookieReply takes the cookie of a cookie reply to this site's
// pending initiation; the initiation's next retry carries mac2 made with
// it. A reply that matches no pending initiation is dropped before any
// decryption.
func (n *Node) HandleCookieReply(now time.Time, pkt []byte) error {
	var r wire.CookieReply
	if err := wire.ParseCookieReply(pkt, &r); err != nil {
		n.stats.handshakeMalformed.Add(1)
		return err
	}
	p := n.peer(r.Sender)
	if p == nil {
		n.stats.unknownPeer.Add(1)
		return ErrUnknownPeer
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hs == nil || r.Index != p.hsIndex {
		n.stats.badCookieReplies.Add(1)
		return ErrBadCookieReply
	}
	if err := p.ck.consume(now, &r); err != nil {
		n.stats.badCookieReplies.Add(1)
		return err
	}
	n.stats.cookiesReceived.Add(1)
	return nil
}

// Tick runs the timers of every peer: it drops expired and idle sessions,
// starts handshakes for wanted peers and for sessions due for rekeying,
// and retries unanswered initiations with exponential backoff. Call it at
// least every second (every 100 ms keeps handshake retries punctual); it
// returns the initiations to send.
func (n *Node) Tick(now time.Time) []Output {
	var out []Output
	for _, p := range n.peers.Load().order {
		if pkt := n.tickPeer(now, p); pkt != nil {
			out = append(out, Output{To: p.site, Packet: pkt})
		}
	}
	return out
}

// tickPeer runs p's timers and returns an initiation to send, if any.
func (n *Node) tickPeer(now time.Time, p *peer) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	n.stats.expired.Add(uint64(p.expire(now)))
	if a := p.activity(); a != p.lastActivity {
		p.lastActivity, p.lastActive = a, now
	}
	if p.current.Load() != nil && now.Sub(p.lastActive) >= IdleTimeout {
		p.dropAll()
		n.stats.expired.Add(1)
	}
	if !n.needHandshake(now, p) && p.hs == nil {
		// (An initiation under way while a session is current, as after
		// Rotate, is retried like any other.)
		return nil
	}
	if p.hs == nil {
		pkt, _ := n.initiate(now, p, true)
		return pkt
	}
	if now.Before(p.nextRetry) {
		return nil
	}
	if now.Sub(p.attemptStart) >= RekeyAttemptTime {
		p.clearPending()
		p.wanted.Store(false)
		n.stats.gaveUp.Add(1)
		return nil
	}
	pkt, _ := n.initiate(now, p, false)
	return pkt
}

// needHandshake reports whether p needs a new session. Caller holds p.mu.
func (n *Node) needHandshake(now time.Time, p *peer) bool {
	cur := p.current.Load()
	if cur == nil {
		// A keypair this site answered for but the initiator never
		// confirmed (its keepalive lost) does not hold a wanted peer back
		// for long.
		nx := p.next.Load()
		return p.wanted.Load() && (nx == nil || now.Sub(nx.created) >= UnconfirmedTimeout)
	}
	return now.Sub(cur.created) >= cur.rekeyAge || cur.sendCtr.Load() >= RekeyAfterMessages
}
