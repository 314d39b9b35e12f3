package session

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

func TestHandshakeRoundTrip(t *testing.T) {
	n := mesh(t, 2)
	a, b := n[0], n[1]
	if a.Ready(2) || b.Ready(1) {
		t.Fatal("ready before any handshake")
	}
	init, err := a.Connect(t0, 2)
	if err != nil || len(init) != wire.HandshakeInitLen {
		t.Fatalf("Connect: %v, %d bytes", err, len(init))
	}
	res, err := b.HandleHandshake(t0, init)
	if err != nil || len(res.Reply) != wire.HandshakeResponseLen || res.Established {
		t.Fatalf("responder: %v %+v", err, res)
	}
	if b.Ready(1) {
		t.Fatal("responder may not send before the initiator confirms")
	}
	res2, err := a.HandleHandshake(t0, res.Reply)
	if err != nil || !res2.Established || !a.Ready(2) {
		t.Fatalf("initiator: %v %+v", err, res2)
	}
	if _, _, err := b.OpenControl(res2.Reply); err != nil || !b.Ready(1) {
		t.Fatalf("keepalive: %v, ready %v", err, b.Ready(1))
	}
	// Both directions now carry control messages.
	for _, d := range [][2]*Node{{a, b}, {b, a}} {
		msg, err := d[0].SealControl(nil, d[1].Self(), []byte("probe"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(msg, []byte("probe")) {
			t.Fatal("sealed message contains the plaintext")
		}
		from, inner, err := d[1].OpenControl(msg)
		if err != nil || from != d[0].Self() || string(inner) != "probe" {
			t.Fatalf("OpenControl: %v %v %q", err, from, inner)
		}
	}
	if s := a.Stats(); s.Established != 1 || s.Initiations != 1 {
		t.Fatalf("initiator stats %+v", s)
	}
}

// A site that holds a key not listed for its site ID, or is not listed at
// all, cannot complete a handshake.
func TestHandshakeRejectsUnknownKeys(t *testing.T) {
	n := mesh(t, 2)
	b := n[1]
	rogueKey, _ := keys.Generate(seeded(999))
	// The rogue claims to be site 1 (listed, with another key).
	rogue, err := NewNode(Config{Self: 1, Private: rogueKey, Peers: map[wire.SiteID]keys.PublicKey{2: b.PublicKey()}, Rand: seeded(5)})
	if err != nil {
		t.Fatal(err)
	}
	init, _ := rogue.Connect(t0, 2)
	if _, err := b.HandleHandshake(t0, init); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("impostor of site 1: %v", err)
	}
	// The rogue as site 9, which b does not list.
	rogue9, _ := NewNode(Config{Self: 9, Private: rogueKey, Peers: map[wire.SiteID]keys.PublicKey{2: b.PublicKey()}, Rand: seeded(6)})
	init, _ = rogue9.Connect(t0, 2)
	if _, err := b.HandleHandshake(t0, init); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("unlisted site: %v", err)
	}
	// The initiator has the wrong key for b: its mac1 does not check, so
	// b drops it before any Diffie-Hellman.
	wrong, _ := NewNode(Config{Self: 1, Private: rogueKey, Peers: map[wire.SiteID]keys.PublicKey{2: rogueKey.Public()}, Rand: seeded(7)})
	init, _ = wrong.Connect(t0, 2)
	if _, err := b.HandleHandshake(t0, init); !errors.Is(err, ErrBadMAC1) {
		t.Fatalf("initiation for another key: %v", err)
	}
	if b.Ready(1) || b.peer(1).next.Load() != nil {
		t.Fatal("a rejected initiation created a session")
	}
	if s := b.Stats(); s.HandshakeRejected != 1 || s.UnknownPeer != 1 || s.BadMAC1 != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A tampered clear header (site ID, index) fails: it is the Noise prologue.
func TestHandshakeTamperedHeader(t *testing.T) {
	n := mesh(t, 2)
	init, _ := n[0].Connect(t0, 2)
	for _, i := range []int{8, 11, wire.HandshakeHeaderLen + 40} {
		bad := bytes.Clone(init)
		bad[i] ^= 1
		if _, err := n[1].HandleHandshake(t0, bad); err == nil {
			t.Fatalf("initiation with byte %d flipped accepted", i)
		}
	}
	res, err := n[1].HandleHandshake(t0, init)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(res.Reply)
	bad[len(bad)-wire.HandshakeMACsLen-1] ^= 1
	if _, err := n[0].HandleHandshake(t0, bad); !errors.Is(err, ErrBadMAC1) {
		t.Fatalf("tampered response: %v", err)
	}
	// The genuine response still completes after the forgery.
	if r, err := n[0].HandleHandshake(t0, res.Reply); err != nil || !r.Established {
		t.Fatalf("genuine response after a forgery: %v", err)
	}
}

func TestReplayedInitiationRejected(t *testing.T) {
	n := mesh(t, 2)
	a, b := n[0], n[1]
	init, _ := a.Connect(t0, 2)
	complete(t, t0, a, b, init)
	before := b.peer(1).current.Load()
	later := t0.Add(5 * time.Second)
	if _, err := b.HandleHandshake(later, init); !errors.Is(err, ErrReplayedInitiation) {
		t.Fatalf("replayed initiation: %v", err)
	}
	if b.peer(1).current.Load() != before || b.peer(1).next.Load() != nil {
		t.Fatal("replayed initiation changed the session")
	}
	if b.Stats().InitiationReplays != 1 {
		t.Fatalf("stats %+v", b.Stats())
	}
	// A fresh initiation (later timestamp) is accepted: a rekey.
	a.peer(2).mu.Lock()
	fresh, _ := a.initiate(later, a.peer(2), true)
	a.peer(2).mu.Unlock()
	if _, err := b.HandleHandshake(later, fresh); err != nil {
		t.Fatalf("fresh initiation: %v", err)
	}
}

func TestInitiationRateLimit(t *testing.T) {
	n := mesh(t, 2)
	a, b := n[0], n[1]
	first, _ := a.Connect(t0, 2)
	if _, err := b.HandleHandshake(t0, first); err != nil {
		t.Fatal(err)
	}
	a.peer(2).mu.Lock()
	second, _ := a.initiate(t0, a.peer(2), false)
	a.peer(2).mu.Unlock()
	if _, err := b.HandleHandshake(t0.Add(time.Millisecond), second); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("second initiation 1 ms later: %v", err)
	}
	if _, err := b.HandleHandshake(t0.Add(MinInitiationInterval), second); err != nil {
		t.Fatalf("second initiation after the interval: %v", err)
	}
}

