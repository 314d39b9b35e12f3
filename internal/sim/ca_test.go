package sim

import (
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/site"
)

// caTriangle returns a started SealedCA triangle (A, R, C, joined through
// A by address only) whose members are all up.
func caTriangle(t *testing.T, seed uint64) *Net {
	t.Helper()
	n := SealedCA(seed)
	for i, name := range []string{"A", "R", "C"} {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(name, 0, boot, nil)
	}
	for _, k := range []string{"AR", "RA", "RC", "CR", "AC", "CA"} {
		n.SetLink(k[:1], k[1:], Link{Delay: 10 * ms, Jitter: ms})
	}
	start(t, n)
	n.RunFor(5 * time.Second)
	for _, s := range n.Sites() {
		if got := aliveMembers(s); got != 2 {
			t.Fatalf("%s sees %d live members, want 2: %+v", s.Name, got, s.Node.Members())
		}
	}
	return n
}

func aliveMembers(s *Site) int {
	alive := 0
	for _, m := range s.Node.Members() {
		if !m.Self && m.State == "alive" {
			alive++
		}
	}
	return alive
}

// addD adds site D, joining through R by address only, with 5 ms links to
// the others, and starts it.
func addD(t *testing.T, n *Net) *Site {
	t.Helper()
	d := n.AddSite("D", 0, []netip.AddrPort{n.Site("R").Addr}, nil)
	for _, o := range []string{"A", "R", "C"} {
		n.SetLink("D", o, Link{Delay: 5 * ms})
		n.SetLink(o, "D", Link{Delay: 5 * ms})
	}
	if err := n.Start("D"); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestCAJoinWithoutRestart: a fourth site joins a running three-site
// overlay whose sites know only the CA's public key (no site's key, and D
// is in no configuration): it contacts R by address, and within 2 s every
// site has a session with it, sees it alive and routes to it. No core of
// the three is replaced (nothing restarts), and the three keep their
// routes to each other.
func TestCAJoinWithoutRestart(t *testing.T) {
	n := caTriangle(t, 11)
	cores := map[string]*site.Core{}
	for _, s := range n.Sites() {
		cores[s.Name] = s.Core
	}
	changes := len(n.Changes)
	at := n.Now()
	d := addD(t, n)
	joined := func() bool {
		for _, s := range n.Sites() {
			if aliveMembers(s) != 3 {
				return false
			}
			for _, o := range n.Sites() {
				if o != s && (!s.Core.Sessions().Ready(o.ID) || len(n.Path(s.Name, o.Name)) == 0) {
					return false
				}
			}
		}
		return true
	}
	if !n.RunUntil(at.Add(2*time.Second), joined) {
		for _, s := range n.Sites() {
			t.Logf("%s: %+v %v", s.Name, s.Node.Members(), s.Core.Counters())
		}
		t.Fatalf("D not a full member within 2 s")
	}
	t.Logf("D a full member (sessions, alive, routes, both ways) after %v", n.Now().Sub(at))
	for name, c := range cores {
		if n.Site(name).Core != c {
			t.Errorf("%s restarted", name)
		}
		if got := n.Site(name).Core.Counters()["trust_certificates_accepted"]; got == 0 {
			t.Errorf("%s accepted no certificate", name)
		}
	}
	for _, ch := range n.Changes[changes:] {
		if ch.Site != "D" && ch.Dest != d.ID && ch.From != nil {
			t.Errorf("the join moved %s's path to %v: %v → %v", ch.Site, ch.Dest, ch.From, ch.To)
		}
	}
}

// TestCAForeignCertificateRefused: a site whose certificate another CA
// signed never gets a session with any member.
func TestCAForeignCertificateRefused(t *testing.T) {
	n := caTriangle(t, 12)
	other := SealedCA(99)
	d := n.AddSite("D", 0, []netip.AddrPort{n.Site("R").Addr}, nil)
	d.Cert = other.Certify("D", d.Key.Public(), time.Time{})
	for _, o := range []string{"A", "R", "C"} {
		n.SetLink("D", o, Link{Delay: 5 * ms})
		n.SetLink(o, "D", Link{Delay: 5 * ms})
	}
	if err := n.Start("D"); err != nil {
		t.Fatal(err)
	}
	n.RunFor(3 * time.Second)
	for _, name := range []string{"A", "R", "C"} {
		s := n.Site(name)
		if _, ok := s.Core.Sessions().Accepts(d.ID); ok || aliveMembers(s) != 2 {
			t.Errorf("%s accepts D signed by another CA", name)
		}
	}
	if n.Site("R").Core.Counters()["trust_certificates_refused"] == 0 {
		t.Errorf("R counted no refused certificate")
	}
}

// TestCARevocationReachesAllWithin2s: the operator gives a revocation of
// D to A alone; it is flooded, and within 2 s no site accepts D any more
// (its sessions dropped, its handshakes and frames refused), and D is no
// longer a live member anywhere soon after.
func TestCARevocationReachesAllWithin2s(t *testing.T) {
	n := caTriangle(t, 13)
	addD(t, n)
	n.RunFor(3 * time.Second)
	rev, err := ca.SignRevocation(n.CAKey(), &ca.Revocation{Name: "D", At: n.Now()})
	if err != nil {
		t.Fatal(err)
	}
	at := n.Now()
	n.Do("A", func(c *site.Core, now time.Time) {
		if err := c.Revoke(now, rev); err != nil {
			t.Fatal(err)
		}
	})
	d := n.Site("D")
	refused := func() bool {
		for _, name := range []string{"A", "R", "C"} {
			if _, ok := n.Site(name).Core.Sessions().Accepts(d.ID); ok {
				return false
			}
		}
		return true
	}
	if !n.RunUntil(at.Add(2*time.Second), refused) {
		t.Fatalf("D still accepted somewhere 2 s after the revocation")
	}
	t.Logf("revocation applied at all three after %v", n.Now().Sub(at))
	n.RunFor(3 * time.Second)
	for _, name := range []string{"A", "R", "C"} {
		s := n.Site(name)
		if _, ok := s.Core.Sessions().Accepts(d.ID); ok {
			t.Errorf("%s accepts D again", name)
		}
		for _, m := range s.Node.Members() {
			if m.Name == "D" && m.State == "alive" {
				t.Errorf("%s still sees D alive", name)
			}
		}
		if aliveMembers(s) != 2 {
			t.Errorf("%s sees %d live members, want 2", name, aliveMembers(s))
		}
		if got := s.Core.Counters()["trust_revocations_applied"]; got != 1 {
			t.Errorf("%s applied %d revocations, want 1", name, got)
		}
	}
}

// TestCARotationWithoutGaps: C takes a new key and a certificate for it
// while the overlay runs. Within 2 s every site holds C's new key and a
// session made with it, with no control datagram refused in between, C
// alive everywhere throughout and no route changed.
func TestCARotationWithoutGaps(t *testing.T) {
	n := caTriangle(t, 14)
	n.RunFor(2 * time.Second)
	before := map[string]map[string]uint64{}
	for _, s := range n.Sites() {
		before[s.Name] = s.Core.Counters()
	}
	changes := len(n.Changes)
	c := n.Site("C")
	newKey, _ := keys.Generate(n.seeded(7, 7))
	cert := n.Certify("C", newKey.Public(), n.Now())
	at := n.Now()
	n.Do("C", func(core *site.Core, now time.Time) {
		if err := core.Rotate(now, newKey, cert); err != nil {
			t.Fatal(err)
		}
	})
	gap := false
	rotated := func() bool {
		for _, name := range []string{"A", "R"} {
			s := n.Site(name)
			for _, m := range s.Node.Members() {
				if m.Name == "C" && m.State != "alive" {
					gap = true
				}
			}
			if k, ok := s.Core.Sessions().Accepts(c.ID); !ok || k != newKey.Public() {
				return false
			}
		}
		return c.Core.Sessions().Stats().Established > before["C"]["session_established"]
	}
	if !n.RunUntil(at.Add(2*time.Second), rotated) {
		t.Fatalf("the new key is not in use everywhere 2 s after the rotation")
	}
	t.Logf("rotated everywhere after %v", n.Now().Sub(at))
	n.RunFor(5 * time.Second)
	if gap {
		t.Errorf("C was not alive everywhere during the rotation")
	}
	for _, s := range n.Sites() {
		now := s.Core.Counters()
		for _, k := range []string{"session_auth_failures", "session_no_session", "session_replays", "control_pending_dropped", "session_unknown_peer"} {
			if now[k] != before[s.Name][k] {
				t.Errorf("%s: %s went from %d to %d", s.Name, k, before[s.Name][k], now[k])
			}
		}
	}
	if len(n.Changes) != changes {
		t.Errorf("the rotation changed routes: %+v", n.Changes[changes:])
	}
	// Sessions keep working on the new key: every pair is ready.
	for _, s := range n.Sites() {
		for _, o := range n.Sites() {
			if o != s && !s.Core.Sessions().Ready(o.ID) {
				t.Errorf("%s has no session with %s after the rotation", s.Name, o.Name)
			}
		}
	}
}
