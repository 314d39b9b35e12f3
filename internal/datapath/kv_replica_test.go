package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/router"
)

// TestReplicatedKeyRouting runs a pool whose one shard has a replica at
// site 2 (4 ms away) and one at site 3 (60 ms away) through three
// in-process data paths: a write from a host at site 1 reaches both and
// the client gets one reply; a read goes to site 2 only, and to site 3
// once site 2's replica is down.
func TestReplicatedKeyRouting(t *testing.T) {
	a, b, c := threeSites(t)
	r2, r3 := netip.MustParseAddrPort("10.20.0.12:11211"), netip.MustParseAddrPort("10.20.0.13:11211")
	var tabs []*router.Table
	for _, s := range []*site{a, b, c} {
		tb, err := router.New(router.Spec{Self: s.id, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []router.PoolSpec{{
			Name: "objects", VIP: kvVIP, Policy: replica.Predicted, Shards: []router.ShardSpec{{Weight: 1}},
			Servers: []router.ServerSpec{{Addr: r2, Site: 2, Shard: 0}, {Addr: r3, Site: 3, Shard: 0}}}}})
		if err != nil {
			t.Fatal(err)
		}
		s.eng.Port(testNet).KV.Store(tb)
		tabs = append(tabs, tb)
	}
	tabs[1].Pools()[0].Servers[0].SetMAC(kvSMAC)
	tabs[2].Pools()[0].Servers[1].SetMAC(kvSMAC)
	p := tabs[0].Pools()[0]
	p.Servers[0].SetPathRTT(4e6)
	p.Servers[1].SetPathRTT(60e6)
	vmac := router.VirtualMAC(kvVIP.Addr())

	a.dev.Inject(kvUDP(vmac[:], kvCMAC, kvClient, kvVIP, []byte("\x00\x07\x00\x00\x00\x01\x00\x00set k 0 0 1\r\nx\r\n")))
	for _, s := range []*site{b, c} {
		got := nextFrame(t, s)
		if src, dst := kvAddrs(t, got); src != kvClient || (dst != r2 && dst != r3) || !bytes.Equal(got[0:6], kvSMAC[:]) {
			t.Fatalf("write at site %d: %v -> %v", s.id, src, dst)
		}
	}
	// Both replicas answer; the client sees the first only.
	stored := []byte("\x00\x07\x00\x00\x00\x01\x00\x00STORED\r\n")
	c.dev.Inject(kvUDP(kvCMAC, kvSMAC[:], r3, kvClient, stored))
	if src, _ := kvAddrs(t, nextFrame(t, a)); src != kvVIP {
		t.Fatalf("reply from %v", src)
	}
	b.dev.Inject(kvUDP(kvCMAC, kvSMAC[:], r2, kvClient, stored))
	expectNone(t, a)
	if p.Stats.DupReplies.Load() != 1 || p.Stats.WritesReplicas.Load() != 2 {
		t.Fatalf("dup replies %d, write copies %d", p.Stats.DupReplies.Load(), p.Stats.WritesReplicas.Load())
	}

	get := func(id uint16) []byte {
		req := make([]byte, 8+24+1)
		memcache.FrameHeader{RequestID: id, Total: 1}.Put(req)
		req[8], req[9] = memcache.MagicRequest, memcache.OpGet
		binary.BigEndian.PutUint16(req[10:], 1)
		binary.BigEndian.PutUint32(req[16:], 1)
		req[32] = 'k'
		return kvUDP(vmac[:], kvCMAC, kvClient, kvVIP, req)
	}
	// Nothing is known of either replica's service time: the nearer path
	// wins; the other is sampled too, at most once, to learn it.
	a.dev.Inject(get(8))
	if _, dst := kvAddrs(t, nextFrame(t, b)); dst != r2 {
		t.Fatalf("read went to %v", dst)
	}
	explored := p.Stats.Explorations.Load()
	if explored == 1 {
		nextFrame(t, c)
	}
	if p.Stats.ReadsNearby.Load() != 1 {
		t.Errorf("nearby reads %d", p.Stats.ReadsNearby.Load())
	}
	p.Servers[0].SetDown(true)
	a.dev.Inject(get(9))
	if _, dst := kvAddrs(t, nextFrame(t, c)); dst != r3 {
		t.Fatalf("with site 2's replica down, the read went to %v", dst)
	}
	expectNone(t, b)
}