// Both sites initiate at once: the higher site's initiation wins, the
// lower answers it, and both end with one shared session.
func TestSimultaneousInitiation(t *testing.T) {
	n := mesh(t, 2)
	lo, hi := n[0], n[1]
	initLo, _ := lo.Connect(t0, 2)
	initHi, _ := hi.Connect(t0, 1)
	if _, err := hi.HandleHandshake(t0, initLo); !errors.Is(err, ErrCollision) {
		t.Fatalf("higher site answered the lower's initiation: %v", err)
	}
	res, err := lo.HandleHandshake(t0, initHi)
	if err != nil || res.Reply == nil {
		t.Fatalf("lower site did not answer: %v", err)
	}
	if lo.peer(2).hs != nil {
		t.Fatal("lower site kept its own initiation")
	}
	res2, err := hi.HandleHandshake(t0, res.Reply)
	if err != nil || !res2.Established {
		t.Fatal(err)
	}
	if _, _, err := lo.OpenControl(res2.Reply); err != nil {
		t.Fatal(err)
	}
	if !lo.Ready(2) || !hi.Ready(1) {
		t.Fatal("not both ready")
	}
	// Tick sends no further initiation from either side.
	if out := append(lo.Tick(t0.Add(time.Second)), hi.Tick(t0.Add(time.Second))...); len(out) != 0 {
		t.Fatalf("initiations after the collision was resolved: %d", len(out))
	}
	msg, _ := lo.SealControl(nil, 2, []byte("x"))
	if _, _, err := hi.OpenControl(msg); err != nil {
		t.Fatal(err)
	}
}

