package session

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

var (
	addrA = netip.MustParseAddrPort("198.18.0.1:4789")
	addrB = netip.MustParseAddrPort("198.18.0.2:4789")
	addrF = netip.MustParseAddrPort("198.18.9.9:4789")
)

// forgedInit is what the flood of issue 25 sends: a valid header naming
// site, random Noise bytes and random MACs.
func forgedInit(rng *rand.Rand, site wire.SiteID) []byte {
	b := make([]byte, wire.HandshakeInitLen)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	wire.PutHandshakeHeader(b, wire.TypeHandshakeInit, site, rng.Uint32())
	return b
}

// keyedFlooder returns a node that claims to be site 1 with a key of its
// own but knows b's public key, so its initiations carry a valid mac1.
func keyedFlooder(t testing.TB, b *Node) *Node {
	t.Helper()
	k, _ := keys.Generate(seeded(4242))
	n, err := NewNode(Config{Self: 1, Private: k, Peers: map[wire.SiteID]keys.PublicKey{b.Self(): b.PublicKey()}, Rand: seeded(77)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// keyedInit returns a fresh initiation from the flooder.
func keyedInit(t testing.TB, f *Node, now time.Time, to wire.SiteID) []byte {
	t.Helper()
	f.peer(to).clearPending()
	init, err := f.Connect(now, to)
	if err != nil || init == nil {
		t.Fatalf("flooder Connect: %v", err)
	}
	return init
}

// A message whose mac1 is not keyed by this site's public key is dropped
// before any Diffie-Hellman, and a genuine one is admitted.
func TestGuardDropsWithoutMAC1(t *testing.T) {
	n := mesh(t, 2)
	g := NewGuard(n[1], GuardConfig{})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		if v, reply := g.Screen(t0, addrF, forgedInit(rng, 1), 0); v != DropMAC1 || reply != nil {
			t.Fatalf("forged initiation: %v", v)
		}
	}
	init, _ := n[0].Connect(t0, 2)
	if v, _ := g.Screen(t0, addrA, init, 0); v != Admit {
		t.Fatalf("genuine initiation: %v", v)
	}
	if _, err := n[1].HandleHandshake(t0, forgedInit(rng, 1)); !errors.Is(err, ErrBadMAC1) {
		t.Fatalf("node on a forged initiation: %v", err)
	}
	if g.UnderLoad(t0) {
		t.Fatal("messages without mac1 put the site under load")
	}
	counts, _ := g.Counts()
	if counts["mac1"] != 1000 || counts["admit"] != 1 {
		t.Fatalf("counts %v", counts)
	}
}

// Under load (a rate of valid-mac1 work above LoadRate), an initiation
// without mac2 gets a cookie reply instead of work; the initiator's retry
// carries mac2 made with the cookie and is admitted, from its own address
// only; when the load is gone, no cookie is needed.
func TestGuardCookieUnderLoad(t *testing.T) {
	n := mesh(t, 2)
	a, b := n[0], n[1]
	g := NewGuard(b, GuardConfig{LoadRate: 50})
	f := keyedFlooder(t, b)
	now := t0
	for i := range 200 {
		now = t0.Add(time.Duration(i) * time.Millisecond)
		g.Screen(now, addrF, keyedInit(t, f, now, 2), 0)
	}
	if !g.UnderLoad(now) {
		t.Fatal("200 valid-mac1 initiations in 200 ms: not under load")
	}
	// The flooder's own address has spent its budget: it gets neither
	// work nor cookies.
	if v, _ := g.Screen(now, addrF, keyedInit(t, f, now, 2), 0); v != DropRateLimited {
		t.Fatalf("flooder: %v", v)
	}
	init, _ := a.Connect(now, 2)
	v, reply := g.Screen(now, addrA, init, 0)
	if v != DropMAC2 || len(reply) != wire.CookieReplyLen {
		t.Fatalf("initiation without a cookie under load: %v, %d-byte reply", v, len(reply))
	}
	if err := a.HandleCookieReply(now, reply); err != nil {
		t.Fatalf("cookie reply: %v", err)
	}
	now = now.Add(RetryInitial)
	out := a.Tick(now)
	if len(out) != 1 {
		t.Fatalf("no retry: %v", out)
	}
	if v, _ := g.Screen(now, addrB, out[0].Packet, 0); v != DropMAC2 {
		t.Fatalf("retry with a cookie for another address: %v", v)
	}
	if v, _ := g.Screen(now, addrA, out[0].Packet, 0); v != Admit {
		t.Fatalf("retry with the cookie: %v", v)
	}
	complete(t, now, a, b, out[0].Packet)
	later := now.Add(DefaultUnderLoadFor + time.Second)
	if g.UnderLoad(later) {
		t.Fatal("still under load a second after the flood")
	}
	c := mesh(t, 2)[0] // an initiator with no cookie, same key as a
	init2, _ := c.Connect(later, 2)
	if v, _ := g.Screen(later, addrB, init2, 0); v != Admit {
		t.Fatalf("initiation after the load: %v", v)
	}
}

// A long handshake queue is load too, whatever the rate.
func TestGuardBacklogIsLoad(t *testing.T) {
	n := mesh(t, 2)
	g := NewGuard(n[1], GuardConfig{LoadBacklog: 8})
	init, _ := n[0].Connect(t0, 2)
	if v, _ := g.Screen(t0, addrA, init, 7); v != Admit {
		t.Fatalf("backlog 7: %v", v)
	}
	if v, _ := g.Screen(t0, addrA, init, 8); v != DropMAC2 {
		t.Fatalf("backlog 8: %v", v)
	}
}

// A cookie is bound to the responder's secret, which is renewed every
// CookieRefreshTime: a mac2 made with an old cookie is refused.
func TestCookieSecretRotates(t *testing.T) {
	n := mesh(t, 2)
	a, b := n[0], n[1]
	g := NewGuard(b, GuardConfig{LoadBacklog: 1}) // always under load
	init, _ := a.Connect(t0, 2)
	v, reply := g.Screen(t0, addrA, init, 1)
	if v != DropMAC2 || reply == nil {
		t.Fatalf("initiation without mac2 under load: %v", v)
	}
	if err := a.HandleCookieReply(t0, reply); err != nil {
		t.Fatal(err)
	}
	retry := t0.Add(RetryInitial)
	pkt := a.Tick(retry)[0].Packet
	if v, _ := g.Screen(retry, addrA, pkt, 1); v != Admit {
		t.Fatalf("fresh cookie: %v", v)
	}
	// The secret made at t0 is renewed by the first reply after 120 s.
	late := t0.Add(CookieRefreshTime + time.Second)
	if v, _ := g.Screen(late, addrA, pkt, 1); v != DropMAC2 {
		t.Fatalf("mac2 from a cookie of the last secret: %v", v)
	}
}

// A cookie reply opens only for the initiation it answers: not one for
// another initiation, nor a tampered one, nor one naming another index.
func TestCookieReplyBoundToInitiation(t *testing.T) {
	n := mesh(t, 3)
	a, b := n[0], n[1]
	g := NewGuard(b, GuardConfig{LoadBacklog: 1})
	init, _ := a.Connect(t0, 2)
	_, reply := g.Screen(t0, addrA, init, 1)
	if reply == nil {
		t.Fatal("no cookie reply under load")
	}
	for i, off := range []int{9, wire.HandshakeHeaderLen + 3, wire.CookieReplyLen - 1} {
		bad := bytes.Clone(reply)
		bad[off] ^= 1
		if err := a.HandleCookieReply(t0, bad); !errors.Is(err, ErrBadCookieReply) {
			t.Fatalf("tampered reply %d: %v", i, err)
		}
	}
	// A reply to the first initiation does not open once the initiation
	// of a new attempt (with another mac1 and index) replaced it.
	later := t0.Add(RekeyAttemptTime)
	if out := a.Tick(later); len(out) != 0 || a.Stats().GaveUp != 1 {
		t.Fatalf("the attempt was not abandoned: %d initiations, %+v", len(out), a.Stats())
	}
	next, err := a.Connect(later, 2)
	if err != nil || next == nil {
		t.Fatalf("no new attempt: %v", err)
	}
	if err := a.HandleCookieReply(later, reply); !errors.Is(err, ErrBadCookieReply) {
		t.Fatalf("reply to a replaced initiation: %v", err)
	}
	_, reply2 := g.Screen(later, addrA, next, 1)
	if err := a.HandleCookieReply(later, reply2); err != nil {
		t.Fatalf("reply to the new initiation: %v", err)
	}
	if s := a.Stats(); s.BadCookieReplies != 4 || s.CookiesReceived != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Each source address has its own token bucket; the table is bounded and
// the sources that find it full share one bucket; trusted sources keep
// theirs.
func TestGuardRateLimitsPerSource(t *testing.T) {
	n := mesh(t, 2)
	g := NewGuard(n[1], GuardConfig{LoadRate: 1e9, MaxSources: 2, Overflow: 3})
	init, _ := n[0].Connect(t0, 2)
	admitted := func(src netip.AddrPort, k int) int {
		ok := 0
		for range k {
			if v, _ := g.Screen(t0, src, init, 0); v == Admit {
				ok++
			}
		}
		return ok
	}
	if got := admitted(addrA, 10); got != DefaultBurst {
		t.Fatalf("source A: %d of 10 admitted, want the burst %d", got, DefaultBurst)
	}
	if got := admitted(addrB, 1); got != 1 {
		t.Fatal("source B starved by A")
	}
	// The table (2 sources) is full: 100 new sources share 3 tokens.
	trusted := netip.MustParseAddrPort("198.18.7.7:4789")
	g.Trust(trusted.Addr())
	shared := 0
	for i := range 100 {
		shared += admitted(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i), 1}), 4789), 1)
	}
	if shared != 3 {
		t.Fatalf("%d admitted from sources outside a full table, want 3", shared)
	}
	if got := admitted(trusted, 10); got != DefaultBurst {
		t.Fatalf("trusted source: %d admitted", got)
	}
	// Refilled at PerSource per second.
	later := t0.Add(time.Second)
	ok := 0
	for range 100 {
		if v, _ := g.Screen(later, addrA, init, 0); v == Admit {
			ok++
		}
	}
	if ok != DefaultBurst {
		t.Fatalf("a second later: %d admitted", ok)
	}
}

