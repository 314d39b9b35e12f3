//go:build netns

package test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/kv/ring"
)

// TestKVRingChange adds a fourth memcached server (NEU host 2) to the
// lanman2017-kv pool at run time, with one `detour kv add-server` at LAN's
// gateway (not the server's site), while 16 clients at LAN set keys
// through the virtual address without pause. The change is distributed
// over the control plane: version 2 has the server joining, NEU's gateway
// learns its MAC and sends version 3 with it taking keys. Every gateway
// must be on version 3 within 1 s of the command's answer (the times are
// measured by polling each gateway's API and logged), no request may go
// unanswered across the change, and every key then lands where the new
// ring says. Then drain and undrain at LAN (distributed too), and NEU's
// check latencies.
func TestKVRingChange(t *testing.T) {
	overlay := "detour-plain" // DETOUR_KV_OVERLAY=detour runs it sealed
	if v := os.Getenv("DETOUR_KV_OVERLAY"); v != "" {
		overlay = v
	}
	o := withAgents(t, upWith(t, kvPrefix, "lanman2017-kv", "--overlay", overlay))
	pool, vip, rs := o.kvPool(t)
	addrs := []string{}
	for _, srv := range pool.Servers {
		addrs = append(addrs, srv.Address)
	}

	// The fourth memcached, at NEU host 2, killed by PID at the end.
	neuHost := o.st.Sites[o.idx("NEU")].Hosts[1]
	newAddr := netip.AddrPortFrom(netip.MustParseAddr(neuHost.Addr), 11211)
	bin, err := exec.LookPath("memcached")
	if err != nil {
		t.Fatal(err)
	}
	mc := exec.Command("ip", "netns", "exec", neuHost.NS, bin, "-u", "nobody", "-l", newAddr.Addr().String(),
		"-p", "11211", "-U", "11211", "-m", "64", "-t", "2")
	if err := mc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Process.Kill(); mc.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := inNSThread(neuHost.NS, func() error {
			c, err := net.DialTimeout("tcp4", newAddr.String(), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("memcached at %v does not listen: %v", newAddr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Wait until every configured server answers through the VIP.
	rg, _ := ring.New(ring.Ketama, rs)
	waitServersUp(t, o.host("LAN").NS, vip, rg, len(rs))
	kv := dialKV(t, o.host("LAN").NS, vip)

	// Clients at LAN set keys through the VIP, one request at a time each,
	// without retries: a request unanswered within 1 s is lost.
	var sent, lost, bad atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < 16; c++ {
		cl := dialKV(t, o.host("LAN").NS, vip)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 2048)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := uint16(i + 1)
				req := binSet(fmt.Sprintf("load:%d:%d", c, i), "v")
				d := make([]byte, 8+len(req))
				binary.BigEndian.PutUint16(d, id)
				binary.BigEndian.PutUint16(d[4:], 1)
				copy(d[8:], req)
				sent.Add(1)
				cl.c.Write(d)
				cl.c.SetReadDeadline(time.Now().Add(time.Second))
				for {
					n, err := cl.c.Read(buf)
					if err != nil {
						lost.Add(1)
						break
					}
					if n >= 8 && binary.BigEndian.Uint16(buf) == id {
						if status(buf[8:n]) != 0 {
							bad.Add(1)
						}
						break
					}
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	before := sent.Load()
	// Each gateway's API is polled every 2 ms for the pool's version.
	seen := make([][4]time.Duration, len(o.st.Sites)) // first seen at version 1..3
	var seenMu sync.Mutex
	pollStop := make(chan struct{})
	var pollWG sync.WaitGroup
	t0 := time.Now()
	for i := range o.st.Sites {
		pollWG.Add(1)
		go func() {
			defer pollWG.Done()
			for {
				select {
				case <-pollStop:
					return
				default:
				}
				var pools []api.KVPool
				if err := o.api[i].Get("/v1/kv/pools", &pools); err == nil && len(pools) == 1 {
					seenMu.Lock()
					if v := pools[0].Version; v >= 2 && v <= 3 && seen[i][v] == 0 {
						seen[i][v] = time.Since(t0)
					}
					seenMu.Unlock()
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	out := o.mustDetour(t, "LAN", "kv", "add-server", "cache", newAddr.String(), "--site", "NEU")
	answered := time.Since(t0)
	if !strings.Contains(out, "version 3") {
		t.Fatalf("add-server at LAN: %s", out)
	}
	time.Sleep(1500 * time.Millisecond)
	close(pollStop)
	pollWG.Wait()
	during := sent.Load() - before
	close(stop)
	wg.Wait()
	t.Logf("add-server at LAN answered after %v (version 2 with the server joining, then NEU confirmed it: version 3)", answered.Round(time.Millisecond))
	at := func(d time.Duration) string {
		if d == 0 {
			return "- (passed between two polls)"
		}
		return d.Round(100 * time.Microsecond).String()
	}
	for i, s := range o.st.Sites {
		t.Logf("%s: version 2 at %s, version 3 at %s (from the command's start)", s.Name, at(seen[i][2]), at(seen[i][3]))
		switch {
		case seen[i][3] == 0:
			t.Errorf("%s never showed version 3", s.Name)
		case seen[i][3] > answered+time.Second:
			t.Errorf("%s on version 3 %v after the command answered, want within 1 s", s.Name, seen[i][3]-answered)
		}
	}
	t.Logf("%d requests sent in all (%d from the change to 1.5 s after), %d lost, %d errors",
		sent.Load(), during, lost.Load(), bad.Load())
	if lost.Load() != 0 || bad.Load() != 0 {
		t.Errorf("%d requests lost and %d errors across the change, want none", lost.Load(), bad.Load())
	}
	if during == 0 {
		t.Error("no request was sent during the change")
	}

	// Every gateway is on version 3 with four servers.
	for i, s := range o.st.Sites {
		var pools []api.KVPool
		if err := o.api[i].Get("/v1/kv/pools", &pools); err != nil || len(pools) != 1 {
			t.Fatalf("%s: pools %+v (%v)", s.Name, pools, err)
		}
		if p := pools[0]; p.Version != 3 || len(p.Servers) != 4 || p.Servers[3].Address != newAddr.String() || p.Servers[3].State != "up" {
			t.Errorf("%s: version %d, servers %+v", s.Name, p.Version, p.Servers)
		}
	}

	// Every key now lands where the new ring says.
	rs = append(rs, ring.Server{Host: newAddr.Addr().String(), Port: newAddr.Port(), Weight: 1})
	addrs = append(addrs, newAddr.String())
	rg2, err := ring.New(ring.Ketama, rs)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 1000)
	var reqs [][]byte
	for i := range keys {
		keys[i] = fmt.Sprintf("after:%04d", i)
		reqs = append(reqs, binSet(keys[i], "v"))
	}
	for i, r := range kv.exchange(reqs, 100, 500*time.Millisecond) {
		if status(r) != 0 {
			t.Fatalf("set %s: reply % x", keys[i], r)
		}
	}
	moved := 0
	for j, a := range addrs {
		ns := o.host("LAN").NS
		held := heldKeys(t, ns, a, keys)
		n := 0
		for _, k := range keys {
			want := rg2.Owner([]byte(k)) == j
			if held[k] != want {
				t.Fatalf("key %s: on %s %v, the new ring says %v", k, a, held[k], want)
			}
			if want {
				n++
			}
			if want && rg.Owner([]byte(k)) != j {
				moved++
				if a != newAddr.String() {
					t.Fatalf("key %s moved from %s to %s, not to the new server", k, addrs[rg.Owner([]byte(k))], a)
				}
			}
		}
		t.Logf("%s holds %d keys, as the new ring says", a, n)
	}
	t.Logf("%d of 1,000 keys belong elsewhere than on the old ring (all to the new server)", moved)
	if moved == 0 {
		t.Error("no key maps to the new server")
	}

	// Drained at LAN's gateway, the new server takes no key from LAN's
	// clients: each of its keys goes to its failover on the ring, the
	// others stay; undrained, it gets exactly its keys back.
	out = o.mustDetour(t, "LAN", "kv", "drain", "cache", newAddr.String())
	if !strings.Contains(out, "version 4") {
		t.Fatalf("drain: %s", out)
	}
	setAll := func(prefix string) []string {
		ks := make([]string, 400)
		var reqs [][]byte
		for i := range ks {
			ks[i] = fmt.Sprintf("%s:%04d", prefix, i)
			reqs = append(reqs, binSet(ks[i], "v"))
		}
		for i, r := range kv.exchange(reqs, 100, 500*time.Millisecond) {
			if status(r) != 0 {
				t.Fatalf("set %s: reply % x", ks[i], r)
			}
		}
		return ks
	}
	check := func(ks []string, owner func(k string) int) {
		t.Helper()
		for j, a := range addrs {
			held := heldKeys(t, o.host("LAN").NS, a, ks)
			for _, k := range ks {
				if want := owner(k) == j; held[k] != want {
					t.Fatalf("key %s: on %s %v, want %v", k, a, held[k], want)
				}
			}
		}
	}
	last := len(addrs) - 1
	drainedKeys := setAll("drained")
	check(drainedKeys, func(k string) int { return rg2.Next([]byte(k), func(i int) bool { return i == last }) })
	o.mustDetour(t, "LAN", "kv", "undrain", "cache", newAddr.String())
	undrained := setAll("undrained")
	check(undrained, func(k string) int { return rg2.Owner([]byte(k)) })
	t.Logf("drained at LAN: 400 keys each on its failover; undrained: 400 keys each on its ring owner")

	// NEU's gateway checks its two servers and times the checks.
	var p api.KVPool
	if err := json.Unmarshal([]byte(o.mustDetour(t, "NEU", "kv", "show", "cache", "--json")), &p); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Servers {
		switch {
		case s.Local && (s.Latency == nil || s.Latency.Samples == 0):
			t.Errorf("NEU: local server %s has no check latency", s.Address)
		case s.Local:
			t.Logf("NEU: %s check round trip p50 %.3f ms, p99 %.3f ms over %d checks; %d requests, %d replies",
				s.Address, s.Latency.P50Ms, s.Latency.P99Ms, s.Latency.Samples, s.Requests, s.Replies)
		case s.Latency != nil:
			t.Errorf("NEU: remote server %s has a check latency", s.Address)
		}
	}
}
