package site

import (
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// FuzzCoreReceive feeds arbitrary datagrams to a sealed and a clear core
// that have joined an overlay: whatever the bytes, Receive must not panic,
// and a datagram from a stranger's address must not make a new member.
func FuzzCoreReceive(f *testing.F) {
	f.Add([]byte{0xD7, 1, byte(wire.TypeSealed), 0})
	f.Add([]byte{0xD7, 1})
	f.Add(wire.AppendProbe(nil, &wire.Probe{Sender: wire.SiteIDFromName("s1"), Receiver: wire.SiteIDFromName("s0"), Seq: 1, SendTime: 1}))
	f.Add(make([]byte, wire.HandshakeInitLen))
	f.Add(make([]byte, wire.SealedOverhead+8))
	kv := kvPool("cache", 2)
	kv.Origin, kv.Version = wire.SiteIDFromName("s1"), 1
	msg, _ := wire.AppendKVPool(nil, wire.SiteIDFromName("s1"), &kv)
	f.Add(msg)
	f.Add(wire.AppendKVDigest(nil, wire.SiteIDFromName("s1"), 1, 7))
	sealed := newNet(f, 2, true, 21)
	sealed.run(time.Second)
	clear := newNet(f, 2, false, 21)
	clear.run(time.Second)
	stranger := netip.MustParseAddrPort("198.18.0.99:4789")
	f.Fuzz(func(t *testing.T, pkt []byte) {
		for _, h := range []*net{sealed, clear} {
			c := h.cores[0]
			before := len(c.Control().Members())
			c.Receive(h.now, stranger, append([]byte(nil), pkt...))
			c.Ready(h.now)
			if h == sealed && len(c.Control().Members()) != before {
				t.Fatalf("a datagram from a stranger made a member of a sealed site")
			}
			if len(c.KVPools()) != 0 {
				t.Fatalf("a datagram from a stranger gave a site a kv pool")
			}
		}
	})
}
