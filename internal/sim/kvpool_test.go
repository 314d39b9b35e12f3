package sim

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/site"
	"github.com/detour-overlay/detour/internal/wire"
)

// The tests of this file distribute the key router's pools (site,
// kvpools.go) over a sealed overlay whose sites admit each other by
// certificate: lanman2017's four sites with its one-way delays, the
// direct link LAN–CLU cut so that what LAN floods reaches CLU only
// through the others, and a fifth site that joins later.

// kvNet returns the started four-site network for seed, settled.
func kvNet(t *testing.T, seed uint64) *Net {
	t.Helper()
	n := SealedCA(seed)
	names := []string{"LAN", "BOR", "CLU", "NEU"}
	for i, name := range names {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		n.AddSite(name, time.Duration(i)*700*ms, boot, nil)
	}
	delay := map[string]time.Duration{"LANBOR": 18 * ms, "LANCLU": 31 * ms, "LANNEU": 15 * ms, "BORCLU": 25 * ms, "BORNEU": 10 * ms, "CLUNEU": 20 * ms}
	for k, d := range delay {
		n.SetLink(k[:3], k[3:], Link{Delay: d, Jitter: ms})
		n.SetLink(k[3:], k[:3], Link{Delay: d, Jitter: ms})
	}
	start(t, n)
	n.RunFor(5 * time.Second)
	n.Partition("LAN", "CLU", true)
	n.RunFor(2 * time.Second)
	return n
}

// kvTestPool is a pool of n servers of site s.
func kvTestPool(n int, s string) wire.KVPool {
	p := wire.KVPool{Name: "cache", Network: 1, VIP: netip.MustParseAddrPort("198.19.255.250:11211")}
	for i := range n {
		p.Servers = append(p.Servers, wire.KVServer{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i), 1}), 11211), Weight: 1, Site: s})
	}
	return p
}

// allHold reports whether every running site holds the pool at (v,
// origin) with nservers servers.
func allHold(n *Net, v uint64, origin wire.SiteID, nservers int) bool {
	for _, s := range n.Sites() {
		if !s.Alive {
			continue
		}
		ps := s.Core.KVPools()
		if len(ps) != 1 || ps[0].Version != v || ps[0].Origin != origin || len(ps[0].Servers) != nservers {
			return false
		}
	}
	return true
}

// setPool makes a change at one site and returns the pool as stamped.
func setPool(t *testing.T, n *Net, at string, p wire.KVPool) wire.KVPool {
	t.Helper()
	var out wire.KVPool
	n.Do(at, func(c *site.Core, now time.Time) {
		var err error
		if out, err = c.SetKVPool(now, p); err != nil {
			t.Fatal(err)
		}
	})
	return out
}

// TestKVPoolsDistributed: a pool defined at one site and then changed at
// another is on every site within 1 s of simulated time (CLU only through
// relays); two changes made at once at two sites converge on one ring;
// a site that joins later, and one that restarts with nothing, get the
// pool in force.
func TestKVPoolsDistributed(t *testing.T) {
	n := kvNet(t, 17)
	lan := n.Site("LAN").ID

	t0 := n.Now()
	p := setPool(t, n, "LAN", kvTestPool(3, "NEU"))
	if !n.RunUntil(t0.Add(time.Second), func() bool { return allHold(n, 1, lan, 3) }) {
		t.Fatalf("the pool defined at LAN did not reach every site within 1 s")
	}
	t.Logf("pool defined at LAN: on every site after %v", n.Now().Sub(t0))
	if got := n.Site("CLU").Core.Counters()["kv_pool_records_applied"]; got != 1 {
		t.Errorf("CLU applied %d records, want 1", got)
	}

	t0 = n.Now()
	p.Servers = append(p.Servers, wire.KVServer{Addr: netip.MustParseAddrPort("198.19.9.2:11211"), Weight: 1, Site: "BOR"})
	p = setPool(t, n, "CLU", p)
	if !n.RunUntil(t0.Add(time.Second), func() bool { return allHold(n, 2, n.Site("CLU").ID, 4) }) {
		t.Fatalf("the change made at CLU did not reach every site within 1 s")
	}
	t.Logf("server added at CLU: on every site after %v", n.Now().Sub(t0))

	// BOR and NEU change version 2 at the same moment.
	a, b := p.Clone(), p.Clone()
	a.Servers = a.Servers[:3]
	b.Servers[0].Flags = wire.KVServerDrained
	pa, pb := setPool(t, n, "BOR", a), setPool(t, n, "NEU", b)
	win := pa
	if pb.Origin > pa.Origin {
		win = pb
	}
	t0 = n.Now()
	if !n.RunUntil(t0.Add(time.Second), func() bool { return allHold(n, 3, win.Origin, len(win.Servers)) }) {
		t.Fatalf("concurrent changes at BOR and NEU did not converge within 1 s")
	}
	n.RunFor(6 * time.Second) // and stay converged through a round of digests
	for _, s := range n.Sites() {
		got := s.Core.KVPools()[0]
		if got.Version != 3 || got.Origin != win.Origin || len(got.Servers) != len(win.Servers) || got.Servers[0].Flags != win.Servers[0].Flags {
			t.Errorf("%s holds %+v, want %+v", s.Name, got, win)
		}
	}

	// A newcomer, knowing only NEU's address, and CLU restarted with
	// nothing held.
	n.AddSite("TLS", 0, []netip.AddrPort{n.Site("NEU").Addr}, nil)
	for _, o := range []string{"LAN", "BOR", "CLU", "NEU"} {
		n.SetLink("TLS", o, Link{Delay: 12 * ms, Jitter: ms})
		n.SetLink(o, "TLS", Link{Delay: 12 * ms, Jitter: ms})
	}
	t0 = n.Now()
	if err := n.Start("TLS"); err != nil {
		t.Fatal(err)
	}
	if !n.RunUntil(t0.Add(3*time.Second), func() bool { return allHold(n, 3, win.Origin, len(win.Servers)) }) {
		t.Fatalf("the newcomer did not get the pool within 3 s")
	}
	t.Logf("newcomer TLS: holds the pool %v after it started", n.Now().Sub(t0))
	n.Partition("LAN", "CLU", false) // LAN is CLU's bootstrap site
	n.Kill("CLU")
	n.RunFor(time.Second)
	t0 = n.Now()
	if err := n.Start("CLU"); err != nil {
		t.Fatal(err)
	}
	if !n.RunUntil(t0.Add(3*time.Second), func() bool { return allHold(n, 3, win.Origin, len(win.Servers)) }) {
		t.Fatalf("CLU restarted with nothing did not get the pool within 3 s")
	}
	t.Logf("CLU restarted empty: holds the pool %v after it started", n.Now().Sub(t0))
}