// The higher site's initiation was lost: the lower site's, arriving a
// retry interval later, is answered rather than dropped as a collision,
// and the two have a session without waiting for the higher site's next
// retry.
func TestLostInitiationYieldsToThePeers(t *testing.T) {
	n := mesh(t, 2)
	lo, hi := n[0], n[1]
	if _, err := hi.Connect(t0, 1); err != nil { // lost on the way
		t.Fatal(err)
	}
	late := t0.Add(RetryInitial - time.Millisecond)
	initLo, _ := lo.Connect(late, 2)
	if _, err := hi.HandleHandshake(late, initLo); !errors.Is(err, ErrCollision) {
		t.Fatalf("initiation within the retry interval of the higher site's own: %v, want a collision", err)
	}
	later := t0.Add(RetryInitial)
	res, err := hi.HandleHandshake(later, initLo)
	if err != nil || res.Reply == nil {
		t.Fatalf("higher site did not answer the lower's initiation a retry interval after its own: %v", err)
	}
	if hi.peer(1).hs != nil {
		t.Fatal("higher site kept its unanswered initiation")
	}
	res2, err := lo.HandleHandshake(later, res.Reply)
	if err != nil || !res2.Established {
		t.Fatalf("lower site's handshake not completed: %v", err)
	}
	if _, _, err := hi.OpenControl(res2.Reply); err != nil {
		t.Fatal(err)
	}
	if !lo.Ready(2) || !hi.Ready(1) {
		t.Fatal("not both ready")
	}
}

// An answer that arrives after the initiator's retries still completes
// the handshake: a retry sends the same initiation, and the responder
// answers a copy of the initiation it answered with the same response,
// with no new keypair at either end (a loaded responder that works
// through its queue seconds late).
func TestLateAnswerCompletesAfterRetries(t *testing.T) {
	n := mesh(t, 2)
	a, b := n[0], n[1]
	first, _ := a.Connect(t0, 2)
	var copies [][]byte
	for d := 100 * time.Millisecond; d <= 2*time.Second; d += 100 * time.Millisecond {
		for _, o := range a.Tick(t0.Add(d)) {
			copies = append(copies, o.Packet)
		}
	}
	if len(copies) != 2 {
		t.Fatalf("%d retries in 2 s, want 2", len(copies))
	}
	// b works through its queue 2 s late: the first initiation, then the
	// two copies.
	late := t0.Add(2 * time.Second)
	res, err := b.HandleHandshake(late, first)
	if err != nil || res.Reply == nil {
		t.Fatalf("first initiation: %v", err)
	}
	for i, c := range copies {
		again, err := b.HandleHandshake(late.Add(time.Duration(i+1)*MinInitiationInterval), c)
		if err != nil || !bytes.Equal(again.Reply[:wire.HandshakeResponseLen-wire.HandshakeMACsLen], res.Reply[:wire.HandshakeResponseLen-wire.HandshakeMACsLen]) {
			t.Fatalf("copy %d of the initiation: %v, or another response", i+1, err)
		}
	}
	// The answer to the first initiation arrives after both retries.
	done, err := a.HandleHandshake(late.Add(100*time.Millisecond), res.Reply)
	if err != nil || !done.Established {
		t.Fatalf("the answer to the first initiation after two retries: %v", err)
	}
	if _, _, err := b.OpenControl(done.Reply); err != nil {
		t.Fatalf("keepalive: %v", err)
	}
	if !a.Ready(2) || !b.Ready(1) {
		t.Fatal("not both ready")
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.Initiations != 3 || sa.Resent != 2 || sb.Responses != 3 || sb.Resent != 2 || sa.Established != 1 {
		t.Fatalf("initiator %+v, responder %+v", sa, sb)
	}
}

func TestRetryBackoffAndGiveUp(t *testing.T) {
	n := mesh(t, 2)
	a := n[0]
	if init, _ := a.Connect(t0, 2); init == nil {
		t.Fatal("no initiation")
	}
	var sent []time.Duration
	for d := time.Duration(0); d <= 100*time.Second; d += 100 * time.Millisecond {
		if out := a.Tick(t0.Add(d)); len(out) > 0 {
			if len(out) != 1 || out[0].To != 2 || len(out[0].Packet) != wire.HandshakeInitLen {
				t.Fatalf("tick output %+v", out)
			}
			sent = append(sent, d)
		}
	}
	want := []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 3500 * time.Millisecond, 7500 * time.Millisecond, 15500 * time.Millisecond}
	for i, w := range want {
		if i >= len(sent) || sent[i] != w {
			t.Fatalf("retries at %v, want %v first", sent, want)
		}
	}
	for i := len(want); i < len(sent); i++ {
		if sent[i]-sent[i-1] != RetryMax {
			t.Fatalf("retry interval %v beyond the cap", sent[i]-sent[i-1])
		}
	}
	if last := sent[len(sent)-1]; last >= RekeyAttemptTime {
		t.Fatalf("retried at %v, after giving up", last)
	}
	if a.Stats().GaveUp != 1 {
		t.Fatalf("stats %+v", a.Stats())
	}
}

