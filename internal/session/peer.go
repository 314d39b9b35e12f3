package session

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flynn/noise"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// peer is the state this site keeps about one accepted site.
//
// Its keypairs follow WireGuard: current is used to send; previous is the
// one it replaced, still accepted on receive so that packets in flight
// during a rekey are not lost; next is a keypair this site created as
// responder, used to receive only until the initiator's first packet
// confirms it, when it becomes current.
type peer struct {
	site   wire.SiteID
	static keys.PublicKey

	current, previous, next atomic.Pointer[keypair]
	wanted                  atomic.Bool // a session is wanted (Connect, or a send without one)

	mu sync.Mutex // guards the rest, and rotations of the keypairs
	// The pending initiation, if any.
	hs           *noise.HandshakeState
	hsIndex      uint32
	hsPacket     []byte
	attemptStart time.Time
	hsSent       time.Time // when hsPacket was last sent (first or retry)
	nextRetry    time.Time
	retryDelay   time.Duration
	// Replay protection and rate limit of received initiations.
	lastTS     [wire.TimestampLen]byte
	lastInitAt time.Time
	// The initiation this site answered last, while its keypair is next.
	answered answer
	// Idle detection.
	lastActivity uint64
	lastActive   time.Time
	// The MACs of the handshake messages sent to this peer.
	ck cookieState
}

// byIndex returns the keypair whose local key id is idx, or nil.
func (p *peer) byIndex(idx uint32) *keypair {
	if k := p.current.Load(); k != nil && k.local == idx {
		return k
	}
	if k := p.next.Load(); k != nil && k.local == idx {
		return k
	}
	if k := p.previous.Load(); k != nil && k.local == idx {
		return k
	}
	return nil
}

// received records that k authenticated a packet: a keypair still in next
// is thereby confirmed and becomes current.
func (p *peer) received(k *keypair) {
	k.received.Add(1)
	if p.next.Load() != k {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next.Load() == k {
		p.previous.Store(p.current.Load())
		p.current.Store(k)
		p.next.Store(nil)
	}
}

// installInitiator makes k, just established as initiator, current.
// Caller holds p.mu.
func (p *peer) installInitiator(k *keypair) {
	if nx := p.next.Load(); nx != nil {
		p.previous.Store(nx)
		p.next.Store(nil)
	} else {
		p.previous.Store(p.current.Load())
	}
	p.current.Store(k)
}

// installResponder keeps k, just established as responder, as next until
// the initiator confirms it. Caller holds p.mu.
func (p *peer) installResponder(k *keypair) {
	p.next.Store(k)
}

// clearPending forgets the pending initiation. Caller holds p.mu.
func (p *peer) clearPending() {
	p.hs, p.hsIndex, p.hsPacket = nil, 0, nil
}

// expire drops keypairs older than RejectAfterTime. Caller holds p.mu.
func (p *peer) expire(now time.Time) int {
	dropped := 0
	for _, slot := range []*atomic.Pointer[keypair]{&p.current, &p.previous, &p.next} {
		if k := slot.Load(); k != nil && now.Sub(k.created) >= RejectAfterTime {
			slot.Store(nil)
			dropped++
		}
	}
	return dropped
}

// dropAll forgets every keypair. Caller holds p.mu.
func (p *peer) dropAll() {
	p.current.Store(nil)
	p.previous.Store(nil)
	p.next.Store(nil)
}

// activity sums the activity of all keypairs.
func (p *peer) activity() uint64 {
	var a uint64
	for _, k := range []*keypair{p.current.Load(), p.previous.Load(), p.next.Load()} {
		if k != nil {
			a += k.activity()
		}
	}
	return a
}

// answer is the last initiation a peer answered and the response it sent,
// kept while the response's keypair waits for its confirmation, so that a
// copy of the initiation (a retry: the answer has not arrived yet) is
// answered with the same response.
type answer struct {
	init []byte // the initiation without its MACs
	resp []byte
	k    *keypair
}

// remember keeps the initiation init, answered with resp, which made k.
func (a *answer) remember(init, resp []byte, k *keypair) {
	a.init = slices.Clone(init[:len(init)-wire.HandshakeMACsLen])
	a.resp, a.k = slices.Clone(resp), k
}

// again returns a copy of the response to pkt if pkt is the initiation
// answered last and that answer's keypair is still p's next.
func (a *answer) again(p *peer, pkt []byte) ([]byte, bool) {
	if a.k == nil || p.next.Load() != a.k || len(pkt) != len(a.init)+wire.HandshakeMACsLen || !bytes.Equal(pkt[:len(a.init)], a.init) {
		return nil, false
	}
	return slices.Clone(a.resp), true
}
