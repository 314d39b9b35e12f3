package site

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/wire"
)

// secure carries the control plane's datagrams over authenticated,
// encrypted sessions (package session). The control node stays unaware of
// it: its outgoing datagrams are sealed to the site at their address, and
// sealed datagrams are opened before it sees them. Control messages to a
// site without a session wait, bounded, while the handshake runs. Like the
// rest of the core it is used by one goroutine at a time.
type secure struct {
	node    *session.Node
	pending map[wire.SiteID][]pendingMsg
	// unnamed holds the control messages to addresses whose site is not
	// known yet (a bootstrap address, with certificates presented to it),
	// until its certificate names the site.
	unnamed map[netip.AddrPort][]pendingMsg
	// byAddr and addrOf map between sites and underlay addresses, from the
	// configured peers, the members the control node knows, and the
	// addresses handshakes came from.
	byAddr map[netip.AddrPort]wire.SiteID
	addrOf map[wire.SiteID]netip.AddrPort
	// trust admits sites by certificate and applies revocations.
	trust *trust
	// Counters for the API and metrics.
	unsealed, spoofed, unknownDest, pendingDropped uint64
}

type pendingMsg struct {
	queued  time.Time
	payload []byte
}

// Bounds of the queue of control messages waiting for a session, and of
// the addresses messages wait at for their site's certificate.
const (
	maxPending    = 32
	pendingMaxAge = 2 * time.Second
	maxUnnamed    = 4096
)

// newSecure builds the session node from the site's keys and the peers'
// configured addresses.
func newSecure(self wire.SiteID, cfg *Secure) (*secure, error) {
	s := &secure{pending: map[wire.SiteID][]pendingMsg{}, unnamed: map[netip.AddrPort][]pendingMsg{}, byAddr: map[netip.AddrPort]wire.SiteID{}, addrOf: map[wire.SiteID]netip.AddrPort{}}
	for id, ap := range cfg.Addrs {
		s.learn(id, ap)
	}
	var err error
	if s.trust, err = newTrust(self, cfg.Authority, cfg.Certificate); err != nil {
		return nil, err
	}
	s.node, err = session.NewNode(session.Config{Self: self, Private: cfg.Private, Peers: cfg.Peers, Rand: cfg.Rand})
	return s, err
}

// learn records that site is reached at addr.
func (s *secure) learn(site wire.SiteID, addr netip.AddrPort) {
	if old, ok := s.addrOf[site]; ok && old != addr {
		delete(s.byAddr, old)
	}
	s.addrOf[site] = addr
	s.byAddr[addr] = site
}

// open turns a received datagram into the control datagram the control
// node should see, or nil. Handshake messages take their own path
// (Core.Handshake).
// It also returns the authenticated site that sealed the datagram (zero
// when none did), whose address the core follows (roaming), keepalives
// included.
func (s *secure) open(now time.Time, from netip.AddrPort, pkt []byte, send func(netip.AddrPort, []byte)) ([]byte, wire.SiteID) {
	switch wire.Type(pkt[2]) {
	case wire.TypeHandshakeInit, wire.TypeHandshakeResponse, wire.TypeCookieReply:
		return nil, 0 // the handshake path's (Core.Handshake), never queued here
	case wire.TypeSealed:
		site, inner, err := s.node.OpenControl(pkt)
		if err != nil {
			return nil, 0 // counted by the session node
		}
		s.learn(site, from)
		s.release(now, site, send)
		if len(inner) == 0 {
			return nil, site // a keepalive
		}
		if !senderIs(inner, site) {
			s.spoofed++
			return nil, 0
		}
		return inner, site
	}
	s.unsealed++ // a control message in the clear: never trusted
	return nil, 0
}

// senderIs reports whether a control datagram that names its sender names
// site. Link state is flooded, so its origin is not its sender.
func senderIs(inner []byte, site wire.SiteID) bool {
	if len(inner) < wire.CommonHeaderLen+4 || wire.Type(inner[2]) == wire.TypeLinkState {
		return true
	}
	return wire.SiteID(binary.BigEndian.Uint32(inner[4:8])) == site
}

// seal sends the control node's outgoing datagrams sealed, or queues them
// until the destination's session is up (and sends the initiation that
// starts it).
func (s *secure) seal(now time.Time, msgs []Datagram, members func() map[wire.SiteID]netip.AddrPort, send func(netip.AddrPort, []byte)) {
	for _, m := range msgs {
		site, ok := s.byAddr[m.To]
		if !ok {
			for id, a := range members() {
				s.learn(id, a)
			}
			if site, ok = s.byAddr[m.To]; !ok {
				// A bootstrap address known by address only: show it
				// this site's certificate and ask for its own; the
				// message waits for it.
				s.unknownDest++
				s.trust.present(now, m.To, true, send)
				s.waitForName(now, m.To, m.Payload)
				continue
			}
		}
		if !s.node.Ready(site) {
			s.enqueue(now, site, m.Payload)
			init, err := s.node.Connect(now, site)
			switch {
			case err == nil && init != nil:
				send(m.To, init)
			case unknownPeer(err):
				s.trust.present(now, m.To, true, send)
			}
			continue
		}
		if sealed, err := s.node.SealControl(nil, site, m.Payload); err == nil {
			send(m.To, sealed)
		}
	}
}

