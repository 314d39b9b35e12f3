//go:build netns

package test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/lab/testbed"
)

// kvPrefix names the namespaces of the key-router test.
const kvPrefix = "dtk-"

// kvUDP is a memcached client over UDP (binary protocol) on a connected
// socket opened in a host's namespace: a reply from any other source
// than the address it is connected to never reaches it.
type kvUDP struct {
	c  *net.UDPConn
	id uint16
}

func dialKV(t *testing.T, ns, addr string) *kvUDP {
	t.Helper()
	var c *net.UDPConn
	err := inNSThread(ns, func() error {
		conn, err := net.Dial("udp4", addr)
		if err == nil {
			c = conn.(*net.UDPConn)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &kvUDP{c: c}
}

// binReq builds a binary request: opcode, key, extras and value.
func binReq(op byte, key string, extras, value []byte) []byte {
	b := make([]byte, 24+len(extras)+len(key)+len(value))
	b[0], b[1] = 0x80, op
	binary.BigEndian.PutUint16(b[2:], uint16(len(key)))
	b[4] = byte(len(extras))
	binary.BigEndian.PutUint32(b[8:], uint32(len(extras)+len(key)+len(value)))
	copy(b[24:], extras)
	copy(b[24+len(extras):], key)
	copy(b[24+len(extras)+len(key):], value)
	return b
}

func binSet(key, value string) []byte { return binReq(0x01, key, make([]byte, 8), []byte(value)) }
func binGet(key string) []byte        { return binReq(0x00, key, nil, nil) }

// exchange sends each request in its own datagram, up to window at a
// time, and returns the reply to each (its payload after the frame
// header), sending the unanswered again up to three times.
func (k *kvUDP) exchange(reqs [][]byte, window int, timeout time.Duration) [][]byte {
	replies := make([][]byte, len(reqs))
	for start := 0; start < len(reqs); start += window {
		end := min(start+window, len(reqs))
		ids := map[uint16]int{}
		for try := 0; try < 4; try++ {
			for i := start; i < end; i++ {
				if replies[i] != nil {
					continue
				}
				k.id++
				ids[k.id] = i
				d := make([]byte, 8+len(reqs[i]))
				binary.BigEndian.PutUint16(d, k.id)
				binary.BigEndian.PutUint16(d[4:], 1)
				copy(d[8:], reqs[i])
				k.c.Write(d)
			}
			k.c.SetReadDeadline(time.Now().Add(timeout))
			buf := make([]byte, 65536)
			for missing(replies[start:end]) > 0 {
				n, err := k.c.Read(buf)
				if err != nil {
					break
				}
				if n < 8 {
					continue
				}
				if i, ok := ids[binary.BigEndian.Uint16(buf)]; ok && replies[i] == nil {
					replies[i] = append([]byte(nil), buf[8:n]...)
				}
			}
			if missing(replies[start:end]) == 0 {
				break
			}
		}
	}
	return replies
}

func missing(r [][]byte) int {
	n := 0
	for _, x := range r {
		if x == nil {
			n++
		}
	}
	return n
}

// status returns a binary reply's status, or -1.
func status(r []byte) int {
	if len(r) < 24 || r[0] != 0x81 {
		return -1
	}
	return int(binary.BigEndian.Uint16(r[6:]))
}

// heldKeys asks a memcached over TCP which of keys it holds.
func heldKeys(t *testing.T, ns, addr string, keys []string) map[string]bool {
	t.Helper()
	var c net.Conn
	if err := inNSThread(ns, func() (err error) { c, err = net.DialTimeout("tcp4", addr, 5*time.Second); return }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	held := map[string]bool{}
	r := bufio.NewReader(c)
	for i := 0; i < len(keys); i += 100 {
		fmt.Fprintf(c, "get %s\r\n", strings.Join(keys[i:min(i+100, len(keys))], " "))
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: %v", addr, err)
			}
			if line == "END\r\n" {
				break
			}
			f := strings.Fields(line)
			if len(f) == 4 && f[0] == "VALUE" {
				held[f[1]] = true
				if _, err := r.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return held
}

// TestKVRouter runs the lanman2017-kv scenario over detour: a client at
// LAN sets 1,000 keys through the pool's virtual address over UDP, each
// key lands on exactly the server the ring names, malformed requests get
// memcached's errors, a client at a server's own site is served through
// the VIP too, and a memcached killed with -9 has its keys served
// by the failover within 300 ms while the other keys see no error.
func TestKVRouter(t *testing.T) {
	o := withAgents(t, upWith(t, kvPrefix, "lanman2017-kv", "--overlay", "detour-plain"))
	pool, vip, rs := o.kvPool(t)
	rg, err := ring.New(ring.Ketama, rs)
	if err != nil {
		t.Fatal(err)
	}
	client := o.host("LAN").NS
	kv := dialKV(t, client, vip)

	// Wait until every server answers through the VIP (their gateways
	// admit them after a few health checks).
	waitServersUp(t, client, vip, rg, len(rs))

	// 1,000 keys set through the VIP.
	keys := make([]string, 1000)
	var reqs [][]byte
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%04d", i)
		reqs = append(reqs, binSet(keys[i], "v"+keys[i]))
	}
	t0 := time.Now()
	for i, r := range kv.exchange(reqs, 100, 500*time.Millisecond) {
		if status(r) != 0 {
			t.Fatalf("set %s: reply % x", keys[i], r)
		}
	}
	t.Logf("1,000 sets through %s in %v", vip, time.Since(t0).Round(time.Millisecond))
	for j, s := range pool.Servers {
		held := heldKeys(t, client, s.Address, keys)
		n := 0
		for _, k := range keys {
			want := rg.Owner([]byte(k)) == j
			if held[k] != want {
				t.Fatalf("key %s: on %s %v, ring says %v", k, s.Address, held[k], want)
			}
			if want {
				n++
			}
		}
		t.Logf("%s (%s) holds %d keys, as the ring says", s.Address, s.Site, n)
	}

	// A client at NEU reaches NEU's own server through the VIP: the
	// gateway sends the request back to the bridge from a flow slot and
	// the reply on to the client from the VIP.
	neuClient := dialKV(t, o.st.Sites[o.idx("NEU")].Hosts[1].NS, vip)
	var localKey string
	for _, k := range keys {
		if pool.Servers[rg.Owner([]byte(k))].Site == "NEU" {
			localKey = k
			break
		}
	}
	rs2 := neuClient.exchange([][]byte{binGet(localKey), binSet(localKey, "local"), binGet(localKey)}, 1, 500*time.Millisecond)
	if status(rs2[0]) != 0 || status(rs2[1]) != 0 || status(rs2[2]) != 0 || !strings.HasSuffix(string(rs2[2]), "local") {
		t.Fatalf("local owner through the VIP: replies % x", rs2)
	}

	// Malformed requests get memcached's own errors from the VIP.
	raw := func(payload string) string {
		d := append([]byte{0, 77, 0, 0, 0, 1, 0, 0}, payload...)
		kv.c.Write(d)
		kv.c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 2048)
		for {
			n, err := kv.c.Read(buf)
			if err != nil {
				t.Fatalf("no reply to %q: %v", payload, err)
			}
			if n >= 8 && binary.BigEndian.Uint16(buf) == 77 {
				return string(buf[8:n])
			}
		}
	}
	if got := raw("bogus\r\n"); got != "ERROR\r\n" {
		t.Fatalf("unknown command: %q", got)
	}
	if got := raw("get " + strings.Repeat("k", 251) + "\r\n"); got != "CLIENT_ERROR bad command line format\r\n" {
		t.Fatalf("long key: %q", got)
	}
	bad := binGet("abc")
	binary.BigEndian.PutUint32(bad[8:], 1)
	if got := raw(string(bad)); status([]byte(got)) != 0x81 {
		t.Fatalf("binary lengths: % x", got)
	}

	// From here on, 16 clients at LAN's second host keep the pool under
	// a 50/50 load of gets and sets of the 1,000 keys, one request in
	// flight each, while servers and a site are killed around them.
	load := startKVLoad(t, o.st.Sites[o.idx("LAN")].Hosts[1].NS, vip, rg, keys, 16, 500*time.Millisecond)
	loadStart := time.Now()
	time.Sleep(2 * time.Second)

	// Kill NEU's memcached; its keys go to the failover.
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
		} else if len(liveKeys) < 50 {
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
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	before := o.kvStateChanges(t, pool.Servers[dead].Address)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	deadKilled := killed
	var served time.Duration
	liveErrors := 0
	for i := 0; time.Since(killed) < 2*time.Second; i++ {
		rs := kv.exchange([][]byte{binSet(deadKeys[i%len(deadKeys)], "again"), binGet(liveKeys[i%len(liveKeys)])}, 2, 40*time.Millisecond)
		if served == 0 && status(rs[0]) == 0 {
			served = time.Since(killed)
		}
		if status(rs[1]) != 0 {
			liveErrors++
		}
		if served != 0 && time.Since(killed) > served+500*time.Millisecond {
			break
		}
	}
	t.Logf("killed memcached at NEU (pid %d): its keys served again after %v; %d errors for other keys", pid, served.Round(time.Millisecond), liveErrors)
	if served == 0 || served > 300*time.Millisecond {
		t.Errorf("failover took %v, want at most 300 ms", served)
	}
	if liveErrors != 0 {
		t.Errorf("%d errors for keys of healthy servers", liveErrors)
	}

	// No key of a healthy server moved: every one still hits, with its
	// value.
	checkLive := func(dead map[int]bool) {
		t.Helper()
		var live []string
		var gets [][]byte
		for _, k := range keys {
			if !dead[rg.Owner([]byte(k))] {
				live = append(live, k)
				gets = append(gets, binGet(k))
			}
		}
		for i, r := range kv.exchange(gets, 100, 500*time.Millisecond) {
			if status(r) != 0 || !strings.HasSuffix(string(r), "v"+live[i]) {
				t.Fatalf("key %s of a healthy server: reply % x", live[i], r)
			}
		}
		t.Logf("all %d keys of healthy servers still hit", len(live))
	}
	checkLive(map[int]bool{dead: true})

	// NEU's memcached comes back (empty): every gateway readmits it once
	// and keeps it, with no flapping, while the load goes on.
	readmitted := o.restartServer(t, pool.Servers[dead].NS, cmdline, pool.Servers[dead].Address, before)
	probe := deadKeys[0]
	if r := kv.exchange([][]byte{binSet(probe, "back")}, 1, 500*time.Millisecond); status(r[0]) != 0 {
		t.Fatalf("set %s after NEU's readmission: % x", probe, r[0])
	}
	if !heldKeys(t, client, pool.Servers[dead].Address, []string{probe})[probe] {
		t.Errorf("key %s of NEU's readmitted server was not set there", probe)
	}

	// A whole site killed (BOR's gateway agent, by PID): its keys fail
	// over within a second, and CLU's keys stay where they are.
	bor := -1
	for j, s := range pool.Servers {
		if s.Site == "BOR" {
			bor = j
		}
	}
	agentPID := 0
	for _, p := range o.st.Procs {
		if p.Name == "agent-bor" {
			agentPID = p.PID
		}
	}
	if agentPID == 0 {
		t.Fatal("no agent recorded for BOR")
	}
	var borKeys []string
	for _, k := range keys {
		if rg.Owner([]byte(k)) == bor {
			borKeys = append(borKeys, k)
		}
	}
	if err := syscall.Kill(agentPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = time.Now()
	served = 0
	for i := 0; time.Since(killed) < 3*time.Second && served == 0; i++ {
		if status(kv.exchange([][]byte{binSet(borKeys[i%len(borKeys)], "again")}, 1, 40*time.Millisecond)[0]) == 0 {
			served = time.Since(killed)
		}
	}
	t.Logf("killed BOR's gateway (pid %d): its keys served again after %v", agentPID, served.Round(time.Millisecond))
	if served == 0 || served > time.Second {
		t.Errorf("site failover took %v, want at most 1 s", served)
	}
	borKilled := killed
	time.Sleep(time.Second)
	load.halt()
	checkLive(map[int]bool{dead: true, bor: true})

	// The load: no request for a key of a server that stayed up failed;
	// NEU's and BOR's keys failed only around their kills.
	t.Logf("50/50 load from LAN: %d requests in %v", load.requests(), time.Since(loadStart).Round(time.Second))
	for j, s := range pool.Servers {
		oc := load.outcomes(j)
		t.Logf("keys of %s (%s): %v", s.Address, s.Site, oc)
		switch j {
		// A down server's keys fail until passive detection takes it out
		// (the first second), then only by the one trial request LAN lets
		// through per retry interval (1 s, then 2 s, 4 s: at most 3 in
		// NEU's outage, 1 in the second BOR's keys are loaded after the
		// kill) until the server is readmitted or its site declared lost.
		// A request sent up to its timeout (500 ms) before the kill may
		// fail too.
		case dead:
			t.Logf("NEU's keys failed at %v after the kill", oc.offsets(deadKilled))
			early := oc.failedWithin(deadKilled.Add(-500*time.Millisecond), deadKilled.Add(time.Second))
			late := oc.failedWithin(deadKilled.Add(time.Second), readmitted.Add(time.Second))
			t.Logf("NEU's keys: %d failed in the first second of its outage, %d after (trial requests)", early, late)
			if len(oc.Failed) != early+late || late > 3 {
				t.Errorf("requests for NEU's keys failed outside its outage or beyond its trials: %v", oc)
			}
		case bor:
			t.Logf("BOR's keys failed at %v after the kill", oc.offsets(borKilled))
			early := oc.failedWithin(borKilled.Add(-500*time.Millisecond), borKilled.Add(time.Second))
			if late := len(oc.Failed) - early; late > 1 {
				t.Errorf("%d requests for BOR's keys failed outside the first second after its site was killed, beyond one trial", late)
			}
		default:
			if len(oc.Failed) != 0 || oc.Misses != 0 || oc.Wrong != 0 || oc.OK == 0 {
				t.Errorf("keys of healthy server %s: %v", s.Address, oc)
			}
		}
	}

	// LAN's gateway exports the pool's counters per server, the failovers
	// and the errors it answered.
	metrics, err := o.inGateway("LAN", "curl", "-s", "--max-time", "3", "http://127.0.0.1:7447/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	neu := pool.Servers[dead].Address
	for _, want := range []string{
		`detour_kv_requests_total{pool="cache",server="` + neu + `"}`,
		`detour_kv_server_up{pool="cache",server="` + neu + `"}`,
		`detour_kv_pool_total{counter="errors",pool="cache"} 3`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if regexp.MustCompile(`detour_kv_pool_total\{counter="failed_over",pool="cache"\} [1-9]`).FindString(metrics) == "" {
		t.Error("metrics count no failover")
	}
}

func TestKVZZNothingLeftBehind(t *testing.T) { nothingLeftBehind(t, kvPrefix) }

// kvPool reads the one pool of a kv testbed from `testbed status --json`:
// the pool as the testbed lists it, its virtual address, and its servers
// as the ring takes them.
func (o *overlay) kvPool(t *testing.T) (testbed.KVPoolState, string, []ring.Server) {
	t.Helper()
	out, errOut, err := o.run("status", "--json")
	if err != nil {
		t.Fatalf("status: %v %s", err, errOut)
	}
	var st testbed.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.KVPools) != 1 {
		t.Fatalf("status lists pools %+v (%v)", st.KVPools, err)
	}
	pool := st.KVPools[0]
	vip := netip.AddrPortFrom(netip.MustParseAddr(pool.Address), uint16(pool.Port)).String()
	var rs []ring.Server
	for _, s := range pool.Servers {
		ap := netip.MustParseAddrPort(s.Address)
		rs = append(rs, ring.Server{Host: ap.Addr().String(), Port: ap.Port(), Weight: uint32(s.Weight)})
	}
	return pool, vip, rs
}

// kvSites are the sites of the kv scenario.
var kvSites = []string{"LAN", "BOR", "CLU", "NEU"}

// kvServerAt returns the server at addr as site's gateway shows it.
func (o *overlay) kvServerAt(site, addr string) (api.KVServer, bool) {
	out, err := o.detourIn(site, "kv", "show", "cache", "--json")
	var p api.KVPool
	if err != nil || json.Unmarshal([]byte(out), &p) != nil {
		return api.KVServer{}, false
	}
	for _, s := range p.Servers {
		if s.Address == addr {
			return s, true
		}
	}
	return api.KVServer{}, false
}

// kvStateChanges returns how many times each gateway has seen the server
// at addr change state so far.
func (o *overlay) kvStateChanges(t *testing.T, addr string) map[string]uint64 {
	t.Helper()
	n := map[string]uint64{}
	for _, site := range kvSites {
		s, ok := o.kvServerAt(site, addr)
		if !ok {
			t.Fatalf("%s does not show server %s", site, addr)
		}
		n[site] = s.StateChanges
	}
	return n
}

// restartServer starts a killed memcached again in namespace ns with the
// command line it had (killed by PID at the end of the test), waits until
// every gateway shows the server at addr up, and then checks for 5 s
// that none changes its mind: the server is readmitted once, with no
// flapping (since before, the state changes counted before the kill, a
// gateway shows at most two: out, then back). It returns when the last
// gateway readmitted it.
func (o *overlay) restartServer(t *testing.T, ns string, cmdline []byte, addr string, before map[string]uint64) time.Time {
	t.Helper()
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	mc := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	if err := mc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Process.Kill(); mc.Wait() })
	started := time.Now()
	upAt := map[string]time.Duration{}
	changes := map[string]uint64{}
	for len(upAt) < len(kvSites) {
		if time.Since(started) > 40*time.Second {
			t.Fatalf("memcached at %s restarted %v ago; up at %v only", addr, time.Since(started).Round(time.Second), upAt)
		}
		for _, site := range kvSites {
			if _, done := upAt[site]; done {
				continue
			}
			if s, ok := o.kvServerAt(site, addr); ok && s.State == "up" {
				upAt[site], changes[site] = time.Since(started), s.StateChanges-before[site]
				if changes[site] > 2 {
					t.Errorf("%s: server %s changed state %d times (out, readmitted: at most 2)", site, addr, changes[site])
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	last := time.Now()
	t.Logf("memcached at %s restarted: up again at each gateway after %v (state changes since the kill %v)", addr, upAt, changes)
	time.Sleep(5 * time.Second)
	for _, site := range kvSites {
		s, ok := o.kvServerAt(site, addr)
		if !ok || s.State != "up" || s.StateChanges-before[site] != changes[site] {
			t.Errorf("%s: server %s is %q with %d state changes since the kill, 5 s after it was readmitted with %d", site, addr, s.State, s.StateChanges-before[site], changes[site])
		}
	}
	return last
}
