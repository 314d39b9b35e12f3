package session

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// t0 is the start of every test clock.
var t0 = time.Unix(1_700_000_000, 0)

// seeded returns a deterministic randomness source.
func seeded(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	return rand.NewChaCha8(s)
}

// mesh builds n nodes with site IDs 1..n that all accept each other.
func mesh(t testing.TB, n int) []*Node {
	t.Helper()
	priv := make([]keys.PrivateKey, n)
	pub := map[wire.SiteID]keys.PublicKey{}
	for i := range priv {
		k, err := keys.Generate(seeded(uint64(100 + i)))
		if err != nil {
			t.Fatal(err)
		}
		priv[i] = k
		pub[wire.SiteID(i+1)] = k.Public()
	}
	nodes := make([]*Node, n)
	for i := range nodes {
		peers := map[wire.SiteID]keys.PublicKey{}
		for s, p := range pub {
			if s != wire.SiteID(i+1) {
				peers[s] = p
			}
		}
		nd, err := NewNode(Config{Self: wire.SiteID(i + 1), Private: priv[i], Peers: peers, Rand: seeded(uint64(i + 1))})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = nd
	}
	return nodes
}

// handshake runs a complete handshake initiated by a towards b at now,
// delivering every message, and fails the test on any error.
func handshake(t testing.TB, now time.Time, a, b *Node) {
	t.Helper()
	init, err := a.Connect(now, b.Self())
	if err != nil || init == nil {
		t.Fatalf("Connect: %v, %d bytes", err, len(init))
	}
	complete(t, now, a, b, init)
}

// complete delivers init to b, the response to a and the keepalive to b.
func complete(t testing.TB, now time.Time, a, b *Node, init []byte) {
	t.Helper()
	res, err := b.HandleHandshake(now, init)
	if err != nil || res.Reply == nil || res.Peer != a.Self() {
		t.Fatalf("responder: %v %+v", err, res)
	}
	res2, err := a.HandleHandshake(now, res.Reply)
	if err != nil || !res2.Established || res2.Peer != b.Self() {
		t.Fatalf("initiator: %v %+v", err, res2)
	}
	from, inner, err := b.OpenControl(res2.Reply)
	if err != nil || from != a.Self() || len(inner) != 0 {
		t.Fatalf("keepalive: %v from %v, %d bytes", err, from, len(inner))
	}
}

// connectAll establishes a session between every pair of nodes.
func connectAll(t testing.TB, now time.Time, nodes []*Node) {
	t.Helper()
	for i := range nodes {
		for j := i + 1; j < len(nodes); j++ {
			handshake(t, now, nodes[i], nodes[j])
		}
	}
}

// dataPacket seals frame from src to the last site of path and returns the
// packet.
func dataPacket(t testing.TB, src *Node, path []wire.SiteID, frame []byte) []byte {
	t.Helper()
	b, n, err := trySeal(src, path, frame)
	if err != nil {
		t.Fatalf("SealData: %v", err)
	}
	return b[:n]
}

func trySeal(src *Node, path []wire.SiteID, frame []byte) ([]byte, int, error) {
	h := wire.DataHeader{Source: src.Self(), Network: 42, Seq: 7, PathLen: uint8(len(path))}
	copy(h.Path[:], path)
	b := make([]byte, wire.FrameOffset(len(path), true)+len(frame)+wire.TagLen)
	copy(b[wire.FrameOffset(len(path), true):], frame)
	n, err := src.SealData(b, &h, len(frame))
	return b, n, err
}

// receive handles a data packet at node nd as the data path would: relay
// it (returning the next site) or open it (returning the frame).
func receive(nd *Node, pkt []byte) (next wire.SiteID, frame []byte, err error) {
	var h wire.DataHeader
	off, err := wire.ParseData(pkt, &h)
	if err != nil {
		return 0, nil, err
	}
	if h.Receiver() != nd.Self() {
		return 0, nil, ErrMisdirected
	}
	if int(h.Hop) < int(h.PathLen)-1 {
		next, err = nd.Relay(pkt, &h, off)
		return next, nil, err
	}
	frame, err = nd.OpenData(pkt, &h, off)
	return 0, frame, err
}

func testFrame(n int) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = byte(i*7 + 3)
	}
	return f
}
