package session

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// Timers and limits, after WireGuard's.
const (
	// RekeyAfterTime is the age at which the initiator of a session starts
	// a new handshake.
	RekeyAfterTime = 120 * time.Second
	// RekeyJitter spreads rekeys: each keypair is renewed at a random
	// age in [RekeyAfterTime, RekeyAfterTime+RekeyJitter), so that the
	// sessions of a whole overlay, made within seconds of each other when
	// it started, do not all rekey at the same moment ever after.
	RekeyJitter = 10 * time.Second
	// ResponderRekeyDelay is how much later the responder of a session
	// rekeys if the initiator has not. It is at least RekeyJitter, so the
	// initiator, whatever its jitter, goes first and the two rarely
	// collide.
	ResponderRekeyDelay = 15 * time.Second
	// RejectAfterTime is the age after which a keypair is dropped.
	RejectAfterTime = 180 * time.Second
	// IdleTimeout drops the sessions of a peer that neither sent nor
	// received anything for that long.
	IdleTimeout = 60 * time.Second
	// RetryInitial is the delay before the first retry of an initiation;
	// it doubles with every retry up to RetryMax.
	RetryInitial = 500 * time.Millisecond
	// RetryMax bounds the retry delay.
	RetryMax = 8 * time.Second
	// RekeyAttemptTime is how long a handshake is retried before giving up
	// (until the peer is wanted again).
	RekeyAttemptTime = 90 * time.Second
	// UnconfirmedTimeout is how long a wanted peer waits for the
	// confirmation of a session it answered before initiating its own.
	// The confirmation comes one round trip after the answer, so a
	// second is longer than any path's, and an answer lost on the way
	// costs the pair a second rather than the initiator's backed-off
	// retries (docs/site.md, "A whole overlay shaking hands at once").
	UnconfirmedTimeout = time.Second
	// MinInitiationInterval rate-limits accepted initiations per peer.
	MinInitiationInterval = 20 * time.Millisecond
)

// Message limits.
const (
	// RekeyAfterMessages is the number of messages after which a session
	// is renewed.
	RekeyAfterMessages = 1 << 60
	// RejectAfterMessages is the counter at which a key stops being used.
	RejectAfterMessages = math.MaxUint64 - (1 << 13)
)

// Errors. Every drop is one of these; callers count them by kind (the Node
// also counts them, see Stats).
var (
	ErrUnknownPeer        = errors.New("session: site not in the accepted set")
	ErrNoSession          = errors.New("session: no session with the site (handshake pending)")
	ErrReplay             = errors.New("session: replayed or too old packet")
	ErrAuth               = errors.New("session: authentication failed")
	ErrNotSealed          = errors.New("session: data packet is not sealed")
	ErrMisdirected        = errors.New("session: packet not addressed to this site at this hop")
	ErrShortBuffer        = errors.New("session: buffer too small")
	ErrCounterExhausted   = errors.New("session: key counter exhausted")
	ErrUnknownKey         = errors.New("session: initiator's static key is not the one accepted for its site")
	ErrReplayedInitiation = errors.New("session: replayed or stale handshake initiation")
	ErrCollision          = errors.New("session: initiation dropped, ours takes precedence")
	ErrRateLimited        = errors.New("session: initiation rate-limited")
	ErrUnexpected         = errors.New("session: handshake response matches no initiation")
	ErrBadMAC1            = errors.New("session: handshake message without a valid mac1")
)

// Config configures a Node.
type Config struct {
	// Self is this site's ID.
	Self wire.SiteID
	// Private is this site's static private key.
	Private keys.PrivateKey
	// Peers is the accepted set: the public key of every site this one
	// talks to. A site not listed cannot handshake, send or relay.
	Peers map[wire.SiteID]keys.PublicKey
	// Rand supplies ephemeral keys and key ids; nil means crypto/rand.
	Rand io.Reader
}

// Output is a handshake message for the caller to send to a site.
type Output struct {
	To     wire.SiteID
	Packet []byte
}

// Node is a site's secure-channel state: its identity, its peers and their
// sessions. Handshake and timer methods (HandleHandshake, Tick, Connect)
// are pure: time is passed in, messages to send are returned. Data-path
// methods (SealData, Relay, OpenData, SealControl, OpenControl) may be
// called concurrently with them and with each other, and do not allocate.
type Node struct {
	self   wire.SiteID
	idMu   sync.RWMutex // guards static and public, which Rotate changes
	static keys.PrivateKey
	public keys.PublicKey
	rand   io.Reader
	// peers is the accepted set, replaced as a whole (copy on write) by
	// Admit and Remove, so the data path reads it with one atomic load.
	peers   atomic.Pointer[peerSet]
	peersMu sync.Mutex // serialises Admit and Remove

	mu      sync.Mutex // guards lastTS
	lastTS  [wire.TimestampLen]byte
	stats   counters
	checker *CookieChecker
}