// Cookie replies to untrusted sources are capped whatever the number of
// sources, so a spoofed flood that knows the key cannot make this site
// send at its rate.
func TestGuardCapsCookieReplies(t *testing.T) {
	n := mesh(t, 2)
	g := NewGuard(n[1], GuardConfig{LoadBacklog: 1, Cookies: 10})
	f := keyedFlooder(t, n[1])
	init := keyedInit(t, f, t0, 2)
	replies := 0
	for i := range 1000 {
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 4789)
		if _, r := g.Screen(t0, src, init, 1); r != nil {
			replies++
		}
	}
	if replies != 10 {
		t.Fatalf("%d cookie replies to 1000 spoofed sources, want 10", replies)
	}
	a := mesh(t, 2)[0]
	g.Trust(addrA.Addr())
	ainit, _ := a.Connect(t0, 2)
	if _, r := g.Screen(t0, addrA, ainit, 1); r == nil {
		t.Fatal("a trusted source got no cookie")
	}
}

// BenchmarkGuardForged is the cost of dropping one initiation of the
// issue 25 flood (mac1 computed, no Diffie-Hellman).
func BenchmarkGuardForged(b *testing.B) {
	n := mesh(b, 2)
	g := NewGuard(n[1], GuardConfig{})
	pkt := forgedInit(rand.New(rand.NewPCG(1, 2)), 1)
	b.ReportAllocs()
	for b.Loop() {
		g.Screen(t0, addrF, pkt, 0)
	}
}