func (s *secure) enqueue(now time.Time, site wire.SiteID, payload []byte) {
	s.pending[site] = s.queue(s.pending[site], pendingMsg{queued: now, payload: payload})
}

// queue appends m to q, dropping the oldest message of a full queue.
func (s *secure) queue(q []pendingMsg, m pendingMsg) []pendingMsg {
	if len(q) >= maxPending {
		q = q[1:]
		s.pendingDropped++
	}
	return append(q, m)
}

// waitForName keeps a message to an address whose site is unknown, when
// this site presents a certificate that may bring the other's in reply.
func (s *secure) waitForName(now time.Time, to netip.AddrPort, payload []byte) {
	if s.trust.cert == nil {
		return
	}
	if _, ok := s.unnamed[to]; !ok && len(s.unnamed) >= maxUnnamed {
		s.pendingDropped++
		return
	}
	s.unnamed[to] = s.queue(s.unnamed[to], pendingMsg{queued: now, payload: payload})
}

// named moves the messages that waited at addr to its site, now known,
// and reports whether any moved.
func (s *secure) named(addr netip.AddrPort, site wire.SiteID) bool {
	q := s.unnamed[addr]
	for _, m := range q {
		s.pending[site] = s.queue(s.pending[site], m)
	}
	delete(s.unnamed, addr)
	return len(q) > 0
}

// release sends what waited for site once its session is ready.
func (s *secure) release(now time.Time, site wire.SiteID, send func(netip.AddrPort, []byte)) {
	q := s.pending[site]
	if len(q) == 0 || !s.node.Ready(site) {
		return
	}
	delete(s.pending, site)
	addr := s.addrOf[site]
	for _, m := range q {
		if now.Sub(m.queued) > pendingMaxAge {
			s.pendingDropped++
			continue
		}
		if sealed, err := s.node.SealControl(nil, site, m.payload); err == nil {
			send(addr, sealed)
		}
	}
}

// tick runs the session timers and sends the handshakes they produce.
func (s *secure) tick(now time.Time, send func(netip.AddrPort, []byte)) {
	for _, o := range s.node.Tick(now) {
		if addr, ok := s.addrOf[o.To]; ok {
			send(addr, o.Packet)
		}
	}
	for site, q := range s.pending {
		if len(q) > 0 && now.Sub(q[len(q)-1].queued) > pendingMaxAge {
			s.pendingDropped += uint64(len(q))
			delete(s.pending, site)
		}
	}
	for addr, q := range s.unnamed {
		if len(q) > 0 && now.Sub(q[len(q)-1].queued) > pendingMaxAge {
			s.pendingDropped += uint64(len(q))
			delete(s.unnamed, addr)
		}
	}
}

// counters returns the secure layer's counters by name.
func (s *secure) counters() map[string]uint64 {
	st := s.node.Stats()
	out := map[string]uint64{
		"session_initiations":         st.Initiations,
		"session_responses":           st.Responses,
		"session_resent":              st.Resent,
		"session_established":         st.Established,
		"session_collisions":          st.Collisions,
		"session_handshake_malformed": st.HandshakeMalformed,
		"session_handshake_rejected":  st.HandshakeRejected,
		"session_initiation_replays":  st.InitiationReplays,
		"session_unknown_peer":        st.UnknownPeer,
		"session_no_session":          st.NoSession,
		"session_auth_failures":       st.AuthFailures,
		"session_hop_auth_failures":   st.HopAuthFailures,
		"session_replays":             st.Replays,
		"session_malformed":           st.Malformed,
		"session_expired":             st.Expired,
		"session_gave_up":             st.GaveUp,
		"session_bad_mac1":            st.BadMAC1,
		"session_cookies_received":    st.CookiesReceived,
		"session_bad_cookie_replies":  st.BadCookieReplies,
		"session_forgotten":           st.Forgotten,
		"control_unsealed_dropped":    s.unsealed,
		"control_spoofed_sender":      s.spoofed,
		"control_unknown_destination": s.unknownDest,
		"control_pending_dropped":     s.pendingDropped,
		"session_admitted":            st.Admitted,
		"session_removed":             st.Removed,
	}
	s.trust.counters(out)
	return out
}