// A send without a session marks the site wanted: the next Tick initiates.
func TestSendWithoutSessionTriggersHandshake(t *testing.T) {
	n := mesh(t, 2)
	if _, err := n[0].SealControl(nil, 2, []byte("x")); !errors.Is(err, ErrNoSession) {
		t.Fatalf("seal without session: %v", err)
	}
	out := n[0].Tick(t0)
	if len(out) != 1 || out[0].To != 2 {
		t.Fatalf("tick after failed send: %+v", out)
	}
	complete(t, t0, n[0], n[1], out[0].Packet)
	if _, err := n[0].SealControl(nil, 2, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := n[0].SealControl(nil, 77, []byte("x")); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("seal to unknown site: %v", err)
	}
}

func TestIdleSessionExpires(t *testing.T) {
	n := mesh(t, 2)
	handshake(t, t0, n[0], n[1])
	n[0].Tick(t0) // the control plane ticks often; activity is seen here
	n[0].Tick(t0.Add(30 * time.Second))
	if !n[0].Ready(2) {
		t.Fatal("expired after 30 s")
	}
	n[0].Tick(t0.Add(IdleTimeout))
	if n[0].Ready(2) {
		t.Fatal("idle session not expired")
	}
}

// With traffic, a session is rekeyed by its initiator between
// RekeyAfterTime and RekeyAfterTime+RekeyJitter, and no packet sealed
// around the rekey is lost in either direction.
func TestRekeyWithoutLoss(t *testing.T) {
	n := mesh(t, 2)
	a, b := n[0], n[1]
	handshake(t, t0, a, b)
	var toB, toA [][]byte
	seal := func(from *Node, to wire.SiteID, q *[][]byte) {
		for i := 0; i < 5; i++ {
			m, err := from.SealControl(nil, to, []byte{byte(i)})
			if err != nil {
				t.Fatal(err)
			}
			*q = append(*q, m)
		}
	}
	now := t0
	for now.Before(t0.Add(RekeyAfterTime - time.Second)) {
		now = now.Add(time.Second)
		seal(a, 2, &toB)
		seal(b, 1, &toA)
		if out := append(a.Tick(now), b.Tick(now)...); len(out) != 0 {
			t.Fatalf("initiation at %v, before rekey time", now.Sub(t0))
		}
	}
	var out []Output
	for len(out) == 0 && now.Before(t0.Add(RekeyAfterTime+RekeyJitter)) {
		now = now.Add(100 * time.Millisecond)
		out = a.Tick(now)
		if len(b.Tick(now)) != 0 {
			t.Fatalf("responder rekeyed first, at %v", now.Sub(t0))
		}
	}
	if len(out) != 1 {
		t.Fatalf("no rekey by %v: %+v", RekeyAfterTime+RekeyJitter, out)
	}
	res, err := b.HandleHandshake(now, out[0].Packet)
	if err != nil {
		t.Fatal(err)
	}
	seal(b, 1, &toA) // b still sends with the old key
	res2, err := a.HandleHandshake(now, res.Reply)
	if err != nil {
		t.Fatal(err)
	}
	seal(a, 2, &toB) // a sends with the new key
	toB = append(toB, res2.Reply)
	seal(b, 1, &toA)
	for _, q := range []struct {
		to   *Node
		msgs [][]byte
	}{{b, toB}, {a, toA}} {
		for i, m := range q.msgs {
			if _, _, err := q.to.OpenControl(m); err != nil {
				t.Fatalf("site %v lost message %d of %d: %v", q.to.Self(), i, len(q.msgs), err)
			}
		}
	}
	if a.peer(2).current.Load().created != now || b.peer(1).current.Load().created != now {
		t.Fatal("new keypair not current on both sides")
	}
	// The old session expires at RejectAfterTime; the new one lives on.
	later := t0.Add(RejectAfterTime + RekeyJitter)
	seal(a, 2, &toB)
	a.Tick(later)
	if !a.Ready(2) || a.peer(2).previous.Load() != nil {
		t.Fatal("old keypair not expired or new one lost")
	}
}

