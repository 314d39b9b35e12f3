// Package site is one site's protocol core: the control node (membership,
// measurement, link state, routing), the session node that seals the
// control traffic, the queue of control messages waiting for a session,
// the restamping of probes as they leave, the mapping of receive times and
// the timer arithmetic. The agent (a real site) and the simulator (many
// sites in one process) both drive it, so the same code runs in both.
//
// The Core is pure, in the manner of the etcd raft library's Node and
// Ready: it owns no goroutine, clock or socket. Every input is a method
// call that carries the current time (a datagram received from an address,
// a timer tick, an operator's request); every output is collected into one
// Ready that the shell drains after its calls:
//
//	core.Receive(now, from, pkt)   // or Tick, Handshake, Pin, Leave...
//	rd := core.Ready(clock.Now())  // restamped and sealed as they leave
//	send(rd.Send); if rd.Table != nil { publish(rd.Table, rd.Gone) }
//	wait until core.NextDeadline() (or Wait(now)), then core.Tick(now)
//
// Calls must not overlap: one goroutine owns the core. Only the session
// node (Sessions) is shared with other goroutines, the data path's, whose
// methods on it are safe for concurrent use.
//
// See docs/site.md for why the core is cut this way.
package site

import (
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/wire"
)

// Datagram is a datagram to send to an underlay address.
type Datagram = control.Outgoing

// Config configures a Core.
type Config struct {
	// Control configures the control node.
	Control control.Config
	// Secure, when not nil, makes the site seal all its control traffic;
	// nil runs the overlay in the clear.
	Secure *Secure
}

// Secure holds a site's keys.
type Secure struct {
	// Private is this site's static private key.
	Private keys.PrivateKey
	// Peers is the accepted set: the public key of every other site.
	Peers map[wire.SiteID]keys.PublicKey
	// Addrs are the configured underlay addresses of peers (the others are
	// learned from membership and from the handshakes that arrive).
	Addrs map[wire.SiteID]netip.AddrPort
	// Rand supplies ephemeral keys and key ids; nil means crypto/rand.
	// A seeded source makes a simulated run repeat exactly.
	Rand io.Reader
	// Authority, when not nil, is the overlay CA: any site presenting a
	// certificate it verifies is accepted besides Peers, and its
	// revocations are applied and flooded (see trust.go).
	Authority *ca.Authority
	// Certificate is this site's certificate (package ca's encoding),
	// presented to the sites that may not know its key.
	Certificate []byte
}

// Ready is everything the core asks of its shell since the last call to
// Core.Ready: the one output of the core.
type Ready struct {
	// Send are the datagrams to send, in order.
	Send []Datagram
	// Table is the new routing table to publish to the data path, nil
	// when it did not change.
	Table *routing.Table
	// Gone are the sites in the previous table that Table no longer has:
	// the shell forgets what it learned about them (addresses, MACs).
	Gone []wire.SiteID
	// Switches are the changes of existing paths, for the log.
	Switches []routing.Switch
	// Rejected counts the control datagrams the control node rejected
	// (malformed, unknown sender, stale).
	Rejected uint64
	// KVPools, when not nil, is the key router's set of pools, which
	// changed since the last Ready (kvpools.go); the shell routes by it
	// and stores it.
	KVPools []wire.KVPool
}

// Core is one site's protocol state.
type Core struct {
	node     *control.Node
	sec      *secure // nil in the clear
	last     time.Time
	nextSec  time.Time // when the session timers run next
	table    *routing.Table
	changes  map[wire.SiteID]uint64 // path changes per destination
	forgot   map[wire.SiteID]bool   // down members whose sessions were dropped
	send     []Datagram
	rejected uint64
	kv       *kvpools // the key router's pools, distributed (kvpools.go)
}

// secTickInterval is the period of the session timers (handshake retries,
// rekeying, expiry).
const secTickInterval = 100 * time.Millisecond

// maxWait bounds the time between two ticks, so that a shell's timer is
// never set far ahead of a deadline that a call moved forward.
const maxWait = time.Second

