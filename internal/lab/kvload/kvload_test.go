package kvload

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/kv/kvtest"
)

// TestRunAgainstMemcached runs each protocol for a second against a real
// memcached on loopback (UDP and TCP on one port) and checks that the
// requests were answered, the mix was kept and the figures are coherent.
func TestRunAgainstMemcached(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	port := kvtest.FreePort(t, "127.0.0.1")
	kvtest.Memcached(t, "127.0.0.1", port, true)
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for _, c := range []struct {
		p     Protocol
		ratio float64
	}{{BinaryUDP, 0.5}, {ASCIITCP, 0.9}, {MetaTCP, 0.5}} {
		t.Run(string(c.p), func(t *testing.T) {
			res, err := Run(context.Background(), Config{
				Target: target, Protocol: c.p, Outstanding: 8, Connections: 2,
				GetRatio: c.ratio, Keys: 1000, ValueSize: 100, Duration: time.Second,
				Prefill: true, Seed: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(res)
			t.Logf("%s", b)
			if res.Requests < 1000 || res.Errors != 0 || res.Timeouts != 0 {
				t.Fatalf("%d requests, %d errors, %d timeouts", res.Requests, res.Errors, res.Timeouts)
			}
			if res.Gets+res.Sets != res.Requests || res.Hits+res.Misses != res.Gets {
				t.Fatalf("counts do not add up: %+v", res)
			}
			// Every key was set before the run, so every get hits.
			if res.Misses != 0 {
				t.Fatalf("%d misses after the prefill", res.Misses)
			}
			share := float64(res.Gets) / float64(res.Requests)
			if share < c.ratio-0.05 || share > c.ratio+0.05 {
				t.Fatalf("gets are %.3f of requests, want %.2f", share, c.ratio)
			}
			l := res.Latency
			if l.Count != res.Requests || !(l.P50 > 0 && l.P50 <= l.P99 && l.P99 <= l.Max) {
				t.Fatalf("latency summary %+v", l)
			}
			if res.Throughput <= 0 || res.Interval.Count < 9 || res.Interval.P50 <= 0 {
				t.Fatalf("throughput %v, intervals %+v", res.Throughput, res.Interval)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{},
		{Target: "127.0.0.1"},
		{Target: "127.0.0.1:1", Protocol: "http"},
		{Target: "127.0.0.1:1", GetRatio: 1.5},
		{Target: "127.0.0.1:1", Protocol: BinaryUDP, ValueSize: 5000},
	} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestUnreachableFails checks that a run against a port where nothing
// listens fails instead of reporting empty figures.
func TestUnreachableFails(t *testing.T) {
	port := kvtest.FreePort(t, "127.0.0.1")
	_, err := Run(context.Background(), Config{Target: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Protocol: ASCIITCP, Duration: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("no error")
	}
}

// TestClientSideKetama runs binary-udp over two servers hashed by the
// generator: with a prefill every get hits, which it could not if a get
// went to another server than its key's set, and both servers hold keys.
func TestClientSideKetama(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	var servers []string
	for i := 0; i < 2; i++ {
		port := kvtest.FreePort(t, "127.0.0.1")
		kvtest.Memcached(t, "127.0.0.1", port, true)
		servers = append(servers, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	res, err := Run(context.Background(), Config{Servers: servers, Protocol: BinaryUDP, Outstanding: 4,
		GetRatio: 0.9, Keys: 200, Duration: 300 * time.Millisecond, Prefill: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests < 100 || res.Misses != 0 || res.Errors != 0 || res.Timeouts != 0 {
		t.Fatalf("%d requests, %d misses, %d errors, %d timeouts", res.Requests, res.Misses, res.Errors, res.Timeouts)
	}
	for _, s := range servers {
		c, err := net.Dial("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("stats\r\n"))
		buf := make([]byte, 8192)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _ := c.Read(buf)
		c.Close()
		if strings.Contains(string(buf[:n]), "STAT curr_items 0\r\n") || !strings.Contains(string(buf[:n]), "STAT curr_items ") {
			t.Fatalf("%s holds no keys", s)
		}
	}
}
