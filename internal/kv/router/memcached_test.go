package router

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/kv/kvtest"
	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/wire"
)

// TestReplicasWithMemcached routes reads of a pool whose shard has three
// replicas, each a real memcached on loopback standing in for a server
// at another site, through the router and back: the frames the router
// emits are sent to the memcached their destination maps to, its reply
// datagrams (several for a large value) are wrapped as frames from the
// server and given to the client side's Inbound. The client must get
// exactly one whole reply per read, with the value set, and the router
// must learn each value's size, the service times and the path
// throughput from the real datagrams.
func TestReplicasWithMemcached(t *testing.T) {
	kvtest.Need(t, "memcached")
	siteD := wire.SiteIDFromName("dub")
	addrs := []netip.AddrPort{repA, repB, repC}
	real := map[netip.AddrPort]*net.UDPAddr{}
	for _, a := range addrs {
		port := kvtest.FreePort(t, "127.0.0.1")
		kvtest.Memcached(t, "127.0.0.1", port, true)
		real[a] = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	}
	tb, err := New(Spec{Self: siteD, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []PoolSpec{{
		Name: "objects", VIP: vip, Policy: replica.Predicted, Hedge: true, Shards: []ShardSpec{{Weight: 1}},
		Servers: []ServerSpec{{Addr: repA, Site: siteA}, {Addr: repB, Site: siteB}, {Addr: repC, Site: siteC}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := tb.pools[0]
	for i, rtt := range []int64{2 * ms, 5 * ms, 40 * ms} {
		p.Servers[i].SetPathRTT(rtt)
	}
	// The values, on every replica, set over TCP.
	sizes := []int{100, 5000, 100000}
	for i, n := range sizes {
		val := bytes.Repeat([]byte{byte('a' + i)}, n)
		for _, r := range real {
			c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "set v%d 0 0 %d\r\n%s\r\n", i, n, val)
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 64)
			if k, err := c.Read(buf); err != nil || string(buf[:k]) != "STORED\r\n" {
				t.Fatalf("set: %q %v", buf[:k], err)
			}
			c.Close()
		}
	}
	// One socket per replica (a reply of 72 datagrams fills most of a
	// socket's default buffer), read by its own goroutine; the test
	// hands the datagrams to the router in the order they came.
	type dgram struct {
		srv netip.AddrPort
		b   []byte
	}
	arrived := make(chan dgram, 4096)
	conns := map[netip.AddrPort]*net.UDPConn{}
	for _, a := range addrs {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadBuffer(1 << 20)
		conns[a] = c
		defer c.Close()
		go func(a netip.AddrPort, c *net.UDPConn) {
			for {
				b := make([]byte, 2048)
				n, err := c.Read(b)
				if err != nil {
					return
				}
				arrived <- dgram{a, b[:n]}
			}
		}(a, c)
	}
	w, in := NewWorker(), &Inbound{}
	start := time.Now()
	mono := func() int64 { return int64(time.Since(start)) + 1 }
	for round := 0; round < 30; round++ {
		for i, n := range sizes {
			id := uint16(round*len(sizes) + i + 1)
			_, outs := w.Egress(tb, clientReq(id, []byte(fmt.Sprintf("get v%d\r\n", i))), mono())
			sentTo := map[netip.AddrPort]bool{}
			for _, o := range outs {
				_, dst, pl := parsed(t, o.Frame)
				if binary.BigEndian.Uint16(pl) != id {
					continue // a hedge of an earlier read
				}
				sentTo[dst] = true
				if _, err := conns[dst].WriteToUDP(pl, real[dst]); err != nil {
					t.Fatal(err)
				}
			}
			// Collect every datagram of every reply, give each to the
			// client's gateway as it arrives, and keep what reaches the
			// client.
			var got [][]byte
			total := -1
			// Until the client has its whole reply, and 30 ms more for the
			// other replicas' (dropped) datagrams.
			timer := time.NewTimer(time.Second)
		collect:
			for {
				select {
				case d := <-arrived:
					b := udpFrame(clientMAC, serverMAC[:], d.srv, client, d.b)
					if in.Deliver(tb, b, mono()) {
						_, _, pl := parsed(t, b)
						got = append(got, append([]byte(nil), pl...))
						total = int(binary.BigEndian.Uint16(pl[4:]))
						if len(got) == total {
							timer.Reset(30 * time.Millisecond)
						}
					}
				case <-timer.C:
					break collect
				}
			}
			if len(sentTo) == 0 || total < 1 || len(got) != total {
				t.Fatalf("read of %d bytes sent to %v: %d datagrams reached the client, total %d", n, sentTo, len(got), total)
			}
			var reply []byte
			seen := map[uint16]bool{}
			for seq := 0; seq < total; seq++ {
				for _, d := range got {
					if binary.BigEndian.Uint16(d[2:]) == uint16(seq) && !seen[uint16(seq)] {
						seen[uint16(seq)] = true
						reply = append(reply, d[memcache.FrameHeaderLen:]...)
					}
				}
			}
			want := fmt.Sprintf("VALUE v%d 0 %d\r\n%s\r\nEND\r\n", i, n, bytes.Repeat([]byte{byte('a' + i)}, n))
			if string(reply) != want {
				t.Fatalf("read of %d bytes: the client got %d bytes in %d datagrams, not the value", n, len(reply), total)
			}
		}
	}
	for i, n := range sizes {
		y := p.Why([]byte(fmt.Sprint("v", i)), mono())
		if !y.SizeKnown || y.Size < n || y.Size > n+100 {
			t.Errorf("v%d: size %d (known %v), want about %d", i, y.Size, y.SizeKnown, n)
		}
		for _, r := range y.Replicas {
			if r.Chosen {
				t.Logf("%d bytes: reads go to %v: predicted %.2f ms (RTT %.2f + service %.3f + queue %.3f + transfer %.3f at %.0f MB/s), %d samples",
					n, r.Server.Addr, float64(r.Prediction.Total)/1e6, float64(r.Prediction.RTT)/1e6, float64(r.Prediction.Service)/1e6,
					float64(r.Prediction.Queue)/1e6, float64(r.Prediction.Transfer)/1e6, r.Prediction.Throughput/1e6, r.Class.Samples)
			}
		}
		if n >= 100000 && y.Replicas[0].Prediction.Throughput == replica.DefaultParams().Throughput {
			t.Errorf("no path throughput learnt from %d-byte replies", n)
		}
	}
	// The predicted service times are those of the gateway's view, which
	// in this test has no WAN: replies come back before the RTT the
	// router was told, so service times are 0 and the nearest path wins.
	if y := p.Why([]byte("v0"), mono()); !y.Replicas[0].Chosen {
		t.Errorf("small reads do not go to the nearest replica: %+v", y.Replicas)
	}
	if p.Stats.DupReplies.Load() == 0 && p.Stats.Explorations.Load() > 0 {
		t.Error("explored reads but no duplicate dropped")
	}
}
