package site

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// kvPool returns a pool named name with n servers.
func kvPool(name string, n int) wire.KVPool {
	p := wire.KVPool{Name: name, Network: 1, VIP: netip.MustParseAddrPort("198.19.255.250:11211")}
	for i := range n {
		p.Servers = append(p.Servers, wire.KVServer{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 0, byte(i + 1)}), 11211),
			Weight: 1, Site: name})
	}
	return p
}

// holds reports whether every core holds pool name at version v from
// origin.
func (h *net) holds(name string, v uint64, origin wire.SiteID) bool {
	for _, c := range h.cores {
		ps := c.KVPools()
		i := -1
		for j := range ps {
			if ps[j].Name == name {
				i = j
			}
		}
		if i < 0 || ps[i].Version != v || ps[i].Origin != origin {
			return false
		}
	}
	return true
}

// TestKVPoolFlooded: a pool set at one site reaches every site, sealed
// and in the clear, and each site's Ready hands it out once.
func TestKVPoolFlooded(t *testing.T) {
	for _, sealed := range []bool{true, false} {
		h := newNet(t, 4, sealed, 31)
		h.run(3 * time.Second)
		p, err := h.cores[2].SetKVPool(h.now, kvPool("cache", 3))
		if err != nil {
			t.Fatal(err)
		}
		if p.Version != 1 || p.Origin != wire.SiteIDFromName(name(2)) {
			t.Fatalf("stamped %d from %v, want 1 from s2", p.Version, p.Origin)
		}
		if rd := h.drain(2); len(rd.KVPools) != 1 {
			t.Errorf("the changing site's Ready holds %d pools, want 1", len(rd.KVPools))
		}
		h.run(100 * time.Millisecond)
		if !h.holds("cache", 1, p.Origin) {
			t.Fatalf("sealed %v: the pool did not reach every site in 100 ms", sealed)
		}
		p.Servers = p.Servers[:2]
		if _, err := h.cores[0].SetKVPool(h.now, p); err != nil {
			t.Fatal(err)
		}
		h.run(100 * time.Millisecond)
		if !h.holds("cache", 2, wire.SiteIDFromName(name(0))) {
			t.Fatalf("sealed %v: the change did not reach every site in 100 ms", sealed)
		}
		for i, c := range h.cores {
			if n := len(c.KVPools()[0].Servers); n != 2 {
				t.Errorf("%s holds %d servers, want 2", name(i), n)
			}
		}
	}
}

// TestKVPoolConcurrentChangesConverge: two sites change the same version
// at once; every site ends with the change of the higher origin ID.
func TestKVPoolConcurrentChangesConverge(t *testing.T) {
	h := newNet(t, 4, true, 32)
	h.run(3 * time.Second)
	base, _ := h.cores[0].SetKVPool(h.now, kvPool("cache", 3))
	h.run(200 * time.Millisecond)
	a, b := base.Clone(), base.Clone()
	a.Servers = a.Servers[:2]
	b.Servers = append(b.Servers, wire.KVServer{Addr: netip.MustParseAddrPort("198.19.0.9:11211"), Weight: 1, Site: "s3"})
	pa, _ := h.cores[1].SetKVPool(h.now, a)
	pb, _ := h.cores[3].SetKVPool(h.now, b)
	if pa.Version != 2 || pb.Version != 2 {
		t.Fatalf("versions %d and %d, want 2 and 2", pa.Version, pb.Version)
	}
	win := pa
	if pb.Origin > pa.Origin {
		win = pb
	}
	h.run(300 * time.Millisecond)
	if !h.holds("cache", 2, win.Origin) {
		t.Fatalf("the sites did not converge on the change of the higher origin")
	}
	for i, c := range h.cores {
		if n := len(c.KVPools()[0].Servers); n != len(win.Servers) {
			t.Errorf("%s holds %d servers, want %d", name(i), n, len(win.Servers))
		}
	}
}

