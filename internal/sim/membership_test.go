package sim

import (
	"fmt"
	"github.com/detour-overlay/detour/internal/wire"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/control"
)

// mesh builds k sites, all links with the given one-way delay; site i > 0
// bootstraps through site 0 only.
func mesh(k int, delay time.Duration, seed uint64) *Net {
	n := New(seed)
	for i := 0; i < k; i++ {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(fmt.Sprintf("s%d", i), time.Duration(i)*1234*time.Millisecond, boot, nil)
	}
	for _, a := range n.Sites() {
		for _, b := range n.Sites() {
			if a != b {
				n.SetLink(a.Name, b.Name, Link{Delay: delay})
			}
		}
	}
	return n
}

func stateOf(n *Net, at, of string) string {
	for _, m := range n.Site(at).Node.Members() {
		if m.Name == of {
			return m.State
		}
	}
	return "unknown"
}

// allSee reports whether every running site sees every other running site
// as alive, with a route to it.
func allSee(n *Net) bool {
	for _, a := range n.Sites() {
		if !a.Alive {
			continue
		}
		for _, b := range n.Sites() {
			if a == b || !b.Alive {
				continue
			}
			if stateOf(n, a.Name, b.Name) != "alive" || n.Path(a.Name, b.Name) == nil {
				return false
			}
		}
	}
	return true
}

func TestJoinThroughOneMemberLearnsAll(t *testing.T) {
	n := mesh(6, 10*time.Millisecond, 1)
	start(t, n)
	if !n.RunUntil(n.Now().Add(5*time.Second), func() bool { return allSee(n) }) {
		t.Fatal("members did not all learn each other within 5 s")
	}
	t.Logf("full membership and routes after %v", n.Elapsed())
	// A late joiner that knows only s3.
	n.AddSite("late", 0, []netip.AddrPort{n.Site("s3").Addr}, nil)
	for _, s := range n.Sites() {
		if s.Name != "late" {
			n.SetLink("late", s.Name, Link{Delay: 10 * time.Millisecond})
			n.SetLink(s.Name, "late", Link{Delay: 10 * time.Millisecond})
		}
	}
	if err := n.Start("late"); err != nil {
		t.Fatal(err)
	}
	begin := n.Now()
	if !n.RunUntil(n.Now().Add(5*time.Second), func() bool { return allSee(n) }) {
		t.Fatal("late joiner not fully integrated within 5 s")
	}
	t.Logf("late joiner integrated after %v", n.Now().Sub(begin))
}

// TestFirstSiteFails: the bootstrap site dies; the others keep their
// membership and routes among themselves.
func TestFirstSiteFails(t *testing.T) {
	n := mesh(5, 10*time.Millisecond, 2)
	start(t, n)
	n.RunFor(3 * time.Second)
	n.Kill("s0")
	n.RunFor(2 * time.Second)
	if !allSee(n) {
		t.Fatal("survivors lost each other")
	}
	for _, s := range n.Sites()[1:] {
		if st := stateOf(n, s.Name, "s0"); st != "down" {
			t.Errorf("%s sees s0 %s", s.Name, st)
		}
	}
	// s0 restarts (new incarnation) and is accepted again.
	if err := n.Start("s0"); err != nil {
		t.Fatal(err)
	}
	if !n.RunUntil(n.Now().Add(5*time.Second), func() bool { return allSee(n) }) {
		t.Fatal("restarted first site not accepted again")
	}
}

// TestSilentSiteDownWithinOneSecond measures, at every other site, the
// time from killing a site to seeing it down and having no route to it.
func TestSilentSiteDownWithinOneSecond(t *testing.T) {
	n := mesh(5, 20*time.Millisecond, 3)
	start(t, n)
	n.RunFor(3 * time.Second)
	n.Kill("s2")
	killed := n.Now()
	down := func() bool {
		for _, s := range n.Sites() {
			if s.Alive && (stateOf(n, s.Name, "s2") != "down" || n.Path(s.Name, "s2") != nil) {
				return false
			}
		}
		return true
	}
	if !n.RunUntil(killed.Add(time.Second), down) {
		t.Fatal("silent site not down everywhere within 1 s")
	}
	t.Logf("silent site down everywhere after %v", n.Now().Sub(killed))
}