// TestKVReplicatedPoolDistributed: a replicated pool defined at LAN (its
// shards' replicas at three sites on two tiers, a policy, a near zone
// that names a site with no replica) arrives at every site, CLU only
// through relays, with the same shards, policy, hedge, near sites and
// each replica's shard and tier; a change of policy and near zone made
// at NEU follows the same way.
func TestKVReplicatedPoolDistributed(t *testing.T) {
	n := kvNet(t, 23)
	p := wire.KVPool{Name: "objects", Network: 1, VIP: netip.MustParseAddrPort("198.19.255.251:11211"), Policy: 2, Hedge: false,
		NearSites: []string{"NEU", "CLU"}, Shards: []wire.KVShard{{Name: "s0", Weight: 1}, {Weight: 2}}}
	for i, r := range []struct {
		site, tier string
		shard      uint16
	}{{"LAN", "disk", 0}, {"NEU", "memory", 0}, {"BOR", "memory", 0}, {"LAN", "disk", 1}, {"BOR", "", 1}} {
		p.Servers = append(p.Servers, wire.KVServer{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i), 1}), 11211), Weight: 1,
			Site: r.site, Shard: r.shard, Tier: r.tier})
	}
	same := func(want wire.KVPool) bool {
		for _, s := range n.Sites() {
			if ps := s.Core.KVPools(); len(ps) != 1 || !reflect.DeepEqual(ps[0], want) {
				return false
			}
		}
		return true
	}
	t0 := n.Now()
	want := setPool(t, n, "LAN", p)
	if !want.Replicated() || want.Policy != 2 || want.Servers[1].Tier != "memory" {
		t.Fatalf("LAN stamped %+v", want)
	}
	if !n.RunUntil(t0.Add(time.Second), func() bool { return same(want) }) {
		for _, s := range n.Sites() {
			t.Logf("%s holds %+v", s.Name, s.Core.KVPools())
		}
		t.Fatalf("the replicated pool defined at LAN did not reach every site whole within 1 s; want %+v", want)
	}
	t.Logf("replicated pool defined at LAN: on every site, whole, after %v", n.Now().Sub(t0))

	q := want.Clone()
	q.Policy, q.Hedge, q.NearSites = 0, true, []string{"BOR"}
	t0 = n.Now()
	want = setPool(t, n, "NEU", q)
	if !n.RunUntil(t0.Add(time.Second), func() bool { return same(want) }) {
		t.Fatalf("the change of policy and near zone made at NEU did not reach every site within 1 s; want %+v", want)
	}
	t.Logf("policy and near zone changed at NEU: on every site after %v", n.Now().Sub(t0))
	n.RunFor(6 * time.Second) // and they stay so through a round of digests
	if !same(want) {
		t.Errorf("the sites differ after a round of digests")
	}
}