// TestKVPoolRepairs: a site that missed a change (its datagrams dropped)
// gets it from the digests; a site that starts with an old record is
// answered with the new one at once.
func TestKVPoolRepairs(t *testing.T) {
	h := newNet(t, 3, false, 33)
	h.run(3 * time.Second)
	deaf := addr(2)
	h.drop = func(_ int, d Datagram) bool { return d.To == deaf && isKVMessage(d.Payload) }
	p, _ := h.cores[0].SetKVPool(h.now, kvPool("cache", 2))
	h.run(time.Second)
	if h.holds("cache", 1, p.Origin) {
		t.Fatalf("s2 holds the pool although every pool message to it was dropped")
	}
	h.drop = nil
	h.run(kvDigestInterval + time.Second)
	if !h.holds("cache", 1, p.Origin) {
		t.Fatalf("the digests did not repair s2 within %v", kvDigestInterval+time.Second)
	}
	if c := h.cores[2].Counters(); c["kv_pool_records_applied"] != 1 {
		t.Errorf("s2 applied %d records, want 1", c["kv_pool_records_applied"])
	}

	// s1 restarts holding version 1 while the others move to version 2.
	old := h.cores[1].KVPools()
	p.Servers = p.Servers[:1]
	p2, _ := h.cores[0].SetKVPool(h.now, p)
	h.drop = func(_ int, d Datagram) bool { return d.To == addr(1) && isKVMessage(d.Payload) }
	h.run(200 * time.Millisecond)
	h.drop = nil
	if err := h.cores[1].LoadKVPools(old); err != nil {
		t.Fatal(err)
	}
	// Its record goes out to a member it sees alive anew (here: forced by
	// clearing what it saw), and the answer corrects it at once.
	h.cores[1].kv.alive = map[wire.SiteID]bool{}
	h.run(300 * time.Millisecond)
	if !h.holds("cache", 2, p2.Origin) {
		t.Fatalf("a site holding an old record was not corrected within 300 ms")
	}
}

// TestKVPoolRefusals: a pool with a repeated server, none usable, or too
// many servers for one datagram is refused at SetKVPool; a pool message
// in the clear from an address that is not its sender's is dropped.
func TestKVPoolRefusals(t *testing.T) {
	h := newNet(t, 2, false, 34)
	h.run(2 * time.Second)
	c := h.cores[0]
	dup := kvPool("dup", 2)
	dup.Servers[1].Addr = dup.Servers[0].Addr
	drained := kvPool("drained", 1)
	drained.Servers[0].Flags = wire.KVServerJoining
	big := kvPool("big", 0)
	for i := range 200 {
		big.Servers = append(big.Servers, wire.KVServer{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 11211), Weight: 1, Site: "s"})
	}
	wide := kvPool("wide", wire.MaxKVReplicas+1) // one shard, one replica too many
	wide.Shards = []wire.KVShard{{Weight: 1}}
	lost := kvPool("lost", 2) // a server of a shard that does not exist
	lost.Shards, lost.Servers[1].Shard = []wire.KVShard{{Weight: 1}}, 1
	for _, p := range []wire.KVPool{dup, drained, big, wide, lost} {
		if _, err := c.SetKVPool(h.now, p); !errors.Is(err, ErrKVPool) {
			t.Errorf("pool %s: %v, want ErrKVPool", p.Name, err)
		}
	}
	p := kvPool("cache", 1)
	p.Origin, p.Version = wire.SiteIDFromName(name(1)), 5
	msg, _ := wire.AppendKVPool(nil, wire.SiteIDFromName(name(1)), &p)
	c.Receive(h.now, netip.MustParseAddrPort("198.18.0.99:4789"), msg)
	if len(c.KVPools()) != 0 || c.Counters()["kv_pool_records_refused"] != 1 {
		t.Errorf("a pool in the clear from a stranger's address was taken: %v", c.KVPools())
	}
	c.Receive(h.now, addr(1), msg)
	if len(c.KVPools()) != 1 {
		t.Errorf("a pool in the clear from its sender's address was not taken")
	}
}
