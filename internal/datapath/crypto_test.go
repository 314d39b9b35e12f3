package datapath

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// sessionNodes returns session nodes for sites 1..n with a confirmed
// session between every pair, completed in process.
func sessionNodes(t *testing.T, n int) map[wire.SiteID]*session.Node {
	t.Helper()
	privs := make([]keys.PrivateKey, n)
	pubs := map[wire.SiteID]keys.PublicKey{}
	for i := range privs {
		p, err := keys.Generate(nil)
		if err != nil {
			t.Fatal(err)
		}
		privs[i] = p
		pubs[wire.SiteID(i+1)] = p.Public()
	}
	nodes := map[wire.SiteID]*session.Node{}
	for i := range privs {
		self := wire.SiteID(i + 1)
		peers := map[wire.SiteID]keys.PublicKey{}
		for id, k := range pubs {
			if id != self {
				peers[id] = k
			}
		}
		nd, err := session.NewNode(session.Config{Self: self, Private: privs[i], Peers: peers})
		if err != nil {
			t.Fatal(err)
		}
		nodes[self] = nd
	}
	now := time.Now()
	for a := wire.SiteID(1); a <= wire.SiteID(n); a++ {
		for b := a + 1; b <= wire.SiteID(n); b++ {
			shake(t, now, nodes[a], nodes[b])
		}
	}
	return nodes
}

// shake runs one handshake from a to b through to the confirming keepalive.
func shake(t *testing.T, now time.Time, a, b *session.Node) {
	t.Helper()
	init, err := a.Connect(now, b.Self())
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.HandleHandshake(now, init)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := a.HandleHandshake(now, res.Reply)
	if err != nil || !res2.Established {
		t.Fatalf("handshake %v->%v: %v", a.Self(), b.Self(), err)
	}
	if _, _, err := b.OpenControl(res2.Reply); err != nil {
		t.Fatal(err)
	}
}

func TestSealedFramesCrossARelayWithoutPlaintextOnTheWire(t *testing.T) {
	nodes := sessionNodes(t, 3)
	nw := transport.NewFakeNetwork()
	secret := []byte("a secret nobody on the underlay may read")
	var leaked, seen atomic.Int64
	nw.Drop = func(_, _ netip.AddrPort, payload []byte) bool {
		seen.Add(1)
		if bytes.Contains(payload, secret) {
			leaked.Add(1)
		}
		return false
	}
	a, b, c := threeSitesOn(t, nw, func(id wire.SiteID) Crypto { return nodes[id] })

	arp := frame(0xff, 0xc, "who-has")
	c.dev.Inject(arp)
	expect(t, a, arp)
	expect(t, b, arp)

	uni := frame(0xc, 0xa, string(secret))
	a.dev.Inject(uni)
	expect(t, c, uni) // a reaches c through the relay b
	expectNone(t, b)
	if b.eng.Stats().Relayed.Load() != 1 {
		t.Errorf("b relayed %d packets, want 1", b.eng.Stats().Relayed.Load())
	}
	if leaked.Load() != 0 || seen.Load() < 3 {
		t.Errorf("%d of %d datagrams carried the plaintext", leaked.Load(), seen.Load())
	}
}

func TestPlaintextAndTamperedPacketsAreDroppedWhenSealing(t *testing.T) {
	nodes := sessionNodes(t, 3)
	nw := transport.NewFakeNetwork()
	var tamper atomic.Bool
	nw.Drop = func(_, _ netip.AddrPort, payload []byte) bool {
		if tamper.Load() && len(payload) > 60 {
			payload[len(payload)-20] ^= 1 // the copy delivered is taken after this call
		}
		return false
	}
	a, b, _ := threeSitesOn(t, nw, func(id wire.SiteID) Crypto { return nodes[id] })

	// A plaintext data packet, as an unencrypted agent would send it.
	h := wire.DataHeader{Source: 2, Network: testNet, PathLen: 1}
	h.Path[0] = 1
	buf := make([]byte, 200)
	n := h.Put(buf)
	n += copy(buf[n:], frame(0xa, 0xb, "forged"))
	b.eng.conn.WriteBatch([]transport.Message{{Buf: buf, N: n, Addr: a.eng.conn.LocalAddr()}})
	waitCount(t, &a.eng.Stats().DropCrypto, 1)

	tamper.Store(true)
	b.dev.Inject(frame(0xff, 0xb, "a frame altered in flight, long enough to flip a byte"))
	waitCount(t, &a.eng.Stats().DropCrypto, 2)
	expectNone(t, a)
}

func waitCount(t *testing.T, c *atomic.Uint64, want uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for c.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("counter at %d, want %d", c.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
