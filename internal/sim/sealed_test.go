package sim

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/site"
	"github.com/detour-overlay/detour/internal/wire"
)

// The tests of this file run a sealed three-site overlay: every control
// datagram travels in a Noise session, as between agents. A is the
// bootstrap site; the direct link A–C (40 ms) is slower than the path
// through R (10 + 10 ms), a triangle-inequality violation that makes R
// the relay of A–C in both directions.

// sealedTriangle returns the sealed three-site network for seed, not
// started.
func sealedTriangle(seed uint64) *Net {
	n := Sealed(seed)
	for i, name := range []string{"A", "R", "C"} {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(name, time.Duration(i)*1300*ms-time.Second, boot, nil)
	}
	for _, k := range []string{"AR", "RA", "RC", "CR"} {
		n.SetLink(k[:1], k[1:], Link{Delay: 10 * ms, Jitter: ms})
	}
	n.SetLink("A", "C", Link{Delay: 40 * ms, Jitter: ms})
	n.SetLink("C", "A", Link{Delay: 40 * ms, Jitter: ms})
	return n
}

// startedTriangle starts the triangle and runs it until its routes have
// settled.
func startedTriangle(t *testing.T, seed uint64) *Net {
	t.Helper()
	n := sealedTriangle(seed)
	start(t, n)
	n.RunFor(5 * time.Second)
	return n
}

func TestSealedTriangleHandshakesAndSealsEverything(t *testing.T) {
	n := sealedTriangle(1)
	var clear []wire.Type
	n.Tap = func(_, _ netip.AddrPort, pkt []byte) {
		if typ := wire.Type(pkt[2]); typ != wire.TypeSealed && !site.IsHandshake(pkt) {
			clear = append(clear, typ)
		}
	}
	start(t, n)
	n.RunFor(3 * time.Second)
	if len(clear) > 0 {
		t.Fatalf("%d control datagrams left in the clear: %v", len(clear), clear[:min(len(clear), 5)])
	}
	for _, s := range n.Sites() {
		for _, o := range n.Sites() {
			if o != s && !s.Core.Sessions().Ready(o.ID) {
				t.Errorf("%s has no session with %s", s.Name, o.Name)
			}
		}
		alive := 0
		for _, m := range s.Node.Members() {
			if !m.Self && m.State == "alive" {
				alive++
			}
		}
		if alive != 2 {
			t.Errorf("%s sees %d live members, want 2", s.Name, alive)
		}
		c := s.Core.Counters()
		if c["session_auth_failures"]+c["session_replays"]+c["control_unsealed_dropped"]+c["control_spoofed_sender"] > 0 {
			t.Errorf("%s dropped datagrams of an honest overlay: %v", s.Name, c)
		}
	}
}

func TestSealedTriangleRelaysOverTheSlowDirectLink(t *testing.T) {
	n := startedTriangle(t, 2)
	for _, p := range [][2]string{{"A", "C"}, {"C", "A"}} {
		if got := n.PathNames(p[0], p[1]); !slices.Equal(got, []string{"R", p[1]}) {
			t.Errorf("%s→%s path %v, want via R", p[0], p[1], got)
		}
	}
	if got := n.PathNames("A", "R"); !slices.Equal(got, []string{"R"}) {
		t.Errorf("A→R path %v, want direct", got)
	}
}

// TestSealedRelayKilled: R dies; within the suspicion time (250 ms after
// the last reply, so at most 350 ms after the kill, as in
// TestRelayDiesBackupBeforeDown) A–C traffic is carried on the direct
// link, and the route settles on it once R is down (500 ms after the last
// reply).
func TestSealedRelayKilled(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		n := startedTriangle(t, seed)
		r := n.Site("R").ID
		n.Kill("R")
		at := n.Now()
		both := func() bool { return carried(n, "A", "C", r) && carried(n, "C", "A", r) }
		if !n.RunUntil(at.Add(2*time.Second), both) {
			t.Fatalf("seed %d: no path avoiding R within 2 s", seed)
		}
		if d := n.Now().Sub(at); d > 350*ms {
			t.Errorf("seed %d: traffic on a path avoiding R after %v, want ≤ 350 ms", seed, d)
		}
		n.RunFor(time.Second)
		for _, p := range [][2]string{{"A", "C"}, {"C", "A"}} {
			rt, ok := route(n, p[0], p[1])
			if !ok || !slices.Equal(rt.Path, []wire.SiteID{n.Site(p[1]).ID}) || len(rt.Backup) > 0 {
				t.Errorf("seed %d: %s→%s is %v (backup %v), want direct", seed, p[0], p[1], n.PathNames(p[0], p[1]), rt.Backup)
			}
		}
	}
}

// snapshot is what a forged datagram must not change at a site.
type snapshot struct {
	members []string
	path    []string
	ready   bool
}

func snap(n *Net) snapshot {
	var s snapshot
	for _, m := range n.Site("A").Node.Members() {
		s.members = append(s.members, m.Name+"="+m.State)
	}
	s.path = n.PathNames("A", "C")
	s.ready = n.Site("A").Core.Sessions().Ready(n.Site("R").ID)
	return s
}