// NewNode checks cfg and returns a node with no sessions.
func NewNode(cfg Config) (*Node, error) {
	if cfg.Self == 0 {
		return nil, errors.New("session: Self is zero")
	}
	r := cfg.Rand
	if r == nil {
		r = rand.Reader
	}
	n := &Node{self: cfg.Self, static: cfg.Private, public: cfg.Private.Public(), rand: r}
	set := &peerSet{byID: make(map[wire.SiteID]*peer, len(cfg.Peers))}
	n.checker = NewCookieChecker(cfg.Self, n.public, r)
	byKey := map[keys.PublicKey]wire.SiteID{}
	for site, pub := range cfg.Peers {
		if site == cfg.Self || site == 0 {
			return nil, fmt.Errorf("session: peer %v: is this site or zero", site)
		}
		if pub.IsZero() {
			return nil, fmt.Errorf("session: peer %v: no public key", site)
		}
		if other, dup := byKey[pub]; dup {
			return nil, fmt.Errorf("session: peers %v and %v have the same public key", other, site)
		}
		byKey[pub] = site
		p := &peer{site: site, static: pub, ck: cookieState{keys: deriveMACKeys(pub)}}
		set.byID[site] = p
		set.order = append(set.order, p)
	}
	sort.Slice(set.order, func(i, j int) bool { return set.order[i].site < set.order[j].site })
	n.peers.Store(set)
	return n, nil
}

// Checker returns the node's cookie checker, for a Guard.
func (n *Node) Checker() *CookieChecker { return n.checker }

// Self returns this site's ID.
func (n *Node) Self() wire.SiteID { return n.self }

// PublicKey returns this site's public key.
func (n *Node) PublicKey() keys.PublicKey {
	n.idMu.RLock()
	defer n.idMu.RUnlock()
	return n.public
}

// Ready reports whether this site can send to site now (it has a
// confirmed session with it).
func (n *Node) Ready(site wire.SiteID) bool {
	p := n.peer(site)
	return p != nil && p.current.Load() != nil
}

// newIndex returns a random key id.
func (n *Node) newIndex() (uint32, error) {
	var b [4]byte
	for {
		if _, err := io.ReadFull(n.rand, b[:]); err != nil {
			return 0, err
		}
		if v := binary.BigEndian.Uint32(b[:]); v != 0 {
			return v, nil
		}
	}
}

// rekeyAge returns the age at which a keypair made now is to be renewed:
// RekeyAfterTime, plus ResponderRekeyDelay on the responder's side, plus a
// random jitter below RekeyJitter.
func (n *Node) rekeyAge(initiator bool) (time.Duration, error) {
	var b [4]byte
	if _, err := io.ReadFull(n.rand, b[:]); err != nil {
		return 0, err
	}
	// The jitter is drawn in microseconds so the product fits 64 bits.
	us := uint64(binary.BigEndian.Uint32(b[:])) * uint64(RekeyJitter/time.Microsecond) >> 32
	age := RekeyAfterTime + time.Duration(us)*time.Microsecond
	if !initiator {
		age += ResponderRekeyDelay
	}
	return age, nil
}

// timestamp returns the TAI64N label of now, strictly greater than any
// earlier one from this node, so a peer never sees two initiations with
// the same timestamp.
func (n *Node) timestamp(now time.Time) [wire.TimestampLen]byte {
	var ts [wire.TimestampLen]byte
	binary.BigEndian.PutUint64(ts[0:], uint64(1<<62)+uint64(now.Unix()))
	binary.BigEndian.PutUint32(ts[8:], uint32(now.Nanosecond()))
	n.mu.Lock()
	defer n.mu.Unlock()
	if !tsAfter(ts, n.lastTS) {
		ts = n.lastTS
		incrementTS(&ts)
	}
	n.lastTS = ts
	return ts
}

// tsAfter reports whether a is a later TAI64N label than b.
func tsAfter(a, b [wire.TimestampLen]byte) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return false
}

// incrementTS adds one nanosecond-step to a label (as a big-endian number).
func incrementTS(ts *[wire.TimestampLen]byte) {
	for i := len(ts) - 1; i >= 0; i-- {
		ts[i]++
		if ts[i] != 0 {
			return
		}
	}
}
