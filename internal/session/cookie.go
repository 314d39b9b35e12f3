package session

import (
	"crypto/subtle"
	"errors"
	"hash"
	"io"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/chacha20poly1305"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// The MACs of handshake messages and the cookies, after WireGuard (paper
// §5.4, wireguard-go device/cookie.go):
//
//	mac1   = MAC(HASH("mac1----" || receiver's public key), msg up to mac1)
//	mac2   = MAC(cookie, msg up to mac2), or zero without a cookie
//	cookie = MAC(secret, source address), secret random, renewed every 2 min
//	reply  = XChaCha20-Poly1305(HASH("cookie--" || responder's public key),
//	         random nonce, cookie, associated data = mac1 of the message)
//
// MAC is keyed BLAKE2s-128 and HASH BLAKE2s-256.
const (
	// CookieRefreshTime is how often a responder renews the secret its
	// cookies are made from, and how long an initiator uses a cookie.
	CookieRefreshTime = 120 * time.Second
	// cookieUseTime is how long an initiator uses a cookie: a little less
	// than the responder keeps the secret it was made from.
	cookieUseTime = CookieRefreshTime - 5*time.Second
)

var (
	labelMAC1   = []byte("mac1----")
	labelCookie = []byte("cookie--")
)

// ErrBadCookieReply is returned for a cookie reply that matches no
// initiation this site sent or that does not authenticate.
var ErrBadCookieReply = errors.New("session: cookie reply matches no initiation")

// macKeys are the two keys derived from a site's public key.
type macKeys struct {
	mac1   [blake2s.Size]byte
	cookie [blake2s.Size]byte
}

func deriveMACKeys(pub keys.PublicKey) macKeys {
	var k macKeys
	k.mac1 = blake2s.Sum256(append(append([]byte(nil), labelMAC1...), pub[:]...))
	k.cookie = blake2s.Sum256(append(append([]byte(nil), labelCookie...), pub[:]...))
	return k
}

// newMAC returns a keyed BLAKE2s-128 hash; Reset brings back its keyed
// state, so it can be reused without allocating.
func newMAC(key []byte) hash.Hash {
	h, err := blake2s.New128(key)
	if err != nil {
		panic(err) // only for a key longer than 32 bytes, a programming error
	}
	return h
}

// mac writes MAC(h's key, msg) into out.
func mac(h hash.Hash, out *[wire.MACLen]byte, msg []byte) {
	h.Reset()
	h.Write(msg)
	h.Sum(out[:0])
}

// macOffsets returns where mac1 and mac2 start in a handshake message of
// length n.
func macOffsets(n int) (int, int) {
	return n - wire.HandshakeMACsLen, n - wire.MACLen
}

// CookieChecker is the responder's side: it checks the MACs of received
// handshake messages and makes cookie replies. It is pure (time is
// passed in) and safe for concurrent use.
type CookieChecker struct {
	mu       sync.Mutex
	self     wire.SiteID
	keys     macKeys
	mac1     hash.Hash
	sum      [wire.MACLen]byte // scratch for mac1, so checking it does not allocate
	rand     io.Reader
	secret   [blake2s.Size]byte
	secretAt time.Time
	hasSec   bool
	// prevMAC1 checks mac1 for the key before the last rotation (nil
	// before any; see rotate.go).
	prevMAC1 hash.Hash
}

// NewCookieChecker returns the checker of the site self with public key
// pub. rand draws secrets and nonces; nil is not allowed.
func NewCookieChecker(self wire.SiteID, pub keys.PublicKey, rand io.Reader) *CookieChecker {
	c := &CookieChecker{self: self, keys: deriveMACKeys(pub), rand: rand}
	c.mac1 = newMAC(c.keys.mac1[:])
	return c
}

// CheckMAC1 reports whether the handshake message pkt, of the exact length
// of its type, carries a valid mac1 for this site. It costs one BLAKE2s
// over the message and no public-key operation.
func (c *CookieChecker) CheckMAC1(pkt []byte) bool {
	if len(pkt) < wire.HandshakeHeaderLen+wire.HandshakeMACsLen {
		return false
	}
	o1, o2 := macOffsets(len(pkt))
	c.mu.Lock()
	defer c.mu.Unlock()
	mac(c.mac1, &c.sum, pkt[:o1])
	return subtle.ConstantTimeCompare(c.sum[:], pkt[o1:o2]) == 1 || c.checkPrevMAC1(pkt, o1, o2)
}

// CheckMAC2 reports whether pkt carries a valid mac2: one made with the
// cookie this site gives to src under its current secret.
func (c *CookieChecker) CheckMAC2(now time.Time, pkt []byte, src netip.AddrPort) bool {
	if len(pkt) < wire.HandshakeHeaderLen+wire.HandshakeMACsLen {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hasSec || now.Sub(c.secretAt) >= CookieRefreshTime {
		return false
	}
	cookie := c.cookieFor(src)
	_, o2 := macOffsets(len(pkt))
	var want [wire.MACLen]byte
	mac(newMAC(cookie[:]), &want, pkt[:o2])
	return subtle.ConstantTimeCompare(want[:], pkt[o2:]) == 1
}

// cookieFor returns the cookie of src under the current secret. Caller
// holds c.mu.
func (c *CookieChecker) cookieFor(src netip.AddrPort) [wire.CookieLen]byte {
	var cookie [wire.CookieLen]byte
	h := newMAC(c.secret[:])
	ip := src.Addr().As16()
	h.Write(ip[:])
	h.Write([]byte{byte(src.Port() >> 8), byte(src.Port())})
	h.Sum(cookie[:0])
	return cookie
}

// CookieReply returns the cookie reply to the handshake message pkt
// (whose mac1 the caller has checked) received from src, renewing the
// secret when it is older than CookieRefreshTime.
func (c *CookieChecker) CookieReply(now time.Time, pkt []byte, src netip.AddrPort) ([]byte, error) {
	if len(pkt) < wire.HandshakeHeaderLen+wire.HandshakeMACsLen {
		return nil, wire.ErrTruncated
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hasSec || now.Sub(c.secretAt) >= CookieRefreshTime {
		if _, err := io.ReadFull(c.rand, c.secret[:]); err != nil {
			return nil, err
		}
		c.secretAt, c.hasSec = now, true
	}
	cookie := c.cookieFor(src)
	out := make([]byte, wire.HandshakeHeaderLen+wire.CookieNonceLen, wire.CookieReplyLen)
	wire.PutCookieReplyHeader(out, c.self, be32(pkt[8:]))
	nonce := out[wire.HandshakeHeaderLen:]
	if _, err := io.ReadFull(c.rand, nonce); err != nil {
		return nil, err
	}
	aead, err := chacha20poly1305.NewX(c.keys.cookie[:])
	if err != nil {
		return nil, err
	}
	o1, o2 := macOffsets(len(pkt))
	return aead.Seal(out, nonce, cookie[:], pkt[o1:o2]), nil
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// cookieState is the initiator's side for one peer (the CookieGenerator of
// wireguard-go): the keys derived from the peer's public key, the last
// cookie it gave and the mac1 of the last initiation sent, which a cookie
// reply must answer. Guarded by the peer's mutex.
type cookieState struct {
	keys     macKeys
	cookie   [wire.CookieLen]byte
	cookieAt time.Time
	hasCk    bool
	lastMAC1 [wire.MACLen]byte
	sentInit bool
}

// addMACs fills the two MACs at the end of the handshake message pkt for
// this peer: mac1 always, mac2 when a cookie from the peer is fresh. It
// remembers mac1 of an initiation, for the cookie reply.
func (s *cookieState) addMACs(now time.Time, pkt []byte) {
	o1, o2 := macOffsets(len(pkt))
	var m [wire.MACLen]byte
	mac(newMAC(s.keys.mac1[:]), &m, pkt[:o1])
	copy(pkt[o1:o2], m[:])
	if wire.Type(pkt[2]) == wire.TypeHandshakeInit {
		s.lastMAC1, s.sentInit = m, true
	}
	if !s.hasCk || now.Sub(s.cookieAt) >= cookieUseTime {
		clear(pkt[o2:])
		return
	}
	mac(newMAC(s.cookie[:]), &m, pkt[:o2])
	copy(pkt[o2:], m[:])
}

// consume opens the sealed cookie of a cookie reply to the last
// initiation and keeps it.
func (s *cookieState) consume(now time.Time, r *wire.CookieReply) error {
	if !s.sentInit {
		return ErrBadCookieReply
	}
	aead, err := chacha20poly1305.NewX(s.keys.cookie[:])
	if err != nil {
		return err
	}
	var cookie [wire.CookieLen]byte
	if _, err := aead.Open(cookie[:0], r.Nonce, r.Sealed, s.lastMAC1[:]); err != nil {
		return ErrBadCookieReply
	}
	s.cookie, s.cookieAt, s.hasCk = cookie, now, true
	return nil
}

// PutMAC1 writes into the handshake message pkt the mac1 that a site with
// public key receiver checks, and zeroes mac2. Sites never need it (the
// node adds its MACs); the testbed's flooder does, to send what a host
// that knows the key would.
func PutMAC1(pkt []byte, receiver keys.PublicKey) {
	if len(pkt) < wire.HandshakeHeaderLen+wire.HandshakeMACsLen {
		return
	}
	k := deriveMACKeys(receiver)
	o1, o2 := macOffsets(len(pkt))
	var m [wire.MACLen]byte
	mac(newMAC(k.mac1[:]), &m, pkt[:o1])
	copy(pkt[o1:o2], m[:])
	clear(pkt[o2:])
}
