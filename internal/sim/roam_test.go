package sim

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestSealedRoamingFollowsNewAddress: C's datagrams start coming from a
// new address (a NAT gave it a new port) and its old address reaches
// nothing. C's core is not told and keeps advertising the old one; A and
// R follow the source of its authenticated datagrams within a second,
// and the routes stay as they were.
func TestSealedRoamingFollowsNewAddress(t *testing.T) {
	n := startedTriangle(t, 9)
	before := n.PathNames("A", "C")
	moved := netip.MustParseAddrPort("10.9.9.9:40001")
	n.Move("C", moved)
	at := n.Now()
	followed := func() bool {
		for _, name := range []string{"A", "R"} {
			for _, m := range n.Site(name).Node.Members() {
				if m.Name == "C" && m.Addr != moved {
					return false
				}
			}
		}
		return true
	}
	if !n.RunUntil(at.Add(time.Second), followed) {
		t.Fatalf("A and R do not send to C's new address within 1 s")
	}
	t.Logf("followed after %v", n.Now().Sub(at))
	n.RunFor(3 * time.Second)
	for _, name := range []string{"A", "R"} {
		for _, m := range n.Site(name).Node.Members() {
			if m.Name == "C" && (m.State != "alive" || m.Addr != moved) {
				t.Errorf("%s sees C %s at %v", name, m.State, m.Addr)
			}
		}
	}
	if got := n.PathNames("A", "C"); !slices.Equal(got, before) {
		t.Errorf("A→C path %v, was %v", got, before)
	}
	if n.Site("A").Node.Counters().Roamed == 0 {
		t.Errorf("A counted no roaming")
	}
}
