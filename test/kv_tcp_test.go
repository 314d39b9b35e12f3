//go:build netns

package test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/kv/ring"
)

// kvTCP is a memcached client over TCP opened in a host's namespace.
type kvTCP struct {
	c net.Conn
	r *bufio.Reader
}

// dialKVTCP connects to addr from namespace ns, trying for up to 20 s
// (the gateway's terminator starts with its agent).
func dialKVTCP(t *testing.T, ns, addr string) *kvTCP {
	t.Helper()
	var c net.Conn
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := inNSThread(ns, func() (err error) { c, err = net.DialTimeout("tcp4", addr, 2*time.Second); return })
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect to %s from %s: %v", addr, ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second))
	return &kvTCP{c: c, r: bufio.NewReader(c)}
}

func (k *kvTCP) send(t *testing.T, b []byte) {
	t.Helper()
	if _, err := k.c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func (k *kvTCP) line(t *testing.T) string {
	t.Helper()
	l, err := k.r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a reply: %v (so far %q)", err, l)
	}
	return l
}

// value reads a VALUE line's data block.
func (k *kvTCP) block(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n+2)
	if _, err := io.ReadFull(k.r, b); err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

// binReply reads one binary reply: header and body.
func (k *kvTCP) binReply(t *testing.T) []byte {
	t.Helper()
	h := make([]byte, 24)
	if _, err := io.ReadFull(k.r, h); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(h[8:]))
	if _, err := io.ReadFull(k.r, body); err != nil {
		t.Fatal(err)
	}
	return append(h, body...)
}

