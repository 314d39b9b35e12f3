package tcpterm

import (
	"net/netip"
	"testing"

	"github.com/detour-overlay/detour/internal/kv/proxy"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/kv/router"
)

// TestReplyTimer: two reads pipelined on one connection, the first
// reply whole and the second's start in one socket read, the second's
// rest in the next: both replies began 5 ms after they were written, so
// the chooser gets two 5 ms service times, learns the key's size, and
// holds nothing outstanding; a failed connection gives its reads up.
func TestReplyTimer(t *testing.T) {
	tb, err := router.New(router.Spec{Self: self, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []router.PoolSpec{{
		Name: "objects", VIP: vip, Hash: ring.Ketama, Policy: replica.Predicted,
		Shards:  []router.ShardSpec{{Weight: 1}},
		Servers: []router.ServerSpec{{Addr: servers[0], Site: self, Shard: 0}, {Addr: servers[1], Site: self, Shard: 0}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	p := tb.Pools()[0]
	for _, s := range p.Servers {
		s.SetMAC([6]byte{2, 0, 0, 0, 0, 1})
	}
	const ms = int64(1e6)
	t0 := int64(1e9)
	sess := &proxy.Session{}
	var u proxy.Upstream
	var rt replyTimer
	for _, req := range []string{"get k\r\n", "get j\r\n"} {
		snd := proxy.Send{Server: 0, Read: true, Buf: []byte(req), Token: proxy.Token{S: sess}}
		u.Append(nil, snd)
		rt.push(readMeta(p, snd, t0))
	}
	recv := func(now int64, data string) {
		rt.read(now)
		dels, err := u.Feed([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dels {
			rt.piece(d, now)
		}
		rt.settle(u.Buffered(), now)
	}
	recv(t0+5*ms, "VALUE k 0 3\r\nabc\r\nEND\r\nVALUE j 0 3\r\n")
	recv(t0+9*ms, "xyz\r\nEND\r\n")
	w := p.Why([]byte("k"), t0+10*ms)
	st := w.Replicas[0]
	if !w.SizeKnown || w.Size != len("VALUE k 0 3\r\nabc\r\nEND\r\n") || st.Class.Samples != 2 || st.Class.Median != 5*ms || st.Outstanding != 0 {
		t.Fatalf("why %+v, replica 0 %+v", w, st)
	}
	snd := proxy.Send{Server: 0, Read: true, Buf: []byte("get k\r\n"), Token: proxy.Token{S: sess}}
	rt.push(readMeta(p, snd, t0+20*ms))
	if w := p.Why([]byte("k"), t0+20*ms); w.Replicas[0].Outstanding != 1 {
		t.Fatalf("outstanding %d, want 1", w.Replicas[0].Outstanding)
	}
	rt.abandon()
	if w := p.Why([]byte("k"), t0+20*ms); w.Replicas[0].Outstanding != 0 {
		t.Fatalf("outstanding %d after abandon, want 0", w.Replicas[0].Outstanding)
	}
}
