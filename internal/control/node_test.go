package control

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/linkstate"
	"github.com/detour-overlay/detour/internal/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newNode(t testing.TB) *Node {
	t.Helper()
	n, err := New(DefaultConfig("fujisawa", netip.MustParseAddrPort("10.0.0.1:4789")), t0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig("a", netip.MustParseAddrPort("10.0.0.1:4789"))
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"empty name":    func(c *Config) { c.Name = "" },
		"bad address":   func(c *Config) { c.Advertise = netip.AddrPort{} },
		"port 0":        func(c *Config) { c.Advertise = netip.MustParseAddrPort("10.0.0.1:0") },
		"bad boot":      func(c *Config) { c.Bootstrap = []netip.AddrPort{{}} },
		"fast down":     func(c *Config) { c.DownAfter = c.ProbeInterval },
		"zero hops":     func(c *Config) { c.Routing.MaxHops = 0 },
		"short expiry":  func(c *Config) { c.ExpireAfter = c.LinkState.Refresh },
		"probe rate":    func(c *Config) { c.MaxProbeRate = 5 },
		"negative rate": func(c *Config) { c.MaxProbeRate = -1 },
	} {
		c := good
		mod(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := New(Config{}, t0); !errors.Is(err, ErrConfig) {
		t.Errorf("New with an empty config: %v", err)
	}
}

func TestIDCollisionAndMismatch(t *testing.T) {
	n := newNode(t)
	from := netip.MustParseAddrPort("10.0.0.9:4789")
	// A hello claiming our ID with another name.
	rec := wire.Member{ID: n.ID(), Incarnation: 1, Addr: from, Name: "impostor"}
	b, _ := wire.AppendHello(nil, &rec, 0)
	if err := n.Receive(t0, from, b); !errors.Is(err, ErrIDMismatch) {
		t.Fatalf("mismatched ID: %v", err)
	}
	if n.Counters().Dropped[DropIDMismatch] != 1 {
		t.Fatal("mismatch not counted")
	}
}

func TestGarbageIsCountedNeverPanics(t *testing.T) {
	n := newNode(t)
	rng := rand.New(rand.NewPCG(1, 2))
	from := netip.MustParseAddrPort("192.0.2.1:9")
	now := t0
	for i := 0; i < 20000; i++ {
		b := make([]byte, rng.IntN(80))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		if len(b) >= 3 && i%2 == 0 { // make half of them look like detour
			b[0], b[1], b[2] = wire.Magic, wire.Version, byte(2+rng.IntN(6))
		}
		now = now.Add(time.Millisecond)
		if err := n.Receive(now, from, b); err == nil {
			t.Fatalf("garbage %x accepted", b)
		}
		n.Tick(now)
		n.Outbox()
	}
	var dropped uint64
	for _, v := range n.Counters().Dropped {
		dropped += v
	}
	if dropped != 20000 {
		t.Fatalf("dropped %d of 20000", dropped)
	}
	t.Logf("drops by kind: %v", n.Counters().DroppedByKind())
}

// FuzzReceive feeds arbitrary datagrams to a node that has one member, so
// that valid-looking messages reach deep into the state machine.
func FuzzReceive(f *testing.F) {
	peer := wire.Member{ID: wire.SiteIDFromName("seoul"), Incarnation: 5, Addr: netip.MustParseAddrPort("10.0.0.2:4789"), Name: "seoul"}
	hello, _ := wire.AppendHello(nil, &peer, wire.HelloFlagReply)
	f.Add(hello)
	f.Add(wire.AppendProbe(nil, &wire.Probe{Sender: peer.ID, Receiver: wire.SiteIDFromName("fujisawa"), Seq: 1, SendTime: 5}))
	ls, _ := wire.AppendLinkState(nil, &wire.LinkState{Origin: peer.ID, Incarnation: 5, Seq: 1,
		Entries: []wire.LinkEntry{{Peer: wire.SiteIDFromName("fujisawa"), Flags: 1, Delay: -5}}})
	f.Add(ls)
	f.Add(wire.AppendLeave(nil, &wire.Leave{Sender: peer.ID, Incarnation: 5}))
	ib, _ := wire.AppendInband(nil, &wire.Inband{Sender: peer.ID, Receiver: wire.SiteIDFromName("fujisawa"), Count: 2,
		Samples: [wire.MaxInbandSamples]int64{-5e9, -5e9 + 3e6}})
	f.Add(ib)
	f.Add([]byte{0xD7, 1, 3, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := newNode(t)
		n.Receive(t0, peer.Addr, hello)
		n.Receive(t0.Add(time.Millisecond), peer.Addr, b)
		n.Tick(t0.Add(time.Second))
		n.Table().Sites()
		n.Members()
		n.Links(t0.Add(time.Second))
		n.TIVs()
		n.Why(t0.Add(time.Second), "seoul")
		for _, o := range n.Outbox() {
			if _, _, err := wire.ParseCommon(o.Payload); err != nil {
				t.Fatalf("node sent an invalid datagram: %v", err)
			}
		}
	})
}

// TestZeroLossIsComputeLoss: the remembered loss of links that lost
// nothing is the one computeLoss gives, for every sample count and as the
// charge quantile changes.
func TestZeroLossIsComputeLoss(t *testing.T) {
	n := newNode(t)
	for _, z := range []float64{2.4, 3.1, 2.4} {
		for _, k := range []int{0, 1, 2, 50, 299, 300, 6000, 6001, 100000, 3, 1, 0} {
			l := &linkstate.Link{LossSamples: k}
			if got, want := n.zeroLoss(l, z), n.computeLoss(l, z); got != want {
				t.Fatalf("z %.1f, %d samples: %+v, want %+v", z, k, got, want)
			}
		}
	}
}
