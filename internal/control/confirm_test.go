package control

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// addPeer makes the member name at addr known to n by its hello.
func addPeer(t *testing.T, n *Node, name string, addr netip.AddrPort) wire.Member {
	t.Helper()
	p := wire.Member{ID: wire.SiteIDFromName(name), Incarnation: 5, Addr: addr, Name: name}
	hello, _ := wire.AppendHello(nil, &p, wire.HelloFlagReply)
	if err := n.Receive(t0, p.Addr, hello); err != nil {
		t.Fatal(err)
	}
	n.Outbox()
	return p
}

// addPeers makes k members known to n, at 10.0.1.0 to 10.0.1.k-1.
func addPeers(t *testing.T, n *Node, k int) []wire.Member {
	var peers []wire.Member
	for i := range k {
		peers = append(peers, addPeer(t, n, fmt.Sprintf("site-%d", i), netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}), 4789)))
	}
	return peers
}

// probesTo parses the probes to addr in outs.
func probesTo(outs []Outgoing, addr netip.AddrPort) []wire.Probe {
	var ps []wire.Probe
	for _, o := range outs {
		var p wire.Probe
		if o.To == addr && wire.ParseProbe(o.Payload, &p) == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// answer replies to the probes as the member would, delay after each was
// sent (its clock 2 s ahead), and returns the probes this sends at once.
func answer(t *testing.T, n *Node, peer wire.Member, ps []wire.Probe, now time.Time, delay time.Duration) []wire.Probe {
	t.Helper()
	const offset = 2 * time.Second
	var sent []wire.Probe
	for _, p := range ps {
		recv := time.Unix(0, p.SendTime).Add(delay + offset).UnixNano()
		r := wire.AppendProbeReply(nil, &wire.ProbeReply{Sender: peer.ID, Receiver: n.ID(), Seq: p.Seq,
			ProbeSendTime: p.SendTime, ProbeRecvTime: recv, ReplySendTime: recv})
		if err := n.Receive(now, peer.Addr, r); err != nil {
			t.Fatalf("reply %d: %v", p.Seq, err)
		}
		sent = append(sent, probesTo(n.Outbox(), peer.Addr)...)
	}
	return sent
}

// TestConfirmationProbes: a reply that reads the link 30 ms slower than
// its estimate makes the node send the two probes that decide the rise
// at once; when they read the same, the estimate has followed, one round
// trip after the first slow reply instead of two probe intervals. A
// reply within the link's jitter, or faster, sends none.
func TestConfirmationProbes(t *testing.T) {
	n := newNode(t)
	peer := addPeer(t, n, "seoul", netip.MustParseAddrPort("10.0.0.2:4789"))
	now := t0
	probe := func(delay time.Duration) []wire.Probe { return probeNext(t, n, peer, &now, delay) }
	for i := range 50 {
		if extra := probe(20*time.Millisecond + time.Duration(i%3)*100*time.Microsecond); len(extra) > 0 {
			t.Fatalf("probe %d on a steady link sent %d confirmation probes", i, len(extra))
		}
	}
	if extra := probe(15 * time.Millisecond); len(extra) > 0 {
		t.Fatalf("a faster reply sent %d confirmation probes", len(extra))
	}
	probe(20 * time.Millisecond)
	probe(20 * time.Millisecond)
	probe(20 * time.Millisecond)
	extra := probe(50 * time.Millisecond)
	if len(extra) != 2 {
		t.Fatalf("a reply 30 ms slower sent %d confirmation probes, want 2", len(extra))
	}
	if more := answer(t, n, peer, extra, now.Add(100*time.Millisecond), 50*time.Millisecond); len(more) > 0 {
		t.Errorf("the confirmations' replies sent %d more", len(more))
	}
	m := n.members[peer.ID]
	if d := m.link.Stats(now.Add(100*time.Millisecond)).Delay - 2*time.Second; d != 50*time.Millisecond {
		t.Errorf("estimate %v after the confirmations; want the new 50 ms", d)
	}
	if c := n.Counters().ConfirmProbes; c != 2 {
		t.Errorf("ConfirmProbes %d, want 2", c)
	}
}

// probeNext ticks n every 5 ms from *now until it sends peer its next
// regular probe, answers it at the link's delay, and returns the probes
// the reply made n send at once.
func probeNext(t *testing.T, n *Node, peer wire.Member, now *time.Time, delay time.Duration) []wire.Probe {
	t.Helper()
	for range 1000 {
		*now = now.Add(5 * time.Millisecond)
		n.Tick(*now)
		if ps := probesTo(n.Outbox(), peer.Addr); len(ps) > 0 {
			return answer(t, n, peer, ps, now.Add(2*delay), delay)
		}
	}
	t.Fatal("no probe in 5 s")
	return nil
}

// TestNoConfirmationsRightAfterAStall: right after the node was not
// running for 1.5 s, the slow reply of a probe that crossed the stall
// sends no confirmation probes (they would sample the catch-up of all
// that stalled with it); the link's estimate still follows a lasting
// rise on the regular probes, and a second later a slow reply sends
// them again.
func TestNoConfirmationsRightAfterAStall(t *testing.T) {
	n := newNode(t)
	peer := addPeer(t, n, "seoul", netip.MustParseAddrPort("10.0.0.2:4789"))
	now := t0
	for range 50 {
		probeNext(t, n, peer, &now, 20*time.Millisecond)
	}
	now = n.NextDeadline().Add(1500 * time.Millisecond)
	n.Tick(now)
	if w := n.Counters().LateWakes; w != 1 {
		t.Fatalf("LateWakes %d after a tick 1.5 s late, want 1", w)
	}
	ps := probesTo(n.Outbox(), peer.Addr)
	if len(ps) == 0 {
		t.Fatal("no probe at the late tick")
	}
	if extra := answer(t, n, peer, ps, now.Add(60*time.Millisecond), 50*time.Millisecond); len(extra) > 0 {
		t.Fatalf("a slow reply right after the stall sent %d confirmation probes, want none", len(extra))
	}
	for range 12 {
		if extra := probeNext(t, n, peer, &now, 50*time.Millisecond); len(extra) > 0 {
			t.Fatalf("%d confirmation probes at the new level", len(extra))
		}
	}
	m := n.members[peer.ID]
	if d := m.link.Stats(now).Delay - 2*time.Second; d != 50*time.Millisecond {
		t.Errorf("estimate %v after a second of regular probes at 50 ms", d)
	}
	if now.Sub(n.resumedAt) < confirmQuietAfterResume {
		t.Fatalf("only %v after the stall", now.Sub(n.resumedAt))
	}
	if extra := probeNext(t, n, peer, &now, 90*time.Millisecond); len(extra) != 2 {
		t.Errorf("a slow reply %v after the stall sent %d confirmation probes, want 2", now.Sub(n.resumedAt), len(extra))
	}
}

// TestConfirmationProbesAreBounded: when every link of a site reads 30 ms
// slower at once (its own access link filling), the confirmation probes
// it sends at once are bounded by the bucket, not by its member count.
func TestConfirmationProbesAreBounded(t *testing.T) {
	n := newNode(t)
	peers := addPeers(t, n, 30)
	now := t0
	// round ticks for 100 ms, answers every probe at delay and returns
	// the confirmation probes sent.
	round := func(delay time.Duration) int {
		sent := 0
		for range 20 {
			now = now.Add(5 * time.Millisecond)
			n.Tick(now)
			outs := n.Outbox()
			for _, p := range peers {
				sent += len(answer(t, n, p, probesTo(outs, p.Addr), now, delay))
			}
		}
		return sent
	}
	for range 20 {
		if c := round(20 * time.Millisecond); c > 0 {
			t.Fatalf("%d confirmation probes on steady links", c)
		}
	}
	first := round(50 * time.Millisecond)
	if first != confirmBurst {
		t.Errorf("%d confirmation probes when 30 links slowed at once; want the bucket's %d", first, confirmBurst)
	}
	if c := int(n.Counters().ConfirmProbes); c != first {
		t.Errorf("ConfirmProbes %d, want %d", c, first)
	}
}

// TestRiseOnARouteRefreshesAtOnce: among 30 members the batch interval
// between route computations is 30 ms; a link that a route's traffic
// crosses reading 30 ms slower is routed on at the reply that shows it,
// not at the end of the batch.
func TestRiseOnARouteRefreshesAtOnce(t *testing.T) {
	n := newNode(t)
	peers := addPeers(t, n, 30)
	now := t0
	for range 400 {
		now = now.Add(5 * time.Millisecond)
		n.Tick(now)
		outs := n.Outbox()
		for _, p := range peers {
			answer(t, n, p, probesTo(outs, p.Addr), now, 20*time.Millisecond)
		}
	}
	if b := n.batch(); b != 30*time.Millisecond {
		t.Fatalf("batch %v, want 30 ms", b)
	}
	if r, ok := n.Table().Lookup(peers[0].ID); !ok || len(r.Path) != 1 {
		t.Fatalf("no direct route to %s", peers[0].Name)
	}
	// The node's next regular probe to peers[0], answered 30 ms late; its
	// confirmations are answered 6 ms after a route computation.
	var first []wire.Probe
	for first == nil {
		now = now.Add(5 * time.Millisecond)
		n.Tick(now)
		first = probesTo(n.Outbox(), peers[0].Addr)
	}
	extra := answer(t, n, peers[0], first, now, 50*time.Millisecond)
	if len(extra) != 2 {
		t.Fatalf("%d confirmation probes, want 2", len(extra))
	}
	n.refresh(now) // a route computation just ran, as one does every few ms in a large overlay
	now = now.Add(6 * time.Millisecond)
	before := n.Counters().Refreshes
	answer(t, n, peers[0], extra, now, 50*time.Millisecond)
	if got := n.Counters().Refreshes - before; got != 1 {
		t.Errorf("%d route computations at the reply that confirmed the rise, want 1", got)
	}
	if r, _ := n.Table().Lookup(peers[0].ID); r.Delay-2*time.Second < 45*time.Millisecond {
		t.Errorf("route to %s at %v after the rise; want the new 50 ms", peers[0].Name, r.Delay-2*time.Second)
	}
}
