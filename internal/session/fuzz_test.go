package session

import (
	"bytes"
	"testing"

	"github.com/detour-overlay/detour/internal/wire"
)

// FuzzHandleHandshake feeds arbitrary handshake messages to a responder
// that has a pending initiation of its own: it must never panic, and only
// genuine messages may create sessions.
func FuzzHandleHandshake(f *testing.F) {
	n := mesh(f, 2)
	init, _ := n[0].Connect(t0, 2)
	f.Add(init)
	res, _ := n[1].HandleHandshake(t0, bytes.Clone(init))
	f.Add(res.Reply)
	f.Add([]byte{wire.Magic, wire.Version, byte(wire.TypeHandshakeResponse), 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		nodes := mesh(t, 2)
		nodes[1].Connect(t0, 1) // a pending initiation to answer or collide with
		r, err := nodes[1].HandleHandshake(t0, b)
		if err == nil && (r.Peer != 1 || r.Reply == nil) {
			t.Fatalf("accepted handshake with result %+v", r)
		}
	})
}

// FuzzOpenData feeds arbitrary data packets to a relay and a destination
// with live sessions: no panic, and nothing is accepted that was not
// sealed by a member (the fuzzer cannot forge Poly1305 tags). A relay
// checks the header and security block only, so it may pass a packet whose
// ciphertext was changed; the destination may not.
func FuzzOpenData(f *testing.F) {
	n := mesh(f, 3)
	connectAll(f, t0, n)
	seeds := [][]byte{
		dataPacket(f, n[0], []wire.SiteID{2, 3}, testFrame(64)),
		dataPacket(f, n[0], []wire.SiteID{3}, testFrame(20)),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	// genuine reports whether b is a seed up to what relays may rewrite;
	// a relay, which checks only up to the frame, sees only b[:covered].
	genuine := func(b []byte, relay bool) bool {
		for _, s := range seeds {
			x, y := relayInvariant(b), relayInvariant(s)
			if relay {
				covered := wire.FrameOffset(int(s[5]), true)
				x, y = x[:min(len(x), covered)], y[:covered]
			}
			if bytes.Equal(x, y) {
				return true
			}
		}
		return false
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, nd := range n[1:] {
			pkt := bytes.Clone(b)
			var h wire.DataHeader
			off, err := wire.ParseData(pkt, &h)
			if err != nil {
				return
			}
			relay := int(h.Hop) < int(h.PathLen)-1
			if relay {
				_, err = nd.Relay(pkt, &h, off)
			} else {
				_, err = nd.OpenData(pkt, &h, off)
			}
			if err == nil && !genuine(b, relay) {
				t.Fatalf("site %v accepted a packet the fuzzer made", nd.Self())
			}
		}
	})
}

// FuzzOpenControl feeds arbitrary sealed messages to a site.
func FuzzOpenControl(f *testing.F) {
	n := mesh(f, 2)
	connectAll(f, t0, n)
	msg, _ := n[0].SealControl(nil, 2, []byte("probe"))
	f.Add(msg)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, err := n[1].OpenControl(bytes.Clone(b))
		if err == nil && !bytes.Equal(b, msg) {
			t.Fatal("accepted a sealed message the fuzzer made")
		}
	})
}

// relayInvariant returns a copy of a data packet with the bytes relays may
// rewrite (hop index, hop block) zeroed.
func relayInvariant(b []byte) []byte {
	c := bytes.Clone(b)
	if len(c) > 5 {
		c[4] = 0
		pl := int(c[5])
		hop := wire.DataHeaderLen(pl) + wire.SealedDataE2ELen
		if pl > 1 && len(c) >= hop+wire.SealedDataHopLen {
			clear(c[hop : hop+wire.SealedDataHopLen])
		}
	}
	return c
}

// FuzzCookieReply feeds arbitrary bytes, as a cookie reply, to an initiator
// with a pending initiation and, as a handshake message, to a guard under
// load: no panic; no cookie is taken but the genuine reply's; nothing is
// admitted to handshake work without a valid mac1.
func FuzzCookieReply(f *testing.F) {
	n := mesh(f, 2)
	init, _ := n[0].Connect(t0, 2)
	g := NewGuard(n[1], GuardConfig{LoadBacklog: 1})
	_, reply := g.Screen(t0, addrA, init, 1)
	f.Add(reply)
	f.Add(init)
	f.Add([]byte{wire.Magic, wire.HandshakeVersion, byte(wire.TypeCookieReply), 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		nodes := mesh(t, 2)
		init, _ := nodes[0].Connect(t0, 2)
		g := NewGuard(nodes[1], GuardConfig{LoadBacklog: 1})
		_, genuine := g.Screen(t0, addrA, init, 1)
		// The seed reply is genuine too: made by the same responder key
		// for the same initiation (the mesh is deterministic). Flags are
		// not authenticated (unknown flags are ignored).
		same := func(x []byte) bool {
			return len(b) == len(x) && len(b) > 3 && bytes.Equal(b[:3], x[:3]) && bytes.Equal(b[4:], x[4:])
		}
		if err := nodes[0].HandleCookieReply(t0, b); err == nil && !same(genuine) && !same(reply) {
			t.Fatalf("took the cookie of a reply that is not a genuine one")
		}
		v, _ := g.Screen(t0, addrB, b, 1)
		if v == Admit && len(b) != wire.CookieReplyLen && !nodes[1].checker.CheckMAC1(b) {
			t.Fatalf("admitted %d bytes without a valid mac1", len(b))
		}
	})
}
