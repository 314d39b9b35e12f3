package router

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/wire"
)

const ms = int64(1e6)

var (
	repA = netip.MustParseAddrPort("10.20.0.11:11211") // shard 0 at A (this site): the disk
	repB = netip.MustParseAddrPort("10.20.0.12:11211") // shard 0 at B: nearby memory
	repC = netip.MustParseAddrPort("10.20.0.13:11211") // shard 0 at C: remote memory
)

// repTable is a pool of two shards seen from site A: shard 0 with
// replicas at A, B and C, shard 1 with one server at B.
func repTable(t testing.TB, policy replica.Policy) *Table {
	t.Helper()
	tb, err := New(Spec{Self: siteA, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []PoolSpec{{
		Name: "objects", VIP: vip, Hash: ring.Ketama, Policy: policy, Hedge: policy == replica.Predicted,
		NearSites: []wire.SiteID{siteB},
		Shards:    []ShardSpec{{Name: "s0", Weight: 1}, {Weight: 1}},
		Servers: []ServerSpec{
			{Addr: repA, Site: siteA, Shard: 0, Tier: "disk"},
			{Addr: repB, Site: siteB, Shard: 0, Tier: "memory"},
			{Addr: repC, Site: siteC, Shard: 0, Tier: "memory"},
			{Addr: netip.MustParseAddrPort("10.20.0.14:11211"), Site: siteB, Shard: 1},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := tb.pools[0]
	p.Servers[0].SetMAC(serverMAC)
	p.Servers[1].SetPathRTT(4 * ms)
	p.Servers[2].SetPathRTT(60 * ms)
	p.Servers[3].SetPathRTT(4 * ms)
	return tb
}

// keyOnShard returns the n-th key the ring places on shard i.
func keyOnShard(t testing.TB, tb *Table, i, n int) string {
	t.Helper()
	for k := 0; k < 100000; k++ {
		key := fmt.Sprintf("obj-%d", k)
		if tb.pools[0].RingOwner([]byte(key)) == i {
			if n == 0 {
				return key
			}
			n--
		}
	}
	t.Fatalf("no key on shard %d", i)
	return ""
}

// clientReq is a request from the test client with request id id.
func clientReq(id uint16, req []byte) []byte {
	vmac := VirtualMAC(vip.Addr())
	return udpFrame(vmac[:], clientMAC, client, vip, datagram(id, req))
}

// sent is one copy of a request as the router emitted it.
type sent struct {
	id     uint16
	server netip.AddrPort
	src    netip.AddrPort // the source the server sees (VIP:slot for a local one)
	local  bool
}

func copies(t *testing.T, outs []Output) []sent {
	t.Helper()
	var out []sent
	for _, o := range outs {
		src, dst, pl := parsed(t, o.Frame)
		out = append(out, sent{id: binary.BigEndian.Uint16(pl), server: dst, src: src, local: o.Local})
	}
	return out
}

// answer delivers server s's reply datagrams (each of size bytes, total
// of them) to the copy c at time now and reports how many reached the
// client.
func answer(t *testing.T, tb *Table, w *Worker, in *Inbound, c sent, id uint16, total, size int, now int64) int {
	t.Helper()
	vmac := VirtualMAC(vip.Addr())
	n := 0
	for seq := 0; seq < total; seq++ {
		pl := make([]byte, 8+size)
		memcache.FrameHeader{RequestID: id, Seq: uint16(seq), Total: uint16(total)}.Put(pl)
		if c.local {
			_, outs := w.Egress(tb, udpFrame(vmac[:], serverMAC[:], c.server, c.src, pl), now)
			for _, o := range outs {
				if _, dst, _ := parsed(t, o.Frame); dst == client {
					n++
				}
			}
			continue
		}
		b := udpFrame(clientMAC, serverMAC[:], c.server, client, pl)
		if in.Deliver(tb, b, now) {
			if src, _, _ := parsed(t, b); src != vip {
				t.Fatalf("forwarded reply from %v, not the VIP", src)
			}
			n++
		}
	}
	return n
}

// A write goes to every replica; the client sees the first reply, the
// others are dropped at its gateway.
func TestReplicatedWrite(t *testing.T) {
	tb := repTable(t, replica.Predicted)
	p := tb.pools[0]
	w, in := NewWorker(), &Inbound{}
	key := keyOnShard(t, tb, 0, 0)
	_, outs := w.Egress(tb, clientReq(7, []byte("set "+key+" 0 0 5\r\nhello\r\n")), 1)
	cs := copies(t, outs)
	var got []netip.AddrPort
	for _, c := range cs {
		got = append(got, c.server)
	}
	slices.SortFunc(got, func(a, b netip.AddrPort) int { return a.Compare(b) })
	if !slices.Equal(got, []netip.AddrPort{repA, repB, repC}) {
		t.Fatalf("write went to %v, want every replica", got)
	}
	byServer := map[netip.AddrPort]sent{}
	for _, c := range cs {
		byServer[c.server] = c
	}
	// B answers first: forwarded; A and C later: dropped.
	if n := answer(t, tb, w, in, byServer[repB], 7, 1, 8, 10*ms); n != 1 {
		t.Errorf("first reply: %d datagrams forwarded", n)
	}
	if n := answer(t, tb, w, in, byServer[repA], 7, 1, 8, 11*ms) + answer(t, tb, w, in, byServer[repC], 7, 1, 8, 70*ms); n != 0 {
		t.Errorf("later replies: %d forwarded", n)
	}
	if p.Stats.DupReplies.Load() != 2 || p.Stats.WritesReplicas.Load() != 3 {
		t.Errorf("dup replies %d, write copies %d", p.Stats.DupReplies.Load(), p.Stats.WritesReplicas.Load())
	}
	// A dead replica gets no copy; the write still goes to the others.
	p.Servers[2].SetDown(true)
	_, outs = w.Egress(tb, clientReq(8, []byte("set "+key+" 0 0 5\r\nhello\r\n")), 100*ms)
	if cs := copies(t, outs); len(cs) != 2 || slices.ContainsFunc(cs, func(c sent) bool { return c.server == repC }) {
		t.Errorf("write with C down went to %+v", cs)
	}
	// A key of the one-server shard: one copy, no soft state needed.
	_, outs = w.Egress(tb, clientReq(9, []byte("set "+keyOnShard(t, tb, 1, 0)+" 0 0 1\r\nx\r\n")), 101*ms)
	if len(outs) != 1 {
		t.Errorf("write to a one-replica shard: %d copies", len(outs))
	}
}

// readLoop sends reads of key every 10 ms for d, each answered by every
// replica it went to after that replica's path RTT plus svc, and returns
// the replicas the reads went to first (by server address).
func readLoop(t *testing.T, tb *Table, w *Worker, in *Inbound, key string, start, d int64, svc map[netip.AddrPort]int64, size int) (map[netip.AddrPort]int, int64) {
	t.Helper()
	p := tb.pools[0]
	primary := map[netip.AddrPort]int{}
	id := uint16(100)
	now := start
	for ; now < start+d; now += 10 * ms {
		id++
		_, outs := w.Egress(tb, clientReq(id, binaryGet(key)), now)
		cs := copies(t, outs)
		var reqCopies []sent
		for _, c := range cs {
			if c.id == id {
				reqCopies = append(reqCopies, c)
			}
		}
		if len(reqCopies) == 0 {
			t.Fatalf("read at %d ms went nowhere (outs %d)", now/ms, len(outs))
		}
		primary[reqCopies[len(reqCopies)-1].server]++ // the primary is the in-place copy, emitted last
		for _, c := range reqCopies {
			s := p.ServerAt(c.server)
			dgms := max(1, size/1400)
			answer(t, tb, w, in, c, id, dgms, size/dgms, now+s.PathRTT()+svc[c.server])
		}
	}
	return primary, now
}

// Reads go to the replica with the lowest predicted fetch time, learnt
// from the replies; when it dies they move at once.
func TestReplicatedReadChoice(t *testing.T) {
	tb := repTable(t, replica.Predicted)
	p := tb.pools[0]
	w, in := NewWorker(), &Inbound{}
	key := keyOnShard(t, tb, 0, 0)
	svc := map[netip.AddrPort]int64{repA: 20 * ms, repB: ms / 10, repC: ms / 10}
	// The disk (20 ms) is slower than B (4 ms path + 0.1 ms).
	got, now := readLoop(t, tb, w, in, key, 1, 3e9, svc, 100)
	if got[repB] < 250 {
		t.Errorf("reads by first replica %v: want most at B", got)
	}
	why := p.Why([]byte(key), now)
	if why.Shard != 0 || len(why.Replicas) != 3 || !why.Replicas[1].Chosen {
		t.Fatalf("why %+v", why)
	}
	b := why.Replicas[1].Prediction
	if b.RTT != 4*ms || b.Service < ms/20 || b.Service > ms/5 || why.Replicas[0].Prediction.Service < 15*ms {
		t.Errorf("predictions: B %+v, A %+v", b, why.Replicas[0].Prediction)
	}
	if !why.SizeKnown || why.Size < 100 || why.Size > 200 {
		t.Errorf("size %d known %v", why.Size, why.SizeKnown)
	}
	if p.Stats.Explorations.Load() == 0 || p.Stats.ReadsNearby.Load() < 250 {
		t.Errorf("explorations %d, nearby reads %d", p.Stats.Explorations.Load(), p.Stats.ReadsNearby.Load())
	}
	if e := p.Stats.Explorations.Load(); float64(e) > 10*3+0.02*300+4 {
		t.Errorf("%d explorations in 3 s of 300 reads: over the budget", e)
	}
	// B dies: the next read goes elsewhere.
	p.Servers[1].SetDown(true)
	got, _ = readLoop(t, tb, w, in, key, now, 100*ms, svc, 100)
	if got[repB] != 0 || got[repA] == 0 {
		t.Errorf("with B down, reads went to %v", got)
	}
	// The disk gets fast: reads come home within 2 s.
	p.Servers[1].SetDown(false)
	svc[repA] = ms / 2
	now += 100 * ms
	_, now = readLoop(t, tb, w, in, key, now, 2e9, svc, 100)
	got, _ = readLoop(t, tb, w, in, key, now, 500*ms, svc, 100)
	if got[repA] != 50 {
		t.Errorf("2 s after the local disk got fast, reads went to %v", got)
	}
	if p.Stats.DupReplies.Load() == 0 {
		t.Error("no duplicate reply dropped although reads were explored")
	}
}

// A read still unanswered after its replica's p95 is hedged (when the
// next frame of the pool comes through), and the hedge's reply wins.
func TestHedge(t *testing.T) {
	tb := repTable(t, replica.Predicted)
	p := tb.pools[0]
	w, in := NewWorker(), &Inbound{}
	key := keyOnShard(t, tb, 0, 0)
	svc := map[netip.AddrPort]int64{repA: 20 * ms, repB: ms / 10, repC: ms / 10}
	_, now := readLoop(t, tb, w, in, key, 1, 2e9, svc, 100)
	// Reads to the slow disk while it was being learnt were hedged; their
	// hedge copies were never answered: let them expire.
	now += PendingTTL + 1
	for i := 0; i < PendingSlots/expireBatch; i++ {
		p.Expire(now)
	}
	hedges := p.Stats.HedgesSent.Load()
	_, outs := w.Egress(tb, clientReq(9000, binaryGet(key)), now)
	cs := copies(t, outs)
	primary := cs[len(cs)-1]
	if primary.server != repB {
		t.Fatalf("read went to %v first", primary.server)
	}
	wait, ok := p.Shards[0].chooser.HedgeAfter(1, 100)
	if !ok {
		t.Fatal("no hedge delay")
	}
	// Before the p95: nothing; after it, the next frame of the pool
	// (another client's read of shard 1) releases the hedge.
	other := keyOnShard(t, tb, 1, 0)
	if _, outs = w.Egress(tb, clientReq(9001, binaryGet(other)), now+wait-1); len(outs) != 1 {
		t.Fatalf("hedged early: %d outputs", len(outs))
	}
	_, outs = w.Egress(tb, clientReq(9002, binaryGet(other)), now+wait+1)
	if len(outs) != 2 {
		t.Fatalf("no hedge: %d outputs", len(outs))
	}
	hc := copies(t, outs[:1])[0]
	// The next best not yet asked: the local disk, unless the read was
	// also sent there to refresh its estimate.
	want := repA
	if slices.ContainsFunc(cs, func(c sent) bool { return c.server == repA }) {
		want = repC
	}
	if hc.server != want || p.Stats.HedgesSent.Load() != hedges+1 {
		t.Fatalf("hedged to %v (sent %d), want %v (copies %+v)", hc.server, p.Stats.HedgesSent.Load(), want, cs)
	}
	if n := answer(t, tb, w, in, hc, 9000, 1, 100, now+wait+2*ms); n != 1 {
		t.Fatal("hedge's reply not forwarded")
	}
	if n := answer(t, tb, w, in, primary, 9000, 1, 100, now+wait+3*ms); n != 0 {
		t.Fatal("late primary reply forwarded too")
	}
	if p.Stats.HedgesWon.Load() != 1 {
		t.Errorf("hedges won %d", p.Stats.HedgesWon.Load())
	}
	// A read answered in time is not hedged.
	_, outs = w.Egress(tb, clientReq(9003, binaryGet(key)), now+10*ms)
	cs = copies(t, outs)
	answer(t, tb, w, in, cs[len(cs)-1], 9003, 1, 100, now+15*ms)
	w.Egress(tb, clientReq(9004, binaryGet(other)), now+10*ms+5*wait)
	if p.Stats.HedgesSent.Load() != hedges+1 {
		t.Errorf("an answered read was hedged")
	}
}

// A static policy sends every read to the same replica and never
// explores or hedges.
func TestStaticPolicyRouting(t *testing.T) {
	for _, c := range []struct {
		policy replica.Policy
		want   netip.AddrPort
	}{{replica.LocalFirst, repA}, {replica.NearestRTT, repA}} {
		tb := repTable(t, c.policy)
		w, in := NewWorker(), &Inbound{}
		key := keyOnShard(t, tb, 0, 0)
		svc := map[netip.AddrPort]int64{repA: 20 * ms, repB: ms / 10, repC: ms / 10}
		got, _ := readLoop(t, tb, w, in, key, 1, 1e9, svc, 100)
		p := tb.pools[0]
		if got[c.want] != 100 || p.Stats.Explorations.Load() != 0 || p.Stats.HedgesSent.Load() != 0 || p.Stats.ReadsLocal.Load() != 100 {
			t.Errorf("%v: reads %v, explorations %d, hedges %d", c.policy, got, p.Stats.Explorations.Load(), p.Stats.HedgesSent.Load())
		}
	}
	tb := repTable(t, replica.StaticZone)
	tb.pools[0].Servers[0].SetDown(true)
	w, in := NewWorker(), &Inbound{}
	got, _ := readLoop(t, tb, w, in, keyOnShard(t, tb, 0, 0), 1, 1e9, nil, 100)
	if got[repB] != 100 || tb.pools[0].Stats.ReadsNearby.Load() != 100 {
		t.Errorf("static-zone with the local replica down: %v", got)
	}
}

// With every replica of a shard down, its keys go to the failover, except
// one read when a replica's readmission trial is armed: that read goes
// to the replica on trial, as a server of its own would take it.
func TestTrialWithTheShardDown(t *testing.T) {
	tb := repTable(t, replica.LocalFirst)
	p := tb.pools[0]
	for j := 0; j < 3; j++ {
		p.Servers[j].SetDown(true)
	}
	w := NewWorker()
	key := keyOnShard(t, tb, 0, 0)
	read := func(id uint16) []sent {
		_, outs := w.Egress(tb, clientReq(id, []byte("get "+key+"\r\n")), int64(id)*ms)
		return copies(t, outs)
	}
	failover := p.Servers[3].Addr
	if got := read(1); len(got) != 1 || got[0].server != failover {
		t.Fatalf("shard down, no trial: %+v", got)
	}
	p.Servers[2].ArmTrial()
	if got := read(2); len(got) != 1 || got[0].server != repC || !p.Servers[2].TrialTaken() {
		t.Fatalf("replica C on trial: %+v", got)
	}
	if got := read(3); len(got) != 1 || got[0].server != failover {
		t.Fatalf("after the trial request: %+v", got)
	}
}

// Requests never answered are given up after PendingTTL, so that they
// stop counting as outstanding; a full table evicts and counts.
func TestPendingExpiry(t *testing.T) {
	tb := repTable(t, replica.LocalFirst)
	p := tb.pools[0]
	w := NewWorker()
	key := keyOnShard(t, tb, 0, 0)
	w.Egress(tb, clientReq(1, binaryGet(key)), 1)
	if o := p.Shards[0].chooser.Replicas[0].Outstanding(); o != 1 {
		t.Fatalf("outstanding %d", o)
	}
	for i := 0; i < PendingSlots/expireBatch; i++ {
		p.Expire(1 + PendingTTL + 1)
	}
	if o := p.Shards[0].chooser.Replicas[0].Outstanding(); o != 0 || p.Stats.PendingExpired.Load() != 1 {
		t.Errorf("after expiry: outstanding %d, expired %d", o, p.Stats.PendingExpired.Load())
	}
	// More requests in flight than slots: evictions counted, outstanding
	// bounded by the table.
	for i := 0; i < 3*PendingSlots; i++ {
		c := netip.AddrPortFrom(client.Addr(), uint16(1000+i))
		vmac := VirtualMAC(vip.Addr())
		w.Egress(tb, udpFrame(vmac[:], clientMAC, c, vip, datagram(uint16(i), binaryGet(key))), int64(10+i))
	}
	if p.Stats.PendingEvicted.Load() == 0 || p.Shards[0].chooser.Replicas[0].Outstanding() > PendingSlots {
		t.Errorf("evicted %d, outstanding %d", p.Stats.PendingEvicted.Load(), p.Shards[0].chooser.Replicas[0].Outstanding())
	}
}

// A pool of one-replica shards places keys exactly as the same pool of
// servers, and a shard named places by its name.
func TestShardPlacement(t *testing.T) {
	servers := []ServerSpec{{Addr: repA, Weight: 1, Site: siteA}, {Addr: repB, Weight: 1, Site: siteB}, {Addr: repC, Weight: 1, Site: siteC}}
	plain, _ := New(Spec{Self: siteA, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []PoolSpec{{Name: "a", VIP: vip, Servers: servers}}})
	sharded := slices.Clone(servers)
	for i := range sharded {
		sharded[i].Shard = i
	}
	sh, err := New(Spec{Self: siteA, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []PoolSpec{{Name: "a", VIP: vip, Servers: sharded,
		Shards: []ShardSpec{{Weight: 1}, {Weight: 1}, {Weight: 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if sh.pools[0].Replicated() {
		t.Error("a pool of one-replica shards has replica state")
	}
	for i := 0; i < 2000; i++ {
		k := []byte(fmt.Sprint("k", i))
		if plain.pools[0].RingOwner(k) != sh.pools[0].RingOwner(k) {
			t.Fatalf("key %s placed differently", k)
		}
	}
	_, err = New(Spec{Self: siteA, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []PoolSpec{{Name: "a", VIP: vip, Servers: sharded,
		Shards: []ShardSpec{{Weight: 1}, {Weight: 1}, {Weight: 1}, {Weight: 1}}}}})
	if err == nil {
		t.Error("a shard without replica accepted")
	}
	// Run-time changes are refused for replicated pools.
	if _, err := Apply(netip.MustParsePrefix("10.20.0.0/24"), repTable(t, 0).pools[0].Spec(), Change{Op: Drain, Server: ServerSpec{Addr: repA}}); err == nil {
		t.Error("a change to a replicated pool accepted")
	}
}

// The replicated read path allocates nothing per packet.
func TestReplicatedNoAllocs(t *testing.T) {
	tb := repTable(t, replica.Predicted)
	w, in := NewWorker(), &Inbound{}
	key := keyOnShard(t, tb, 0, 0)
	tmpl := clientReq(5, binaryGet(key))
	b := make([]byte, 2048)
	reply := make([]byte, 0, 2048)
	now := int64(1)
	id := uint16(0)
	allocs := testing.AllocsPerRun(500, func() {
		now += ms
		id++
		n := copy(b, tmpl)
		binary.BigEndian.PutUint16(b[42:], id)
		// Fix the UDP checksum for the new id: zero means none.
		binary.BigEndian.PutUint16(b[40:], 0)
		_, outs := w.Egress(tb, b[:n], now)
		for _, o := range outs {
			if o.Local {
				continue
			}
			var f frame.Frame
			if frame.Parse(o.Frame, &f) != nil {
				continue
			}
			ip := f.IPv4(o.Frame)
			var srv [4]byte
			copy(srv[:], ip.Dst())
			sport := binary.BigEndian.Uint16(o.Frame[f.L4+2:])
			reply = append(reply[:0], o.Frame...)
			copy(reply[0:6], clientMAC)
			// Swap into a reply from the server to the client.
			copy(reply[f.L3+12:], srv[:])
			c4 := client.Addr().As4()
			copy(reply[f.L3+16:], c4[:])
			binary.BigEndian.PutUint16(reply[f.L4:], sport)
			binary.BigEndian.PutUint16(reply[f.L4+2:], client.Port())
			binary.BigEndian.PutUint16(reply[f.L4+6:], 0)
			in.Deliver(tb, reply, now+4*ms)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per read", allocs)
	}
	if tb.pools[0].Stats.Replies.Load() == 0 {
		t.Fatal("no reply seen: the test measured nothing")
	}
}

var _ = bytes.Equal

// Two pools over the same servers (one per policy, as the locality
// experiment runs them side by side): a reply goes back from the virtual
// address the client asked, and only once.
func TestPoolsShareServers(t *testing.T) {
	vip2 := netip.MustParseAddrPort("10.20.0.251:11211")
	pool := func(name string, v netip.AddrPort, pol replica.Policy) PoolSpec {
		return PoolSpec{Name: name, VIP: v, Policy: pol, Shards: []ShardSpec{{Weight: 1}}, Servers: []ServerSpec{
			{Addr: repA, Site: siteA}, {Addr: repB, Site: siteB}, {Addr: repC, Site: siteC}}}
	}
	tb, err := New(Spec{Self: siteA, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []PoolSpec{
		pool("lf", vip, replica.LocalFirst), pool("pr", vip2, replica.Predicted)}})
	if err != nil {
		t.Fatal(err)
	}
	w, in := NewWorker(), &Inbound{}
	vmac := VirtualMAC(vip2.Addr())
	_, outs := w.Egress(tb, udpFrame(vmac[:], clientMAC, client, vip2, datagram(3, []byte("set k 0 0 1\r\nx\r\n"))), 1)
	n := 0
	for _, c := range copies(t, outs) {
		if c.local {
			continue // A's MAC is unknown: no local copy
		}
		b := udpFrame(clientMAC, serverMAC[:], c.server, client, datagram(3, []byte("STORED\r\n")))
		if in.Deliver(tb, b, 5*ms) {
			n++
			if src, _, _ := parsed(t, b); src != vip2 {
				t.Errorf("reply from %v, want the asked pool's %v", src, vip2)
			}
		}
	}
	if n != 1 || len(outs) != 2 {
		t.Errorf("%d of %d replies forwarded, want 1", n, len(outs))
	}
}

func BenchmarkEgressReplicatedGet(b *testing.B) {
	tb := repTable(b, replica.Predicted)
	w := NewWorker()
	tmpl := clientReq(1, binaryGet(keyOnShard(b, tb, 0, 0)))
	buf := make([]byte, len(tmpl))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		copy(buf, tmpl)
		binary.BigEndian.PutUint16(buf[42:], uint16(i))
		w.Egress(tb, buf, int64(i)*10000) // 100,000 a second: under the rate limit
	}
	if st := tb.pools[0].Stats; st.DropRate.Load() != 0 || st.Requests.Load() == 0 {
		b.Fatalf("%d requests routed, %d over the rate limit: the benchmark measured drops", st.Requests.Load(), st.DropRate.Load())
	}
}

// A client that reuses a request id while another replica's reply to its
// earlier request is still on its way does not get that late reply for
// its new request.
func TestLateReplyUnderReusedID(t *testing.T) {
	tb := repTable(t, replica.LocalFirst)
	p := tb.pools[0]
	p.Servers[0].SetDown(true) // reads go to B (nearest), C never asked
	w, in := NewWorker(), &Inbound{}
	key := keyOnShard(t, tb, 0, 0)
	_, outs := w.Egress(tb, clientReq(0, binaryGet(key)), 1)
	if cs := copies(t, outs); len(cs) != 1 || cs[0].server != repB {
		t.Fatalf("read went to %+v", cs)
	}
	// A reply from C under the same id (say to a write of long ago) is
	// not this read's.
	if n := answer(t, tb, w, in, sent{server: repC}, 0, 1, 10, 2*ms); n != 0 {
		t.Error("a reply from a replica the request did not go to was forwarded")
	}
	if n := answer(t, tb, w, in, sent{server: repB}, 0, 1, 10, 3*ms); n != 1 {
		t.Error("the asked replica's reply was not forwarded")
	}
}

// A replica of this site whose MAC is not known yet takes no reads (they
// would be dropped): they go to another replica, and the agent is asked
// to learn the MAC.
func TestLocalReplicaWithoutMAC(t *testing.T) {
	tb := repTable(t, replica.LocalFirst)
	p := tb.pools[0]
	p.Servers[0].mac.Store(0) // unknown
	w := NewWorker()
	_, outs := w.Egress(tb, clientReq(1, binaryGet(keyOnShard(t, tb, 0, 0))), 1)
	if cs := copies(t, outs); len(cs) != 1 || cs[0].server != repB || !p.Servers[0].TakeNeedARP() {
		t.Errorf("read went to %+v", cs)
	}
}

// Many hedges due at once are sent a few per frame, so that the frame's
// own request still goes out.
func TestHedgesPerFrame(t *testing.T) {
	tb := repTable(t, replica.Predicted)
	p := tb.pools[0]
	w, in := NewWorker(), &Inbound{}
	key := keyOnShard(t, tb, 0, 0)
	svc := map[netip.AddrPort]int64{repA: 20 * ms, repB: ms / 10, repC: ms / 10}
	_, now := readLoop(t, tb, w, in, key, 1, 2e9, svc, 100)
	p.rep.budget = replica.NewBudget(replica.Params{HedgeBurst: 100, HedgeShare: 1, ExploreBurst: 0})
	for _, sh := range p.Shards {
		if sh.chooser != nil {
			sh.chooser.Budget = p.rep.budget
		}
	}
	for i := 0; i < maxHedges; i++ { // unanswered reads, all due together
		w.Egress(tb, clientReq(uint16(20000+i), binaryGet(key)), now)
	}
	other := keyOnShard(t, tb, 1, 0)
	sentBefore := p.Stats.HedgesSent.Load()
	_, outs := w.Egress(tb, clientReq(30000, binaryGet(other)), now+time100ms)
	cs := copies(t, outs)
	if len(cs) != hedgesPerFrame+1 || cs[len(cs)-1].id != 30000 {
		t.Fatalf("%d outputs, the last for id %d; want %d hedges and the request", len(cs), cs[len(cs)-1].id, hedgesPerFrame)
	}
	w.Egress(tb, clientReq(30001, binaryGet(other)), now+time100ms+1)
	if got := p.Stats.HedgesSent.Load() - sentBefore; got != 2*hedgesPerFrame {
		t.Errorf("%d hedges after two frames, want %d", got, 2*hedgesPerFrame)
	}
}

const time100ms = 100 * ms
