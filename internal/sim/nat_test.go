package sim

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// natOverlay returns a SealedCA network, not started: P public, N1 and N2
// each behind a NAT (symmetric ones when symmetric), advertising private
// addresses that reach nothing and joining through P. The direct link
// N1–N2 (5 ms) is faster than the path through P (10 + 10 ms).
func natOverlay(symmetric bool) *Net {
	n := SealedCA(21)
	n.AddSite("P", 0, nil, nil)
	for i, name := range []string{"N1", "N2"} {
		n.AddSite(name, 0, []netip.AddrPort{AddrOf(0)}, nil)
		n.Readdress(name, netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(i + 1), 1}), 4789))
		n.SetNAT(name, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}), 40000), symmetric)
	}
	for _, k := range [][2]string{{"P", "N1"}, {"P", "N2"}} {
		n.SetLink(k[0], k[1], Link{Delay: 10 * ms})
		n.SetLink(k[1], k[0], Link{Delay: 10 * ms})
	}
	n.SetLink("N1", "N2", Link{Delay: 5 * ms})
	n.SetLink("N2", "N1", Link{Delay: 5 * ms})
	return n
}

// TestNATedSitesRelayThenPunch: two NATed sites, neither reachable until
// it sends, both join through the public P. They reach each other through
// P at once; then, as each sends its probes to the address of the other
// that P's member list gave (hole punching, coordinated by P's list), the
// direct link comes up and carries their traffic.
func TestNATedSitesRelayThenPunch(t *testing.T) {
	n := natOverlay(false)
	start(t, n)
	routed := func() bool { return len(n.Path("N1", "N2")) > 0 && len(n.Path("N2", "N1")) > 0 }
	if !n.RunUntil(n.Now().Add(3*time.Second), routed) {
		t.Fatalf("no route between the NATed sites 3 s after the start")
	}
	t.Logf("first routes after %v: N1→N2 %v", n.Elapsed(), n.PathNames("N1", "N2"))
	n.RunFor(10 * time.Second)
	for _, c := range [][2]string{{"N1", "N2"}, {"N2", "N1"}} {
		if got := n.PathNames(c[0], c[1]); !slices.Equal(got, []string{c[1]}) {
			t.Errorf("%s→%s path %v, want the punched direct link", c[0], c[1], got)
		}
	}
	relayed := false
	for _, ch := range n.Changes {
		if ch.Site == "N1" && ch.Dest == n.Site("N2").ID && len(ch.To) == 2 {
			relayed = true
		}
	}
	t.Logf("N1→N2 went through P first: %v; %d datagrams filtered by the NATs", relayed, n.Filtered)
	for _, name := range []string{"P", "N2"} {
		for _, m := range n.Site(name).Node.Members() {
			if m.Name == "N1" && m.Addr != n.Site("N1").PublicAddr() {
				t.Errorf("%s sends to N1 at %v, not its NAT's mapping %v", name, m.Addr, n.Site("N1").PublicAddr())
			}
		}
	}
}

// TestSymmetricNATsStayRelayed: behind symmetric NATs the addresses P
// saw are of no use to the other site, so punching fails; the NATed
// sites reach each other through P, and no route ever uses their direct
// link, which cannot work.
func TestSymmetricNATsStayRelayed(t *testing.T) {
	n := natOverlay(true)
	start(t, n)
	n.RunFor(15 * time.Second)
	for _, c := range [][2]string{{"N1", "N2"}, {"N2", "N1"}} {
		if got := n.PathNames(c[0], c[1]); !slices.Equal(got, []string{"P", c[1]}) {
			t.Errorf("%s→%s path %v, want through P", c[0], c[1], got)
		}
	}
	for _, ch := range n.Changes {
		if (ch.Site == "N1" || ch.Site == "N2") && len(ch.To) == 1 && ch.To[0] != n.Site("P").ID {
			t.Errorf("%s routed to %v directly at +%v", ch.Site, ch.Dest, ch.At.Sub(Start))
		}
	}
	if n.Filtered == 0 {
		t.Errorf("the NATs filtered nothing: the test does not model them")
	}
}

// TestNATRebindFollowedWithin1s: N1's NAT drops its mapping and makes a
// new one (a new public port). P and N2 send to the new mapping within
// 1 s, and the routes stay.
func TestNATRebindFollowedWithin1s(t *testing.T) {
	n := natOverlay(false)
	start(t, n)
	n.RunFor(10 * time.Second)
	before := n.PathNames("N2", "N1")
	moved := netip.AddrPortFrom(n.Site("N1").PublicAddr().Addr(), 41234)
	n.Rebind("N1", moved)
	at := n.Now()
	followed := func() bool {
		for _, name := range []string{"P", "N2"} {
			for _, m := range n.Site(name).Node.Members() {
				if m.Name == "N1" && m.Addr != moved {
					return false
				}
			}
		}
		return true
	}
	if !n.RunUntil(at.Add(time.Second), followed) {
		t.Fatalf("the new mapping is not followed within 1 s")
	}
	t.Logf("followed after %v", n.Now().Sub(at))
	n.RunFor(3 * time.Second)
	if got := n.PathNames("N2", "N1"); !slices.Equal(got, before) {
		t.Errorf("N2→N1 path %v, was %v", got, before)
	}
}
