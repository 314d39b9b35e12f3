package site

import (
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/wire"
)

// The handshake path has two halves so that a shell can run the first
// apart from the core. HandshakeWork does the Diffie-Hellman work on the
// session node, which is safe for concurrent use: the agent runs it on a
// worker goroutine behind its guard, so that a flood of handshakes never
// stalls the control loop. Handshaken then brings the result into the
// core: the reply to send, the peer's address, and the control messages
// that waited for the session. Handshake runs both, for a shell that
// needs no such split (the simulator).

// Handshake handles a handshake message (initiation, response or cookie
// reply) from an underlay address. It returns the session node's error
// when the message was dropped (counted in its Stats).
func (c *Core) Handshake(now time.Time, from netip.AddrPort, pkt []byte) error {
	if c.sec == nil {
		return session.ErrUnknownPeer
	}
	now = c.observe(now)
	res, err := HandshakeWork(c.sec.node, now, pkt)
	c.Handshaken(now, from, res, err)
	return err
}

// HandshakeWork runs a handshake message through a session node and
// returns what it did. A cookie reply yields an empty Result.
func HandshakeWork(node *session.Node, now time.Time, pkt []byte) (session.Result, error) {
	if len(pkt) >= wire.CommonHeaderLen && wire.Type(pkt[2]) == wire.TypeCookieReply {
		return session.Result{}, node.HandleCookieReply(now, pkt)
	}
	return node.HandleHandshake(now, pkt)
}

// Handshaken takes the result of HandshakeWork on a message from the
// address from: it sends the reply, and when the message came from an
// accepted peer, records the peer's address and sends what waited for
// the session. A handshake from a site this site does not accept, which
// holds this site's key (its mac1 was good), asks for that site's
// certificate: this site's own answer to it may have been lost (trust).
func (c *Core) Handshaken(now time.Time, from netip.AddrPort, res session.Result, err error) {
	if c.sec == nil {
		return
	}
	now = c.observe(now)
	if res.Reply != nil {
		c.sendNow(from, res.Reply)
	}
	if unknownPeer(err) {
		c.sec.trust.present(now, from, true, c.sendNow)
		return
	}
	if err != nil || res.Peer == 0 {
		return
	}
	c.sec.learn(res.Peer, from)
	c.sec.release(now, res.Peer, c.sendNow)
}