// TestSealedForgeriesRejected: a sealed datagram with a flipped bit (bad
// MAC), a replayed one, and a handshake initiation from a host that
// claims to be R with another key are each dropped and counted by A, send
// nothing, and change neither its members, its routes nor its session
// with R.
func TestSealedForgeriesRejected(t *testing.T) {
	n := startedTriangle(t, 3)
	a, rAddr := n.Site("A"), n.Site("R").Addr
	var captured []byte
	n.Tap = func(from, to netip.AddrPort, pkt []byte) {
		if from == rAddr && to == a.Addr && wire.Type(pkt[2]) == wire.TypeSealed && captured == nil {
			captured = slices.Clone(pkt)
		}
	}
	n.RunFor(200 * ms)
	n.Tap = nil
	if captured == nil {
		t.Fatal("no sealed datagram from R to A")
	}
	rogueKey, err := keys.Generate(n.seeded(99))
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := session.NewNode(session.Config{Self: n.Site("R").ID, Private: rogueKey,
		Peers: map[wire.SiteID]keys.PublicKey{a.ID: a.Key.Public()}, Rand: n.seeded(98)})
	if err != nil {
		t.Fatal(err)
	}
	init, err := rogue.Connect(a.Local(n.Now()), a.ID)
	if err != nil {
		t.Fatal(err)
	}
	// A bad MAC: the captured datagram with a counter A has not seen (the
	// clear header is authenticated too) and a flipped bit in its tag.
	var m wire.Sealed
	if err := wire.ParseSealed(captured, &m); err != nil {
		t.Fatal(err)
	}
	badMAC := slices.Clone(captured)
	wire.PutSealedHeader(badMAC, m.Sender, m.Index, m.Counter+1000)
	badMAC[len(badMAC)-1] ^= 1
	for _, tc := range []struct {
		name, counter string
		pkt           []byte
	}{
		{"bad MAC", "session_auth_failures", badMAC},
		{"replayed", "session_replays", captured},
		{"wrong key", "session_handshake_rejected", init},
	} {
		before, counted := snap(n), a.Core.Counters()[tc.counter]
		sent := n.Sent
		a.Core.Receive(a.Local(n.Now()), rAddr, slices.Clone(tc.pkt))
		rd := a.Core.Ready(a.Local(n.Now()))
		if got := a.Core.Counters()[tc.counter]; got != counted+1 {
			t.Errorf("%s: %s went from %d to %d, want one more", tc.name, tc.counter, counted, got)
		}
		if len(rd.Send) > 0 || rd.Table != nil || n.Sent != sent {
			t.Errorf("%s: A sent %d datagrams or a new table in answer", tc.name, len(rd.Send))
		}
		if after := snap(n); !reflect.DeepEqual(after, before) {
			t.Errorf("%s changed A: %+v, was %+v", tc.name, after, before)
		}
	}
	// The overlay carries on: R is still A's relay to C.
	n.RunFor(time.Second)
	if got := n.PathNames("A", "C"); !slices.Equal(got, []string{"R", "C"}) {
		t.Errorf("after the forgeries A→C is %v", got)
	}
}

// trace is what a run must repeat exactly with the same seed.
type trace struct {
	changes                         []RouteChange
	sent, lost, events, undelivered int
	counters                        []map[string]uint64
}

func runTrace(t *testing.T, seed uint64) trace {
	n := startedTriangle(t, seed)
	n.Kill("R")
	n.RunFor(2 * time.Second)
	if err := n.Start("R"); err != nil {
		t.Fatal(err)
	}
	n.RunFor(3 * time.Second)
	tr := trace{changes: n.Changes, sent: n.Sent, lost: n.Lost, events: n.Events, undelivered: n.Undeliverable}
	for _, s := range n.Sites() {
		tr.counters = append(tr.counters, s.Core.Counters())
	}
	return tr
}

// TestSealedRunRepeats: the same seed gives the same route changes,
// datagram counts and counters, handshakes, a killed relay and its
// restart included.
func TestSealedRunRepeats(t *testing.T) {
	first, second := runTrace(t, 4), runTrace(t, 4)
	if len(first.changes) == 0 {
		t.Fatal("no route changes recorded")
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("two runs with seed 4 differ:\n%d changes, sent %d, lost %d, events %d\n%d changes, sent %d, lost %d, events %d",
			len(first.changes), first.sent, first.lost, first.events, len(second.changes), second.sent, second.lost, second.events)
	}
	if first.counters[0]["session_established"]+first.counters[0]["session_responses"] < 3 {
		t.Errorf("A made %v sessions; the restarted R should have needed a new one", first.counters[0])
	}
	t.Logf("seed 4: %d route changes, %d datagrams sent, %d events", len(first.changes), first.sent, first.events)
}

// TestSealedRestartedBootstrapSiteRejoins: A, the site the others
// bootstrap through, has no bootstrap address itself. It crashes and
// restarts with new sessions to make; the others must not keep sealing to
// it with the sessions of its previous run, which it cannot open.
func TestSealedRestartedBootstrapSiteRejoins(t *testing.T) {
	n := startedTriangle(t, 6)
	n.Kill("A")
	n.RunFor(2 * time.Second)
	if err := n.Start("A"); err != nil {
		t.Fatal(err)
	}
	at := n.Now()
	if !n.RunUntil(at.Add(10*time.Second), func() bool { return allSee(n) }) {
		t.Fatalf("restarted A not accepted again within 10 s: A sees %v", n.Site("A").Node.Members())
	}
	t.Logf("A back after %v", n.Now().Sub(at))
}