func TestCleanLeaveDropsAtOnce(t *testing.T) {
	n := mesh(4, 20*time.Millisecond, 4)
	start(t, n)
	n.RunFor(3 * time.Second)
	n.Leave("s1")
	left := n.Now()
	gone := func() bool {
		for _, s := range n.Sites() {
			if s.Alive && (stateOf(n, s.Name, "s1") != "left" || n.Path(s.Name, "s1") != nil) {
				return false
			}
		}
		return true
	}
	if !n.RunUntil(left.Add(time.Second), gone) {
		t.Fatal("leave not applied within 1 s")
	}
	if took := n.Now().Sub(left); took > 25*time.Millisecond {
		t.Errorf("leave took %v, want one link delay (20 ms)", took)
	}
}

// TestDeadDirectLinkUsesRelay: with the direct link between two sites cut
// in both directions, they stay members and reach each other via a relay,
// because link state is flooded around the dead link.
func TestDeadDirectLinkUsesRelay(t *testing.T) {
	n := mesh(4, 10*time.Millisecond, 5)
	n.Partition("s1", "s2", true)
	start(t, n)
	n.RunFor(5 * time.Second)
	if !allSee(n) {
		t.Fatal("sites with a dead direct link do not see each other")
	}
	if p := n.Path("s1", "s2"); len(p) != 2 {
		t.Fatalf("s1→s2 path %v, want one relay", p)
	}
}

func TestIDCollisionRejected(t *testing.T) {
	if err := control.ValidateSites([]string{"a", "b", "a"}); err == nil {
		t.Fatal("duplicate name accepted")
	}
}

// TestFloodAroundDeadLinkIsBounded: in a 12-site mesh where s1 and s2
// cannot reach each other, s2 still gets s1's link state (through the
// designated forwarders), and each of s1's reports reaches s2 at most
// twice: not once from every other site.
func TestFloodAroundDeadLinkIsBounded(t *testing.T) {
	n := mesh(12, 10*time.Millisecond, 7)
	n.Partition("s1", "s2", true)
	start(t, n)
	n.RunFor(8 * time.Second)
	if !allSee(n) {
		t.Fatal("sites with a dead direct link do not see each other")
	}
	// Every site sends each of its reports to every peer it reaches: s1
	// to 10, the others to 11. s2 hears the other ten origins' reports
	// directly, and s1's through at most two forwarders each.
	lsOut := func() []uint64 {
		var out []uint64
		for _, s := range n.Sites() {
			out = append(out, s.Node.Counters().Out[wire.TypeLinkState].Packets)
		}
		return out
	}
	lsIn := func() uint64 { return n.Site("s2").Node.Counters().In[wire.TypeLinkState].Packets }
	out0, in0 := lsOut(), lsIn()
	n.RunFor(10 * time.Second)
	out1 := lsOut()
	var direct, fromS1 uint64
	for i, s := range n.Sites() {
		switch s.Name {
		case "s1":
			fromS1 = (out1[i] - out0[i]) / 10
		case "s2":
		default:
			// Forwarded copies count too: take the origin's own reports
			// as at most its sends over its 11 peers.
			direct += (out1[i] - out0[i]) / 11
		}
	}
	got := lsIn() - in0
	t.Logf("in 10 s s1 sent %d reports and the other origins about %d; s2 received %d link-state datagrams", fromS1, direct, got)
	if fromS1 == 0 {
		t.Fatal("s1 sent no reports")
	}
	if max := direct + 2*fromS1; got > max {
		t.Errorf("s2 received %d link-state datagrams, more than %d: s1's reports flooded by every site", got, max)
	}
	s2 := n.Site("s2")
	fresh := false
	links := s2.Node.Links(s2.Local(n.Now()))
	for _, l := range links {
		if l.From == "s1" && l.Age < 2*time.Second {
			fresh = true
		}
	}
	if !fresh {
		t.Error("s2 holds no fresh report of s1")
	}
	// The view lists every origin's links sorted by names.
	for i := 1; i < len(links); i++ {
		a, b := links[i-1], links[i]
		if a.From > b.From || (a.From == b.From && a.To >= b.To) {
			t.Fatalf("links out of name order: %s→%s before %s→%s", a.From, a.To, b.From, b.To)
		}
	}
}