// TestKVTCP runs the lanman2017-kv scenario over detour and talks to the
// pool's virtual address over TCP from LAN (no server there) and from a
// spare host at NEU (one server there): pipelined sets and gets in
// ASCII, meta and binary, a multi-key get over every server, malformed
// requests; every reply must come in request order, and every key must
// be on exactly the server the ring names.
func TestKVTCP(t *testing.T) {
	o := withAgents(t, upWith(t, kvPrefix, "lanman2017-kv", "--overlay", "detour-plain"))
	pool, vip, rs := o.kvPool(t)
	rg, err := ring.New(ring.Ketama, rs)
	if err != nil {
		t.Fatal(err)
	}
	waitServersUp(t, o.host("LAN").NS, vip, rg, len(rs))

	lan := dialKVTCP(t, o.host("LAN").NS, vip)
	start := time.Now()

	// 600 ASCII sets in one write, pipelined: 600 STORED.
	keys := make([]string, 600)
	var b bytes.Buffer
	for i := range keys {
		keys[i] = fmt.Sprintf("tcp:%04d", i)
		v := "v-" + keys[i]
		fmt.Fprintf(&b, "set %s 0 0 %d\r\n%s\r\n", keys[i], len(v), v)
	}
	lan.send(t, b.Bytes())
	for i := range keys {
		if l := lan.line(t); l != "STORED\r\n" {
			t.Fatalf("set %d: %q", i, l)
		}
	}
	t.Logf("600 pipelined sets over TCP through %s: %v", vip, time.Since(start))

	// Pipelined gets in a shuffled order, one write: the replies must
	// come in request order although the keys live on three servers at
	// three sites (18, 31 and 15 ms away).
	order := rand.Perm(len(keys))
	b.Reset()
	for _, i := range order {
		fmt.Fprintf(&b, "get %s\r\n", keys[i])
	}
	start = time.Now()
	lan.send(t, b.Bytes())
	for n, i := range order {
		want := "v-" + keys[i]
		if l := lan.line(t); l != fmt.Sprintf("VALUE %s 0 %d\r\n", keys[i], len(want)) {
			t.Fatalf("get %d (%s): %q", n, keys[i], l)
		}
		if v := lan.block(t, len(want)); v != want {
			t.Fatalf("get %s: value %q", keys[i], v)
		}
		if l := lan.line(t); l != "END\r\n" {
			t.Fatalf("get %s: %q after the value", keys[i], l)
		}
	}
	t.Logf("600 pipelined gets in request order: %v", time.Since(start))

	// A multi-key get over every server (and a missing key): one reply,
	// every value, a single END.
	mk := append([]string{}, keys[:40]...)
	mk = append(mk, "tcp:missing")
	owners := map[int]bool{}
	for _, k := range mk {
		owners[rg.Owner([]byte(k))] = true
	}
	if len(owners) != len(rs) {
		t.Fatalf("the multi-key get spans %d servers, want %d", len(owners), len(rs))
	}
	lan.send(t, []byte("get "+strings.Join(mk, " ")+"\r\nmn\r\n"))
	got := map[string]bool{}
	for {
		l := lan.line(t)
		if l == "END\r\n" {
			break
		}
		var k string
		var flags, n int
		if _, err := fmt.Sscanf(l, "VALUE %s %d %d\r\n", &k, &flags, &n); err != nil {
			t.Fatalf("multi-get: %q", l)
		}
		if v := lan.block(t, n); v != "v-"+k || got[k] {
			t.Fatalf("multi-get: %s = %q (seen before: %v)", k, v, got[k])
		}
		got[k] = true
	}
	if l := lan.line(t); l != "MN\r\n" || len(got) != 40 {
		t.Fatalf("multi-get: %d values, then %q", len(got), l)
	}

	// Meta: pipelined ms and mg with the key echoed, a quiet miss, mn.
	b.Reset()
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&b, "ms meta:%d 2\r\nm%d\r\n", i, i%10)
	}
	for i := 59; i >= 0; i-- {
		fmt.Fprintf(&b, "mg meta:%d k v\r\n", i)
	}
	b.WriteString("mg meta:missing q v\r\nmn\r\n")
	lan.send(t, b.Bytes())
	for i := 0; i < 60; i++ {
		if l := lan.line(t); l != "HD\r\n" {
			t.Fatalf("ms %d: %q", i, l)
		}
	}
	for i := 59; i >= 0; i-- {
		if l := lan.line(t); l != fmt.Sprintf("VA 2 kmeta:%d\r\n", i) {
			t.Fatalf("mg meta:%d: %q", i, l)
		}
		if v := lan.block(t, 2); v != fmt.Sprintf("m%d", i%10) {
			t.Fatalf("mg meta:%d: %q", i, v)
		}
	}
	if l := lan.line(t); l != "MN\r\n" {
		t.Fatalf("after a quiet miss: %q", l)
	}

	// Malformed requests: memcached's errors, and the connection lives.
	lan.send(t, []byte("bogus\r\nget "+strings.Repeat("k", 251)+"\r\nmn\r\n"))
	for _, want := range []string{"ERROR\r\n", "CLIENT_ERROR bad command line format\r\n", "MN\r\n"} {
		if l := lan.line(t); l != want {
			t.Fatalf("malformed: %q, want %q", l, want)
		}
	}

	// Garbage on a connection of its own (random bytes, then an endless
	// line): the terminator answers or closes as memcached would, and
	// the other connections go on.
	junk := dialKVTCP(t, o.host("LAN").NS, vip)
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(rand.IntN(256))
	}
	junk.c.Write(garbage)
	junk.c.Write(bytes.Repeat([]byte("x"), 3000))
	junk.c.SetDeadline(time.Now().Add(2 * time.Second)) // a binary header in the garbage may announce a body memcached would wait for
	io.Copy(io.Discard, junk.r)
	lan.send(t, []byte("get "+keys[0]+"\r\n"))
	if l := lan.line(t); !strings.HasPrefix(l, "VALUE "+keys[0]) {
		t.Fatalf("after another connection's garbage: %q", l)
	}
	lan.line(t)
	lan.line(t)

	// Binary over its own connection: setq ×40 (quiet), getk ×40
	// reversed, noop; replies in order.
	bin := dialKVTCP(t, o.host("LAN").NS, vip)
	b.Reset()
	for i := 0; i < 40; i++ {
		b.Write(binReq(0x11, fmt.Sprintf("bin:%d", i), make([]byte, 8), []byte(fmt.Sprintf("b%d", i))))
	}
	for i := 39; i >= 0; i-- {
		b.Write(binReq(0x0c, fmt.Sprintf("bin:%d", i), nil, nil))
	}
	b.Write(binReq(0x0a, "", nil, nil))
	bin.send(t, b.Bytes())
	for i := 39; i >= 0; i-- {
		r := bin.binReply(t)
		key := fmt.Sprintf("bin:%d", i)
		kl, el := int(binary.BigEndian.Uint16(r[2:])), int(r[4])
		if status(r) != 0 || r[1] != 0x0c || string(r[24+el:24+el+kl]) != key || string(r[24+el+kl:]) != fmt.Sprintf("b%d", i) {
			t.Fatalf("getk %s: status %d, reply %q", key, status(r), r)
		}
	}
	if r := bin.binReply(t); r[1] != 0x0a {
		t.Fatalf("noop: opcode %#x", r[1])
	}

	// A client at NEU, where one server is: through its own gateway's
	// terminator to the local server and to the remote ones.
	neu := dialKVTCP(t, o.st.Sites[o.idx("NEU")].Hosts[1].NS, vip)
	b.Reset()
	for i := 0; i < 90; i++ {
		fmt.Fprintf(&b, "set neu:%d 0 0 1\r\n%d\r\nget neu:%d\r\n", i, i%10, i)
	}
	neu.send(t, b.Bytes())
	for i := 0; i < 90; i++ {
		if l := neu.line(t); l != "STORED\r\n" {
			t.Fatalf("NEU set %d: %q", i, l)
		}
		if l := neu.line(t); l != fmt.Sprintf("VALUE neu:%d 0 1\r\n", i) {
			t.Fatalf("NEU get %d: %q", i, l)
		}
		if v := neu.block(t, 1); v != fmt.Sprint(i%10) {
			t.Fatalf("NEU get %d: %q", i, v)
		}
		if l := neu.line(t); l != "END\r\n" {
			t.Fatalf("NEU get %d: %q", i, l)
		}
	}

	// Every key on exactly its ring owner.
	all := append([]string{}, keys...)
	for i := 0; i < 60; i++ {
		all = append(all, fmt.Sprintf("meta:%d", i))
	}
	for i := 0; i < 40; i++ {
		all = append(all, fmt.Sprintf("bin:%d", i))
	}
	for i := 0; i < 90; i++ {
		all = append(all, fmt.Sprintf("neu:%d", i))
	}
	perServer := make([]int, len(rs))
	for si, s := range pool.Servers {
		held := heldKeys(t, s.NS, s.Address, all)
		for _, k := range all {
			owner := rg.Owner([]byte(k)) == si
			if held[k] != owner {
				t.Fatalf("key %s: held by %s %v, owner %v", k, s.Address, held[k], owner)
			}
			if owner {
				perServer[si]++
			}
		}
	}
	t.Logf("%d keys, each on its ring owner only (per server %v)", len(all), perServer)

	// Kill NEU's memcached by PID: requests for its keys get
	// SERVER_ERROR until LAN's gateway takes it out (the terminator's
	// requests feed the router's passive detection, as datagrams do) and
	// then go to the failover; keys of the other servers see no error.
	dead := -1
	for j, s := range pool.Servers {
		if s.Site == "NEU" {
			dead = j
		}
	}
	var deadKeys, liveKeys []string
	for _, k := range keys {
		if rg.Owner([]byte(k)) == dead {
			deadKeys = append(deadKeys, k)
		} else {
			liveKeys = append(liveKeys, k)
		}
	}
	pid := 0
	for _, p := range o.st.Procs {
		if p.Name == "memcached-"+pool.Servers[dead].NS {
			pid = p.PID
		}
	}
	if pid == 0 {
		t.Fatal("no memcached process recorded for NEU")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var served time.Duration
	liveErrors, deadErrors := 0, 0
	for i := 0; time.Since(killed) < 3*time.Second; i++ {
		dk, lk := deadKeys[i%len(deadKeys)], liveKeys[i%len(liveKeys)]
		lan.send(t, []byte(fmt.Sprintf("set %s 0 0 5\r\nagain\r\nget %s\r\n", dk, lk)))
		switch l := lan.line(t); {
		case l == "STORED\r\n":
			if served == 0 {
				served = time.Since(killed)
			}
		case strings.HasPrefix(l, "SERVER_ERROR"):
			deadErrors++
		default:
			t.Fatalf("set %s after the kill: %q", dk, l)
		}
		if l := lan.line(t); !strings.HasPrefix(l, "VALUE ") {
			liveErrors++
			t.Errorf("get %s (a healthy server's key) after the kill: %q", lk, l)
		} else {
			lan.line(t)
			lan.line(t)
		}
		if served != 0 && time.Since(killed) > served+300*time.Millisecond {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("killed memcached at NEU (pid %d): its keys served over TCP again after %v (%d SERVER_ERROR before); %d errors for other keys",
		pid, served.Round(time.Millisecond), deadErrors, liveErrors)
	if served == 0 || served > time.Second {
		t.Errorf("failover over TCP took %v, want at most 1 s", served)
	}

	// The gateways' counters.
	if m, err := o.inGateway("LAN", "curl", "-s", "--max-time", "3", "http://127.0.0.1:7447/metrics"); err == nil {
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "detour_kv_tcp_total") {
				t.Log(l)
			}
		}
	}
}

// waitServersUp waits until every server answers a UDP set through the
// VIP (their gateways admit them after a few health checks).
func waitServersUp(t *testing.T, ns, vip string, rg *ring.Ring, n int) {
	t.Helper()
	kv := dialKV(t, ns, vip)
	probe := map[int]string{}
	for i := 0; len(probe) < n; i++ {
		k := fmt.Sprintf("probe-%d", i)
		if _, ok := probe[rg.Owner([]byte(k))]; !ok {
			probe[rg.Owner([]byte(k))] = k
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var reqs [][]byte
		for _, k := range probe {
			reqs = append(reqs, binSet(k, "x"))
		}
		ok := 0
		for _, r := range kv.exchange(reqs, len(reqs), 300*time.Millisecond) {
			if status(r) == 0 {
				ok++
			}
		}
		if ok == len(reqs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("servers not all reachable through %s after 20 s", vip)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
