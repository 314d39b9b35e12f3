package site

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func addr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}), 4789)
}

func seeded(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return rand.NewChaCha8(s)
}

// net is a minimal harness: cores at addr(i), every datagram delivered
// after a fixed delay, time advanced to the next delivery or deadline.
type net struct {
	t      testing.TB
	now    time.Time
	cores  []*Core
	flight []flying
	wire   []Datagram // every datagram sent, for inspection
	drop   func(from int, d Datagram) bool
}

type flying struct {
	at   time.Time
	from netip.AddrPort
	d    Datagram
}

const hop = time.Millisecond

// newNet builds n sites named s0, s1... that bootstrap through s0, sealed
// when sealed is set, with keys drawn from seed.
func newNet(t testing.TB, n int, sealed bool, seed uint64) *net {
	t.Helper()
	privs := make([]keys.PrivateKey, n)
	for i := range privs {
		var err error
		if privs[i], err = keys.Generate(seeded(seed + uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	h := &net{t: t, now: t0}
	for i := range n {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{addr(0)}
		}
		cfg := Config{Control: control.DefaultConfig(name(i), addr(i), boot...)}
		if sealed {
			sec := &Secure{Private: privs[i], Peers: map[wire.SiteID]keys.PublicKey{}, Addrs: map[wire.SiteID]netip.AddrPort{},
				Rand: seeded(seed*1000 + uint64(i))}
			for j := range n {
				if j != i {
					sec.Peers[wire.SiteIDFromName(name(j))] = privs[j].Public()
				}
			}
			sec.Addrs[wire.SiteIDFromName(name(0))] = addr(0)
			cfg.Secure = sec
		}
		h.add(cfg)
	}
	return h.start()
}

func name(i int) string { return "s" + string(rune('0'+i)) }

// add builds a core from cfg and puts it in the harness.
func (h *net) add(cfg Config) {
	h.t.Helper()
	c, err := New(cfg, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	h.cores = append(h.cores, c)
}

// start puts the cores' first datagrams in flight.
func (h *net) start() *net {
	for i := range h.cores {
		h.drain(i)
	}
	return h
}

// drain takes a core's Ready and puts its datagrams in flight.
func (h *net) drain(i int) Ready {
	rd := h.cores[i].Ready(h.now)
	for _, d := range rd.Send {
		h.wire = append(h.wire, d)
		if h.drop != nil && h.drop(i, d) {
			continue
		}
		h.flight = append(h.flight, flying{at: h.now.Add(hop), from: addr(i), d: d})
	}
	return rd
}

// run advances time by d, delivering datagrams and ticking cores.
func (h *net) run(d time.Duration) {
	end := h.now.Add(d)
	for h.now.Before(end) {
		next := end
		for _, f := range h.flight {
			if f.at.Before(next) {
				next = f.at
			}
		}
		for _, c := range h.cores {
			if dl := c.NextDeadline(); !dl.IsZero() && dl.Before(next) {
				next = dl
			}
		}
		if next.After(h.now) {
			h.now = next
		}
		due := h.flight[:0:0]
		rest := h.flight[:0:0]
		for _, f := range h.flight {
			if !f.at.After(h.now) {
				due = append(due, f)
			} else {
				rest = append(rest, f)
			}
		}
		h.flight = rest
		for _, f := range due {
			for i := range h.cores {
				if addr(i) == f.d.To {
					h.cores[i].Receive(h.now, f.from, append([]byte(nil), f.d.Payload...))
					h.drain(i)
				}
			}
		}
		for i, c := range h.cores {
			if dl := c.NextDeadline(); !dl.After(h.now) {
				c.Tick(h.now)
				h.drain(i)
			}
		}
	}
}

func alive(c *Core) int {
	n := 0
	for _, m := range c.Control().Members() {
		if !m.Self && m.State == "alive" {
			n++
		}
	}
	return n
}

func TestSealedSitesHandshakeJoinAndRoute(t *testing.T) {
	h := newNet(t, 3, true, 7)
	h.run(3 * time.Second)
	for i, c := range h.cores {
		if alive(c) != 2 {
			t.Errorf("%s sees %d live members, want 2", name(i), alive(c))
		}
		if n := len(c.Control().Table().Routes()); n != 2 {
			t.Errorf("%s has %d routes, want 2", name(i), n)
		}
		for j := range h.cores {
			if j != i && !c.Sessions().Ready(wire.SiteIDFromName(name(j))) {
				t.Errorf("%s has no session with %s", name(i), name(j))
			}
		}
		if cc := c.Counters(); cc["session_established"]+cc["session_responses"] < 2 {
			t.Errorf("%s counts %d sessions established and %d answered, want 2 in all", name(i), cc["session_established"], cc["session_responses"])
		}
	}
	// Nothing crossed the underlay in the clear: every datagram was a
	// handshake message or sealed.
	for _, d := range h.wire {
		if typ := wire.Type(d.Payload[2]); !IsHandshake(d.Payload) && typ != wire.TypeSealed {
			t.Fatalf("a %v left in the clear", typ)
		}
	}
}

func TestClearSitesSendPlainControl(t *testing.T) {
	h := newNet(t, 2, false, 1)
	h.run(2 * time.Second)
	if alive(h.cores[0]) != 1 || alive(h.cores[1]) != 1 {
		t.Fatal("the two sites did not join")
	}
	if h.cores[0].Sessions() != nil || h.cores[0].Sealed() {
		t.Error("a site in the clear has a session node")
	}
	for _, d := range h.wire {
		if wire.Type(d.Payload[2]) == wire.TypeSealed {
			t.Fatal("a site in the clear sealed a datagram")
		}
	}
}

func TestControlMessagesWaitForTheSession(t *testing.T) {
	h := newNet(t, 2, true, 3)
	// The first hello of s1 leaves as an initiation only; the hello itself
	// waits for the session and leaves sealed once it is up.
	var first []wire.Type
	for _, d := range h.wire {
		first = append(first, wire.Type(d.Payload[2]))
	}
	if len(first) != 1 || first[0] != wire.TypeHandshakeInit {
		t.Fatalf("first datagrams %v, want one initiation", first)
	}
	h.run(50 * time.Millisecond)
	if alive(h.cores[0]) != 1 {
		t.Fatal("the queued hello did not reach s0 once the session was up")
	}
	if c := h.cores[1].Counters(); c["control_pending_dropped"] != 0 {
		t.Errorf("%d queued messages dropped", c["control_pending_dropped"])
	}
}

func TestSealedSiteRejectsPlaintextAndSpoofedSender(t *testing.T) {
	h := newNet(t, 3, true, 11)
	h.run(2 * time.Second)
	before := len(h.cores[0].Control().Members())
	// A probe in the clear from a stranger's address.
	probe := wire.AppendProbe(nil, &wire.Probe{Sender: wire.SiteIDFromName("rogue"), Receiver: h.cores[0].Control().ID(), Seq: 1, SendTime: 1})
	h.cores[0].Receive(h.now, addr(9), probe)
	// A hello from s1, sealed by s1, that claims to come from s2.
	s1, s2 := h.cores[1], h.cores[2]
	forged := wire.AppendProbe(nil, &wire.Probe{Sender: s2.Control().ID(), Receiver: h.cores[0].Control().ID(), Seq: 1, SendTime: 1})
	sealed, err := s1.Sessions().SealControl(nil, h.cores[0].Control().ID(), forged)
	if err != nil {
		t.Fatal(err)
	}
	h.cores[0].Receive(h.now, addr(1), sealed)
	c := h.cores[0].Counters()
	if c["control_unsealed_dropped"] != 1 {
		t.Errorf("control_unsealed_dropped = %d, want 1", c["control_unsealed_dropped"])
	}
	if c["control_spoofed_sender"] != 1 {
		t.Errorf("control_spoofed_sender = %d, want 1", c["control_spoofed_sender"])
	}
	if got := len(h.cores[0].Control().Members()); got != before {
		t.Errorf("members went from %d to %d", before, got)
	}
}

func TestReadyRestampsProbesAsTheyLeave(t *testing.T) {
	h := newNet(t, 2, false, 1)
	h.run(time.Second)
	c := h.cores[0]
	c.Tick(c.NextDeadline())
	leave := c.NextDeadline().Add(5 * time.Millisecond)
	var found bool
	for _, d := range c.Ready(leave).Send {
		var p wire.Probe
		if wire.ParseProbe(d.Payload, &p) == nil {
			found = true
			if p.SendTime != leave.UnixNano() {
				t.Errorf("probe stamped %d, want the time it left %d", p.SendTime, leave.UnixNano())
			}
		}
	}
	if !found {
		t.Fatal("no probe was due")
	}
}

func TestReadyPublishesEachTableOnceAndNamesTheGone(t *testing.T) {
	h := newNet(t, 2, false, 1)
	h.run(time.Second)
	c := h.cores[0]
	if rd := c.Ready(h.now); rd.Table != nil {
		t.Error("an unchanged table was published again")
	}
	// s1 falls silent: once it is down its route goes, and Ready names it.
	h.drop = func(int, Datagram) bool { return true }
	var gone []wire.SiteID
	for range 200 {
		h.now = h.now.Add(10 * time.Millisecond)
		c.Tick(h.now)
		if rd := c.Ready(h.now); rd.Table != nil {
			gone = append(gone, rd.Gone...)
		}
	}
	if len(gone) != 1 || gone[0] != wire.SiteIDFromName("s1") {
		t.Errorf("gone %v, want s1", gone)
	}
}

func TestReceiveTime(t *testing.T) {
	for _, tc := range []struct {
		lag  time.Duration
		want time.Time
	}{
		{0, t0}, {-time.Millisecond, t0}, {3 * time.Millisecond, t0.Add(-3 * time.Millisecond)}, {time.Second, t0},
	} {
		if got := ReceiveTime(t0, tc.lag); !got.Equal(tc.want) {
			t.Errorf("ReceiveTime(lag %v) = %v, want %v", tc.lag, got, tc.want)
		}
	}
}

// TestLateDatagramKeepsItsReadTime: a probe read before a tick but
// handled after it is measured at the time it was read (the reply's t2),
// while the reply leaves no earlier than the tick (its t3), so that the
// prober takes the wait out of the round trip; the core's clock for
// everything else never goes back.
func TestLateDatagramKeepsItsReadTime(t *testing.T) {
	h := newNet(t, 2, false, 5)
	h.run(time.Second)
	c, s1 := h.cores[0], h.cores[1]
	late := h.now.Add(20 * time.Millisecond)
	c.Tick(late)
	c.Ready(late)
	probe := wire.AppendProbe(nil, &wire.Probe{Sender: s1.Control().ID(), Receiver: c.Control().ID(), Seq: 99, SendTime: h.now.UnixNano()})
	c.Receive(h.now, addr(1), probe)
	if got := c.observe(time.Time{}); !got.Equal(late) {
		t.Errorf("the core's clock is %v after the late datagram, want the tick's %v", got, late)
	}
	var replied bool
	for _, d := range c.Ready(late).Send {
		var r wire.ProbeReply
		if wire.ParseProbeReply(d.Payload, &r) == nil && r.Seq == 99 {
			replied = true
			if r.ProbeRecvTime != h.now.UnixNano() || r.ReplySendTime < late.UnixNano() {
				t.Errorf("probe received at %d and replied at %d, want read at %d and replied at %d or later",
					r.ProbeRecvTime, r.ReplySendTime, h.now.UnixNano(), late.UnixNano())
			}
		}
	}
	if !replied {
		t.Fatal("no reply to the probe")
	}
}

func TestWaitIsBounded(t *testing.T) {
	h := newNet(t, 2, true, 5)
	c := h.cores[0]
	if w := c.Wait(h.now.Add(-time.Hour)); w != maxWait {
		t.Errorf("Wait long before the deadline = %v, want %v", w, maxWait)
	}
	if w := c.Wait(h.now.Add(time.Hour)); w != 0 {
		t.Errorf("Wait after the deadline = %v, want 0", w)
	}
}

func TestDownMemberSessionsForgottenOnce(t *testing.T) {
	h := newNet(t, 2, true, 13)
	h.run(time.Second)
	s0, s1 := h.cores[0], h.cores[1]
	id1 := s1.Control().ID()
	if !s0.Sessions().Ready(id1) {
		t.Fatal("no session before the silence")
	}
	// s1 falls silent: once s0 holds it down, s0 drops the session once,
	// and its probes to s1 start a new handshake.
	h.drop = func(from int, _ Datagram) bool { return from == 1 }
	h.run(3 * time.Second)
	if st := stateOf(s0, id1); st != control.StateDown.String() {
		t.Fatalf("s1 is %s at s0, want down", st)
	}
	c := s0.Counters()
	if c["session_forgotten"] != 1 {
		t.Errorf("session_forgotten = %d, want 1", c["session_forgotten"])
	}
	if s0.Sessions().Ready(id1) {
		t.Error("s0 still seals to s1 with the old session")
	}
	if c["session_initiations"] == 0 {
		t.Error("s0 started no new handshake")
	}
	// s1 speaks again: a new session, s1 alive again.
	h.drop = nil
	h.run(3 * time.Second)
	if st := stateOf(s0, id1); st != control.StateAlive.String() || !s0.Sessions().Ready(id1) {
		t.Errorf("s1 is %s at s0 after the silence, session %v", st, s0.Sessions().Ready(id1))
	}
}

func stateOf(c *Core, id wire.SiteID) string {
	for _, m := range c.Control().Members() {
		if m.ID == id {
			return m.State
		}
	}
	return "unknown"
}

func TestSendableDropsUnspecified(t *testing.T) {
	ds := []Datagram{
		{To: netip.MustParseAddrPort("0.0.0.0:4800")},
		{To: netip.MustParseAddrPort("198.18.0.1:4800")},
		{To: netip.MustParseAddrPort("[::]:4800")},
		{},
		{To: netip.MustParseAddrPort("[fd00::1]:4800")},
	}
	got := sendable(ds)
	if len(got) != 2 || got[0].To.Port() != 4800 || !got[1].To.Addr().Is6() {
		t.Fatalf("sendable = %+v", got)
	}
}
