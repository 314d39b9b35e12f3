package router

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/wire"
)

var subnet = netip.MustParsePrefix("10.20.0.0/24")

func addr(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// Each change gives a new spec one version higher and leaves the old
// one as it was.
func TestApply(t *testing.T) {
	old := testTable(t, 0).Pools()[0].Spec()
	if old.Version != 1 {
		t.Fatalf("configured version %d, want 1", old.Version)
	}
	add := Change{Op: AddServer, Server: ServerSpec{Addr: addr("10.20.0.14:11211"), Weight: 1, Site: siteB, SiteName: "man"}}
	got, err := Apply(subnet, old, add)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 2 || len(got.Servers) != 4 || got.Servers[3].Addr != add.Server.Addr || len(old.Servers) != 3 {
		t.Fatalf("add: version %d, %d servers (old %d)", got.Version, len(got.Servers), len(old.Servers))
	}
	got, err = Apply(subnet, got, Change{Op: Drain, Server: ServerSpec{Addr: addr("10.20.0.12:11211")}})
	if err != nil || !got.Servers[1].Drained || got.Version != 3 {
		t.Fatalf("drain: %v, %+v", err, got)
	}
	got, err = Apply(subnet, got, Change{Op: Undrain, Server: ServerSpec{Addr: addr("10.20.0.12:11211")}})
	if err != nil || got.Servers[1].Drained || got.Version != 4 {
		t.Fatalf("undrain: %v, %+v", err, got)
	}
	got, err = Apply(subnet, got, Change{Op: RemoveServer, Server: ServerSpec{Addr: addr("10.20.0.11:11211")}})
	if err != nil || len(got.Servers) != 3 || got.Servers[0].Addr != addr("10.20.0.12:11211") || got.Version != 5 {
		t.Fatalf("remove: %v, %+v", err, got)
	}
}

// A change that cannot be made says why, naming pool and server.
func TestApplyErrors(t *testing.T) {
	base := testTable(t, 0).Pools()[0].Spec()
	one := base
	one.Servers = base.Servers[:1]
	jump := base
	jump.Hash = ring.Jump
	s := func(a string, w uint32, site string) ServerSpec {
		return ServerSpec{Addr: addr(a), Weight: w, Site: wire.SiteIDFromName(site), SiteName: site}
	}
	drained := base
	drained.Servers = append([]ServerSpec(nil), base.Servers...)
	drained.Servers[0].Drained, drained.Servers[1].Drained = true, true
	for _, c := range []struct {
		ps   PoolSpec
		c    Change
		want error
	}{
		{base, Change{AddServer, s("10.20.0.11:11211", 1, "lan")}, ErrDuplicate},
		{base, Change{AddServer, s("10.30.0.1:11211", 1, "lan")}, ErrBadAddress},
		{base, Change{AddServer, s("10.20.0.250:11211", 1, "lan")}, ErrBadAddress},
		{base, Change{AddServer, s("10.20.0.20:0", 1, "lan")}, ErrBadAddress},
		{base, Change{AddServer, s("10.20.0.20:11211", 0, "lan")}, ErrBadWeight},
		{base, Change{AddServer, s("10.20.0.20:11211", 1001, "lan")}, ErrBadWeight},
		{base, Change{AddServer, ServerSpec{Addr: addr("10.20.0.20:11211"), Weight: 1}}, ErrNoSite},
		{jump, Change{AddServer, s("10.20.0.20:11211", 2, "lan")}, ring.ErrJumpWeights},
		{base, Change{RemoveServer, s("10.20.0.20:11211", 0, "")}, ErrUnknownServer},
		{one, Change{RemoveServer, s("10.20.0.11:11211", 0, "")}, ErrLastServer},
		{base, Change{Drain, s("10.20.0.20:11211", 0, "")}, ErrUnknownServer},
		{drained, Change{Drain, s("10.20.0.11:11211", 0, "")}, ErrDrained},
		{drained, Change{Drain, s("10.20.0.13:11211", 0, "")}, ErrLastServer},
		{drained, Change{RemoveServer, s("10.20.0.13:11211", 0, "")}, ErrLastServer},
		{base, Change{Undrain, s("10.20.0.11:11211", 0, "")}, ErrNotDrained},
		{base, Change{Op(9), s("10.20.0.11:11211", 0, "")}, ErrOp},
	} {
		got, err := Apply(subnet, c.ps, c.c)
		if !errors.Is(err, c.want) {
			t.Errorf("%v %v: %v, want %v", c.c.Op, c.c.Server.Addr, err, c.want)
			continue
		}
		if want := fmt.Sprintf("pool cache, server %v: ", c.c.Server.Addr); err.Error()[:len(want)] != want {
			t.Errorf("%v: %q does not name pool and server", c.c.Op, err)
		}
		if got.Version != c.ps.Version || len(got.Servers) != len(c.ps.Servers) {
			t.Errorf("%v: a refused change returned a changed spec", c.c.Op)
		}
	}
}

// owners returns the owner's address of n keys in table t's first pool.
func owners(t *Table, n int) []netip.AddrPort {
	p := t.Pools()[0]
	out := make([]netip.AddrPort, n)
	for i := range out {
		o := p.Owner(fmt.Appendf(nil, "key-%d", i))
		if o >= 0 {
			out[i] = p.Servers[o].Addr
		}
	}
	return out
}

// A replaced table routes every key as a table built from the new spec
// would, keeps the servers that stay with their state and the pool's
// counters; drain sends only the drained server's keys to their
// failover, and undrain returns exactly its keys.
func TestReplace(t *testing.T) {
	const keys = 5000
	tb := testTable(t, 0)
	p := tb.Pools()[0]
	p.Servers[1].SetMAC(serverMAC)
	p.Stats.Requests.Add(7)
	before := owners(tb, keys)

	ps, err := Apply(subnet, p.Spec(), Change{Op: AddServer, Server: ServerSpec{Addr: addr("10.20.0.14:11211"), Weight: 1, Site: siteB, SiteName: "man"}})
	if err != nil {
		t.Fatal(err)
	}
	nt, err := tb.Replace(ps)
	if err != nil {
		t.Fatal(err)
	}
	np := nt.Pools()[0]
	if np.Version != 2 || np.Servers[1] != p.Servers[1] || np.Stats != p.Stats || np.Stats.Requests.Load() != 7 {
		t.Fatalf("state did not carry over: version %d", np.Version)
	}
	if _, ok := np.Servers[1].MAC(); !ok || &nt.marks[0] != &tb.marks[0] {
		t.Fatal("MAC or client marks lost")
	}
	fresh, err := New(Spec{Self: siteA, Subnet: subnet, Pools: []PoolSpec{ps}})
	if err != nil {
		t.Fatal(err)
	}
	after, want := owners(nt, keys), owners(fresh, keys)
	moved := 0
	for i := range after {
		if after[i] != want[i] {
			t.Fatalf("key %d: %v, a fresh table says %v", i, after[i], want[i])
		}
		if after[i] != before[i] {
			moved++
			if after[i] != addr("10.20.0.14:11211") {
				t.Fatalf("key %d moved from %v to %v, not to the new server", i, before[i], after[i])
			}
		}
	}
	if moved < keys/8 || moved > keys*3/8 {
		t.Errorf("%d of %d keys moved to the fourth server", moved, keys)
	}

	drainAddr := addr("10.20.0.12:11211")
	ds, err := Apply(subnet, np.Spec(), Change{Op: Drain, Server: ServerSpec{Addr: drainAddr}})
	if err != nil {
		t.Fatal(err)
	}
	dt, err := nt.Replace(ds)
	if err != nil {
		t.Fatal(err)
	}
	drained := owners(dt, keys)
	for i := range drained {
		switch {
		case drained[i] == drainAddr:
			t.Fatalf("key %d still goes to the drained server", i)
		case after[i] != drainAddr && drained[i] != after[i]:
			t.Fatalf("key %d of a server not drained moved from %v to %v", i, after[i], drained[i])
		}
	}
	us, err := Apply(subnet, dt.Pools()[0].Spec(), Change{Op: Undrain, Server: ServerSpec{Addr: drainAddr}})
	if err != nil {
		t.Fatal(err)
	}
	ut, err := dt.Replace(us)
	if err != nil {
		t.Fatal(err)
	}
	if ut.Pools()[0].Version != 4 {
		t.Errorf("version %d after three changes, want 4", ut.Pools()[0].Version)
	}
	for i, o := range owners(ut, keys) {
		if o != after[i] {
			t.Fatalf("key %d: %v after undrain, %v before the drain", i, o, after[i])
		}
	}
	if _, err := tb.Replace(PoolSpec{Name: "nope"}); err == nil {
		t.Error("replacing an unknown pool succeeded")
	}
}