// BenchmarkHandleInitiation is the cost of the Diffie-Hellman work the
// guard saves: a forged initiation with a valid mac1 handled by the node.
func BenchmarkHandleInitiation(b *testing.B) {
	n := mesh(b, 2)
	f := keyedFlooder(b, n[1])
	pkt := keyedInit(b, f, t0, 2)
	for b.Loop() {
		n[1].HandleHandshake(t0, pkt)
	}
}

// A flood of messages the guard drops raises the shield for as long as it
// lasts and a second more; a sampled flood counts at its full weight.
func TestGuardShield(t *testing.T) {
	n := mesh(t, 2)
	g := NewGuard(n[1], GuardConfig{ShieldRate: 100})
	rng := rand.New(rand.NewPCG(1, 2))
	now := t0
	for i := range 50 { // 50 a second: below the rate
		now = t0.Add(time.Duration(i) * 20 * time.Millisecond)
		g.Screen(now, addrF, forgedInit(rng, 1), 0)
	}
	if g.Shielded(now) {
		t.Fatal("shielded at 50 drops a second")
	}
	for i := range 200 { // 1000 a second
		now = now.Add(time.Millisecond)
		g.Screen(now, addrF, forgedInit(rng, 1), 0)
		_ = i
	}
	if !g.Shielded(now) {
		t.Fatal("not shielded at 1000 drops a second")
	}
	// Shielded, the guard sees one in 64 of the same flood.
	g.Sampled(64)
	for range 100 {
		now = now.Add(64 * time.Millisecond)
		g.Screen(now, addrF, forgedInit(rng, 1), 0)
	}
	if !g.Shielded(now) {
		t.Fatal("the sampled flood lowered the shield")
	}
	if g.Shielded(now.Add(DefaultUnderLoadFor)) {
		t.Fatal("still shielded a second after the flood")
	}
}