// New returns the core of a site started at now.
func New(cfg Config, now time.Time) (*Core, error) {
	node, err := control.New(cfg.Control, now)
	if err != nil {
		return nil, err
	}
	c := &Core{node: node, last: now, nextSec: now, changes: map[wire.SiteID]uint64{}, forgot: map[wire.SiteID]bool{},
		kv: newKVPools()}
	c.kv.nextCheck = now
	if cfg.Secure != nil {
		if c.sec, err = newSecure(node.ID(), cfg.Secure); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Control returns the control node, for the views (members, links, routes,
// explanations). Its state changes only through the core.
func (c *Core) Control() *control.Node { return c.node }

// Sessions returns the session node the data path seals with, nil in the
// clear.
func (c *Core) Sessions() *session.Node {
	if c.sec == nil {
		return nil
	}
	return c.sec.node
}

// Sealed reports whether the site seals its traffic.
func (c *Core) Sealed() bool { return c.sec != nil }

// observe returns now, or the latest time already given if now is
// earlier: the node's clock never goes back, even when a datagram read
// before a tick is handled after it.
func (c *Core) observe(now time.Time) time.Time {
	if now.Before(c.last) {
		return c.last
	}
	c.last = now
	return now
}

// Receive handles a datagram from the underlay that is not data: a
// control datagram (sealed when the site is), or a handshake message.
// rx is when it was read (see ReceiveTime); the control node measures with
// it, while the rest of the core takes the latest time given, since a
// datagram read before a tick may be handled after it. pkt may be
// modified.
func (c *Core) Receive(rx time.Time, from netip.AddrPort, pkt []byte) {
	now := c.observe(rx)
	if _, _, err := wire.ParseCommon(pkt); err != nil {
		// Not a detour datagram (too short, wrong magic or version): the
		// control node drops it and counts it by kind, sealed or not,
		// before the sealing layer reads its type.
		if c.node.Receive(rx, from, pkt) != nil {
			c.rejected++
		}
		return
	}
	if c.sec != nil && IsHandshake(pkt) {
		c.Handshake(now, from, pkt)
		return
	}
	if c.sec != nil && wire.Type(pkt[2]) == wire.TypeCertificate {
		c.onCertificate(now, from, pkt)
		return
	}
	if c.sec == nil && isKVMessage(pkt) {
		c.onKVClear(now, from, pkt)
		return
	}
	if c.sec == nil {
		if err := c.node.Receive(rx, from, pkt); err != nil {
			c.rejected++
		}
		return
	}
	inner, site := c.sec.open(now, from, pkt, c.sendNow)
	switch {
	case inner == nil:
	case len(inner) >= wire.CommonHeaderLen && wire.Type(inner[2]) == wire.TypeRevocation:
		c.onRevocation(now, site, inner)
	case isKVMessage(inner):
		c.onKVMessage(now, site, inner)
	case c.node.Receive(rx, from, inner) != nil:
		c.rejected++
	}
	if site != 0 {
		// After the datagram, whose hello may have set the advertised
		// address: the source of authenticated datagrams wins.
		c.node.Roam(now, site, from)
	}
}

// IsHandshake reports whether a datagram is a handshake message
// (initiation, response or cookie reply).
func IsHandshake(pkt []byte) bool {
	if len(pkt) < wire.CommonHeaderLen {
		return false
	}
	switch wire.Type(pkt[2]) {
	case wire.TypeHandshakeInit, wire.TypeHandshakeResponse, wire.TypeCookieReply:
		return true
	}
	return false
}

// Tick runs the timers due at now: the control node's, and every
// secTickInterval the session node's.
func (c *Core) Tick(now time.Time) {
	now = c.observe(now)
	c.node.Tick(now)
	c.kvTick(now)
	if c.sec != nil && !now.Before(c.nextSec) {
		c.forgetDown()
		c.sec.tick(now, c.sendNow)
		c.nextSec = now.Add(secTickInterval)
	}
}

// forgetDown drops, once each time it goes down or leaves, the sessions
// with a member: if it restarted, it lost its keys and drops what is
// sealed with the old ones, and if it has no bootstrap address it would
// never learn that it must handshake again. The next message to it (a
// probe, at the down probe interval) then starts a new handshake, which a
// restarted site answers. A member seen alive again may be forgotten again.
func (c *Core) forgetDown() {
	alive, down, left := control.StateAlive.String(), control.StateDown.String(), control.StateLeft.String()
	for _, m := range c.node.Members() {
		switch {
		case m.Self:
		case m.State == alive:
			delete(c.forgot, m.ID)
		case (m.State == down || m.State == left) && !c.forgot[m.ID]:
			c.sec.node.Forget(m.ID)
			c.forgot[m.ID] = true
		}
	}
}

// NextDeadline returns when Tick should run next; a time not after the
// latest time given means at once.
func (c *Core) NextDeadline() time.Time {
	dl := c.node.NextDeadline()
	if c.sec != nil && (dl.IsZero() || c.nextSec.Before(dl)) {
		dl = c.nextSec
	}
	if dl.IsZero() || c.kv.nextCheck.Before(dl) {
		dl = c.kv.nextCheck
	}
	return dl
}

// Wait returns how long a shell with a timer waits from now before the
// next Tick: until NextDeadline, but never less than zero nor more than a
// second.
func (c *Core) Wait(now time.Time) time.Duration {
	dl := c.NextDeadline()
	if dl.IsZero() {
		return maxWait
	}
	return min(max(dl.Sub(now), 0), maxWait)
}

// ReceiveTime maps the kernel's receive time of a datagram onto the site's
// clock: now (the site's clock when the shell handles the datagram) less
// how long ago the kernel received it (lag, from the system clock), so
// that probe timestamps do not include the time a busy gateway took to
// read the datagram. A lag that is negative or a second or more is not
// trusted, and now is kept.
func ReceiveTime(now time.Time, lag time.Duration) time.Time {
	if lag > 0 && lag < time.Second {
		return now.Add(-lag)
	}
	return now
}

// Leave tells the other sites this one is going, so they drop it at once;
// afterwards the core is inert.
func (c *Core) Leave(now time.Time) { c.node.Leave(c.observe(now)) }

// Pin forces the path (site names, ending at dst) to dst.
func (c *Core) Pin(now time.Time, dst string, path []string) error {
	return c.node.Pin(c.observe(now), dst, path)
}

// Unpin removes the pin to dst.
func (c *Core) Unpin(now time.Time, dst string) error { return c.node.Unpin(c.observe(now), dst) }

// ForbidRelay stops relaying through site.
func (c *Core) ForbidRelay(now time.Time, site string) error {
	return c.node.ForbidRelay(c.observe(now), site)
}

// AllowRelay allows relaying through site again.
func (c *Core) AllowRelay(now time.Time, site string) error {
	return c.node.AllowRelay(c.observe(now), site)
}

// sendNow queues a datagram that is ready to leave as it is (sealed, or a
// handshake message).
func (c *Core) sendNow(to netip.AddrPort, payload []byte) {
	c.send = append(c.send, Datagram{To: to, Payload: payload})
}

// Ready returns and clears what the shell must do, with now the time the
// datagrams leave: probes and replies are restamped with it (on a busy
// gateway the time they were built and the time they leave can be
// milliseconds apart, which would read as link delay), then sealed.
func (c *Core) Ready(now time.Time) Ready {
	out := c.node.Outbox()
	for _, o := range out {
		wire.Restamp(o.Payload, now.UnixNano())
	}
	if c.sec != nil {
		if len(out) > 0 {
			c.sec.seal(now, out, c.memberAddrs, c.sendNow)
		}
	} else {
		c.send = append(c.send, out...)
	}
	rd := Ready{Send: sendable(c.send), Switches: c.node.Switches(), Rejected: c.rejected}
	c.send, c.rejected = nil, 0
	if c.kv.changed {
		rd.KVPools, c.kv.changed = c.KVPools(), false
	}
	if t := c.node.Table(); t != c.table {
		rd.Table, rd.Gone = t, c.advance(t)
	}
	return rd
}

// advance makes t the published table: it counts the path changes per
// destination and returns the sites the old table had and t lacks.
func (c *Core) advance(t *routing.Table) []wire.SiteID {
	old := c.table
	c.table = t
	for _, r := range t.Routes() {
		if prev, ok := old.Lookup(r.Dest); ok && !slices.Equal(prev.Path, r.Path) {
			c.changes[r.Dest]++
		}
	}
	if old == nil {
		return nil
	}
	var gone []wire.SiteID
	for _, id := range old.Sites() {
		if _, ok := t.Addr(id); !ok {
			gone = append(gone, id)
		}
	}
	return gone
}

// Changes returns how many published tables changed the path to dest.
func (c *Core) Changes(dest wire.SiteID) uint64 { return c.changes[dest] }

// memberAddrs returns the underlay address of every known member.
func (c *Core) memberAddrs() map[wire.SiteID]netip.AddrPort {
	out := map[wire.SiteID]netip.AddrPort{}
	for _, m := range c.node.Members() {
		if !m.Self && m.Addr.IsValid() {
			out[m.ID] = m.Addr
		}
	}
	return out
}

// sendable drops, in place, the datagrams to no address or to an
// unspecified one (the advertised address of a site behind NAT that has
// none, before its datagrams show where it is): sent, they would reach
// this very host.
func sendable(ds []Datagram) []Datagram {
	out := ds[:0]
	for _, d := range ds {
		if d.To.IsValid() && !d.To.Addr().IsUnspecified() && d.To.Port() != 0 {
			out = append(out, d)
		}
	}
	return out
}