func TestNewNodeRejectsBadConfig(t *testing.T) {
	k, _ := keys.Generate(seeded(1))
	k2, _ := keys.Generate(seeded(2))
	cases := []Config{
		{Self: 0, Private: k},
		{Self: 1, Private: k, Peers: map[wire.SiteID]keys.PublicKey{1: k2.Public()}},
		{Self: 1, Private: k, Peers: map[wire.SiteID]keys.PublicKey{2: {}}},
		{Self: 1, Private: k, Peers: map[wire.SiteID]keys.PublicKey{2: k2.Public(), 3: k2.Public()}},
	}
	for i, c := range cases {
		if _, err := NewNode(c); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
}

// The responder whose confirmation was lost initiates itself, if it wants
// the peer, after UnconfirmedTimeout.
func TestLostConfirmation(t *testing.T) {
	n := mesh(t, 2)
	a, b := n[0], n[1]
	init, _ := a.Connect(t0, 2)
	res, _ := b.HandleHandshake(t0, init)
	a.HandleHandshake(t0, res.Reply) // the keepalive is lost
	if _, err := b.SealControl(nil, 1, []byte("x")); !errors.Is(err, ErrNoSession) {
		t.Fatalf("responder sent before confirmation: %v", err)
	}
	if out := b.Tick(t0.Add(UnconfirmedTimeout - time.Millisecond)); len(out) != 0 {
		t.Fatal("responder initiated before the timeout")
	}
	out := b.Tick(t0.Add(UnconfirmedTimeout))
	if len(out) != 1 || out[0].To != 1 {
		t.Fatalf("no initiation after the timeout: %+v", out)
	}
	complete(t, t0.Add(UnconfirmedTimeout), b, a, out[0].Packet)
	if !a.Ready(2) || !b.Ready(1) {
		t.Fatal("not both ready")
	}
}

// Rekey ages are spread over RekeyJitter, and a responder's come after
// every initiator's, so a whole overlay started at once does not rekey at
// once and the initiator of a session normally renews it.
func TestRekeyAgesAreSpread(t *testing.T) {
	nd := mesh(t, 2)[0]
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range 200 {
		age, err := nd.rekeyAge(true)
		if err != nil {
			t.Fatal(err)
		}
		if age < RekeyAfterTime || age >= RekeyAfterTime+RekeyJitter {
			t.Fatalf("initiator's rekey age %v outside [%v, %v)", age, RekeyAfterTime, RekeyAfterTime+RekeyJitter)
		}
		lo, hi = min(lo, age), max(hi, age)
		r, err := nd.rekeyAge(false)
		if err != nil {
			t.Fatal(err)
		}
		if r < RekeyAfterTime+RekeyJitter || r > RejectAfterTime-30*time.Second {
			t.Fatalf("responder's rekey age %v: not after every initiator's, or less than 30 s before %v", r, RejectAfterTime)
		}
	}
	if hi-lo < RekeyJitter*8/10 {
		t.Fatalf("200 initiator rekey ages span only %v of %v", hi-lo, RekeyJitter)
	}
}
