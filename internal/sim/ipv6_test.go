package sim

import (
	"slices"
	"testing"
	"time"
)

// TestLeonJapanOverIPv6 runs leon-japan with every site on an IPv6
// underlay address, and then with IPv4 and IPv6 sites mixed, in the
// clear and sealed: the paths and the RTT estimate of Fujisawa→Seoul are
// those of the IPv4 run (TestLeonJapan).
func TestLeonJapanOverIPv6(t *testing.T) {
	for _, c := range []struct {
		name   string
		v6     func(i int) bool
		sealed bool
	}{
		{"all-ipv6", func(int) bool { return true }, false},
		{"mixed", func(i int) bool { return i%2 == 1 }, false},
		{"mixed-sealed", func(i int) bool { return i%2 == 0 }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := FromScenario(load(t, "leon-japan"), 1, nil)
			if c.sealed {
				n.Seal()
			}
			for i, s := range n.Sites() {
				if c.v6(i) {
					n.Readdress(s.Name, AddrOf6(i))
				}
			}
			start(t, n)
			n.RunFor(5 * time.Second)
			if got := n.PathNames("Fujisawa", "Seoul"); !slices.Equal(got, []string{"Inagi", "Seoul"}) {
				t.Fatalf("Fujisawa→Seoul path %v", got)
			}
			if got := n.PathNames("Seoul", "Fujisawa"); !slices.Equal(got, []string{"Inagi", "Fujisawa"}) {
				t.Fatalf("Seoul→Fujisawa path %v", got)
			}
			r, _ := n.Site("Fujisawa").Node.Table().Lookup(n.Site("Seoul").ID)
			if d := r.RTTEstimate - 21*time.Millisecond; d < -300*time.Microsecond || d > 300*time.Microsecond {
				t.Errorf("RTT estimate %v, want 21 ms", r.RTTEstimate)
			}
			if n.Undeliverable > 0 {
				t.Errorf("%d datagrams to no site", n.Undeliverable)
			}
			six := 0
			for _, m := range n.Site("Fujisawa").Node.Members() {
				if m.Addr.Addr().Is6() {
					six++
				}
			}
			if six == 0 {
				t.Errorf("Fujisawa knows no member by an IPv6 address")
			}
			t.Logf("%s: RTT estimate %v, %d members known by IPv6 address", c.name, r.RTTEstimate, six)
		})
	}
}
