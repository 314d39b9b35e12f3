//go:build netns

// Package test holds the tests that run detour for real in network
// namespaces (build tag netns, root required). This file tests the WAN
// testbed of issue 2: bring-up time, delay accuracy per pair and per
// direction, rate limits, link changes at run time, cross traffic,
// overlays, bad input, and cleanup.
package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/detour-overlay/detour/internal/lab/scenario"
	"github.com/detour-overlay/detour/internal/lab/testbed"
	"github.com/detour-overlay/detour/internal/lab/wanem"
)

// tbPrefix names the namespaces of these tests, apart from any testbed a
// developer runs with the default prefix.
const tbPrefix = "dtt-"

var (
	// bedDirs are the state directories of every testbed brought up.
	bedDirs   []string
	bedDirsMu sync.Mutex
	binOnce   sync.Once
	binPath   string
	labPath   string
	binErr    error
)

// detourBin returns the gateway's binary: $DETOUR_BIN, or one built once
// for the run.
func detourBin(t *testing.T) string {
	t.Helper()
	buildBins(t)
	return binPath
}

// labBin returns the lab's binary: $DETOUR_LAB_BIN, else detour-lab
// beside $DETOUR_BIN, or one built once for the run next to the detour
// it built. The lab runs the detour of $DETOUR_BIN as the sites' agents,
// since the tests' commands inherit the environment.
func labBin(t *testing.T) string {
	t.Helper()
	buildBins(t)
	return labPath
}

// buildBins finds or builds both binaries once and skips the test when
// not root.
func buildBins(t *testing.T) {
	t.Helper()
	binOnce.Do(func() { binPath, labPath, binErr = findBins() })
	if binErr != nil {
		t.Fatal(binErr)
	}
	if os.Geteuid() != 0 {
		t.Skip("namespace tests need root")
	}
}

func findBins() (detour, lab string, err error) {
	detour, lab = os.Getenv("DETOUR_BIN"), os.Getenv("DETOUR_LAB_BIN")
	if lab == "" && detour != "" {
		lab = filepath.Join(filepath.Dir(detour), "detour-lab")
	}
	if detour != "" {
		if _, err := os.Stat(lab); err != nil {
			return "", "", fmt.Errorf("the lab binary: %w (set DETOUR_LAB_BIN, or build it beside $DETOUR_BIN with make build)", err)
		}
		return detour, lab, nil
	}
	dir, err := os.MkdirTemp("", "detour-bin-")
	if err != nil {
		return "", "", err
	}
	os.Chmod(dir, 0o755) // the not-root test runs it as nobody
	detour, lab = filepath.Join(dir, "detour"), filepath.Join(dir, "detour-lab")
	for bin, pkg := range map[string]string{detour: "cmd/detour", lab: "cmd/detour-lab"} {
		out, err := exec.Command("go", "build", "-o", bin, "github.com/detour-overlay/detour/"+pkg).CombinedOutput()
		if err != nil {
			return "", "", fmt.Errorf("go build %s: %v: %s", pkg, err, out)
		}
	}
	return detour, lab, nil
}

// bed is one testbed brought up by a test. bin is the detour binary (the
// operator's commands), lab the detour-lab binary (the testbed's).
type bed struct {
	t      *testing.T
	bin    string
	lab    string
	dir    string
	st     *testbed.State
	sc     *scenario.Scenario
	upDur  time.Duration
	prefix string
}

// run runs `detour-lab testbed ARGS...` against the bed's state directory and
// namespace prefix.
func (b *bed) run(args ...string) (string, string, error) {
	cmd := exec.Command(b.lab, append([]string{"testbed"}, args...)...)
	cmd.Env = append(os.Environ(), "DETOUR_TESTBED_STATE="+b.dir, "DETOUR_TESTBED_PREFIX="+b.prefix)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// upBed brings a testbed up with the testbed tests' prefix.
func upBed(t *testing.T, scen string, args ...string) *bed {
	return upWith(t, tbPrefix, scen, args...)
}

// upWith brings a testbed up with namespace prefix prefix (the tests of
// each file have their own, since `testbed up` clears its prefix) and
// registers its removal, and that of any namespace of the prefix left
// behind, which runs even when the test fails.
func upWith(t *testing.T, prefix, scen string, args ...string) *bed {
	t.Helper()
	b := &bed{t: t, bin: detourBin(t), lab: labBin(t), dir: t.TempDir(), prefix: prefix}
	bedDirsMu.Lock()
	bedDirs = append(bedDirs, b.dir)
	bedDirsMu.Unlock()
	t.Cleanup(func() {
		if _, e, err := b.run("down"); err != nil {
			t.Errorf("down: %v: %s", err, e)
		}
		for _, ns := range namespaces(prefix) {
			t.Errorf("namespace left after down: %s", ns)
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	t0 := time.Now()
	out, errOut, err := b.run(append([]string{"up", scen}, args...)...)
	b.upDur = time.Since(t0)
	if err != nil {
		t.Fatalf("up %s: %v\n%s%s", scen, err, out, errOut)
	}
	if b.st, err = testbed.LoadState(b.dir); err != nil {
		t.Fatal(err)
	}
	if b.sc, err = scenario.Load(scen); err != nil {
		t.Fatal(err)
	}
	t.Logf("$ detour-lab testbed up %s %s  (prefix %s, %.2f s)", scen, strings.Join(args, " "), prefix, b.upDur.Seconds())
	return b
}

func namespaces(prefix string) []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// commandTimeout bounds every command a test runs in a namespace, so that
// a stuck one (an iperf3 whose peer is gone) fails its test, whose
// cleanups then run, instead of hanging the suite until its timeout.
const commandTimeout = 2 * time.Minute

// inNS runs a command in a namespace and returns its output.
func inNS(ns string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%v in %s: killed after %v: %w", args, ns, commandTimeout, err)
	}
	return string(out), err
}

var rttRE = regexp.MustCompile(`icmp_seq=(\d+) ttl=\d+ time=([0-9.]+) ms`)

// pingRTTs pings dst from namespace ns and returns the RTTs in ms.
func pingRTTs(ns, dst string, n int, interval string) ([]float64, error) {
	out, err := inNS(ns, "ping", "-n", "-c", strconv.Itoa(n), "-i", interval, "-W", "2", dst)
	var rtts []float64
	for _, m := range rttRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		rtts = append(rtts, v)
	}
	if err != nil && len(rtts) == 0 {
		return nil, fmt.Errorf("ping %s from %s: %v: %s", dst, ns, err, out)
	}
	return rtts, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// txMS is the time to send size bytes on a link, in ms (0 if unlimited).
func txMS(p scenario.LinkProps, size int) float64 {
	if p.Rate == 0 {
		return 0
	}
	return float64(size) * 8 / float64(p.Rate) * 1e3
}

func durMS(d time.Duration) float64 { return float64(d) / 1e6 }

// forPairs runs f for every ordered pair of sites (a != b) in parallel.
func forPairs(n int, f func(a, b int)) {
	var wg sync.WaitGroup
	for a := range n {
		for b := range n {
			if a != b {
				wg.Go(func() { f(a, b) })
			}
		}
	}
	wg.Wait()
}

// TestShippedScenariosUpAndDelays brings up leon-japan and lanman2017,
// checks the bring-up time, the median ping RTT of every pair of gateways
// against d(a,b)+d(b,a), and the one-way delay of every direction.
func TestShippedScenariosUpAndDelays(t *testing.T) {
	for _, name := range []string{"leon-japan", "lanman2017"} {
		t.Run(name, func(t *testing.T) {
			b := upBed(t, name)
			t.Logf("%s up in %.2fs", name, b.upDur.Seconds())
			if b.upDur > 10*time.Second {
				t.Errorf("up took %v, want under 10s", b.upDur)
			}
			checkPingRTT(t, b)
			checkOneWay(t, b)
		})
	}
}

func checkPingRTT(t *testing.T, b *bed) {
	var mu sync.Mutex
	forPairs(len(b.st.Sites), func(x, y int) {
		if x > y {
			return
		}
		rtts, err := pingRTTs(b.st.Sites[x].Gateway, b.st.Sites[y].Underlay, 50, "0.02")
		mu.Lock()
		defer mu.Unlock()
		if err != nil || len(rtts) != 50 {
			t.Errorf("%s-%s: %d replies of 50: %v", b.sc.Sites[x].Name, b.sc.Sites[y].Name, len(rtts), err)
			return
		}
		// A ping is 84 bytes of IP; on rate-limited links sending it
		// takes time too, which belongs to the configured link.
		pxy, pyx := b.sc.Link(x, y), b.sc.Link(y, x)
		want := durMS(pxy.Delay+pyx.Delay) + txMS(pxy, 84) + txMS(pyx, 84)
		got := median(rtts)
		t.Logf("ping %-8s-%-8s median RTT %8.3f ms, configured %8.3f ms, error %+.3f ms", b.sc.Sites[x].Name, b.sc.Sites[y].Name, got, want, got-want)
		if math.Abs(got-want) > 0.3 {
			t.Errorf("%s-%s: median RTT %.3f ms, configured %.3f ms: more than 0.3 ms off", b.sc.Sites[x].Name, b.sc.Sites[y].Name, got, want)
		}
	})
}

// udpIn opens a UDP socket bound to addr inside namespace ns. The socket
// stays in that namespace whatever thread later uses it.
func udpIn(ns, addr string) (*net.UDPConn, error) {
	type res struct {
		c   *net.UDPConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// The thread enters ns and is never used again: returning
		// without UnlockOSThread makes the runtime discard it.
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, err}
			return
		}
		la, err := net.ResolveUDPAddr("udp4", addr)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := net.ListenUDP("udp4", la)
		ch <- res{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// oneWay sends n timestamped datagrams from site a's gateway to site b's
// and returns the one-way delays in ms. All namespaces share the clock.
func oneWay(b *bed, x, y, n int) ([]float64, error) {
	src, err := udpIn(b.st.Sites[x].Gateway, b.st.Sites[x].Underlay+":0")
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := udpIn(b.st.Sites[y].Gateway, b.st.Sites[y].Underlay+":0")
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	base := time.Now()
	go func() {
		msg := make([]byte, 16)
		for i := range n {
			binary.BigEndian.PutUint64(msg, uint64(time.Since(base)))
			binary.BigEndian.PutUint64(msg[8:], uint64(i))
			src.WriteTo(msg, dst.LocalAddr())
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var delays []float64
	buf := make([]byte, 64)
	dst.SetReadDeadline(time.Now().Add(time.Duration(n)*10*time.Millisecond + 3*time.Second))
	for len(delays) < n {
		m, _, err := dst.ReadFrom(buf)
		now := time.Since(base)
		if err != nil {
			return delays, err
		}
		if m == 16 {
			delays = append(delays, durMS(now-time.Duration(binary.BigEndian.Uint64(buf))))
		}
	}
	return delays, nil
}

func checkOneWay(t *testing.T, b *bed) {
	var mu sync.Mutex
	forPairs(len(b.st.Sites), func(x, y int) {
		d, err := oneWay(b, x, y, 40)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Errorf("%s->%s: %v", b.sc.Sites[x].Name, b.sc.Sites[y].Name, err)
			return
		}
		p := b.sc.Link(x, y)
		want := durMS(p.Delay) + txMS(p, 44) // 16 bytes + UDP + IP
		got := median(d)
		t.Logf("one-way %-8s->%-8s median %8.3f ms, configured %8.3f ms, error %+.3f ms", b.sc.Sites[x].Name, b.sc.Sites[y].Name, got, want, got-want)
		if math.Abs(got-want) > 0.3 {
			t.Errorf("%s->%s: median one-way %.3f ms, configured %.3f ms", b.sc.Sites[x].Name, b.sc.Sites[y].Name, got, want)
		}
	})
}

func writeScenario(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTCPOn20MbitLink checks that a rate-limited link carries a TCP flow
// at close to its rate.
func TestTCPOn20MbitLink(t *testing.T) {
	b := upBed(t, writeScenario(t, `name: rate20
sites: [{name: A}, {name: B}]
links:
  default: {delay: 10ms}
  overrides:
    - {from: A, to: B, delay: 10ms, rate: 20mbit}
`))
	srv := exec.Command("ip", "netns", "exec", b.st.Sites[1].Gateway, "iperf3", "-s", "-1", "-p", "5301")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var out string
	var err error
	for try := 0; try < 20; try++ {
		time.Sleep(100 * time.Millisecond)
		out, err = inNS(b.st.Sites[0].Gateway, "iperf3", "-c", b.st.Sites[1].Underlay, "-p", "5301", "-t", "5", "-J")
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("iperf3: %v: %s", err, out)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("iperf3 output: %v", err)
	}
	mbit := res.End.SumReceived.BitsPerSecond / 1e6
	t.Logf("TCP over a 20 Mbit/s link: %.2f Mbit/s", mbit)
	if mbit < 17 || mbit > 20 {
		t.Errorf("TCP over a 20 Mbit/s link: %.2f Mbit/s, want 17-20", mbit)
	}
}

var pingTSRE = regexp.MustCompile(`^\[(\d+\.\d+)\] .*icmp_seq=(\d+) ttl=\d+ time=([0-9.]+) ms`)

type reply struct {
	seq       int
	recv, rtt float64 // unix seconds, ms
}

// TestLinkSetMidPing changes a link twice while ping runs every 10 ms:
// longer, then shorter. The RTT must follow within 100 ms, and no packet
// may be lost or reordered.
func TestLinkSetMidPing(t *testing.T) {
	b := upBed(t, "leon-japan")
	f, s := b.sc.SiteIndex("Fujisawa"), b.sc.SiteIndex("Seoul")
	ping := exec.Command("ip", "netns", "exec", b.st.Sites[f].Gateway, "ping", "-n", "-D", "-i", "0.01", "-c", "250", b.st.Sites[s].Underlay)
	var out bytes.Buffer
	ping.Stdout = &out
	if err := ping.Start(); err != nil {
		t.Fatal(err)
	}
	defer ping.Process.Kill()
	set := func(delay string) (float64, float64) {
		t0 := float64(time.Now().UnixNano()) / 1e9
		if _, e, err := b.run("link", "set", "Fujisawa", "Seoul", "--delay", delay); err != nil {
			t.Fatalf("link set: %v: %s", err, e)
		}
		return t0, float64(time.Now().UnixNano()) / 1e9
	}
	time.Sleep(800 * time.Millisecond)
	longStart, longDone := set("25.5ms") // RTT 32 -> 42 ms
	time.Sleep(800 * time.Millisecond)
	shortStart, shortDone := set("5.5ms") // RTT 42 -> 22 ms
	ping.Wait()
	var replies []reply
	for _, line := range strings.Split(out.String(), "\n") {
		if m := pingTSRE.FindStringSubmatch(line); m != nil {
			recv, _ := strconv.ParseFloat(m[1], 64)
			seq, _ := strconv.Atoi(m[2])
			rtt, _ := strconv.ParseFloat(m[3], 64)
			replies = append(replies, reply{seq, recv, rtt})
		}
	}
	if len(replies) != 250 {
		t.Errorf("%d replies of 250: packets lost", len(replies))
	}
	for i, r := range replies {
		if r.seq != i+1 {
			t.Fatalf("reply %d has icmp_seq %d: lost or reordered", i+1, r.seq)
		}
	}
	checkChange(t, replies, longStart, longDone, shortStart, 32, 42, "longer")
	checkChange(t, replies, shortStart, shortDone, math.Inf(1), 42, 22, "shorter")
}

// checkChange verifies that every ping sent from 100 ms after the change
// was requested until the next change has the new RTT, and reports how
// soon after the request the first packet with the new RTT was sent.
// Single pings on this busy 2-core machine are sometimes late by a few
// ms (never early), so a ping counts as changed when it is at least the
// new RTT - 0.5 ms and nearer to the new RTT than to the old one; the
// median of the changed pings must be within 0.5 ms of the new RTT, and
// at most 5 % of them may be such late outliers.
func checkChange(t *testing.T, rs []reply, start, done, next, old, want float64, what string) {
	first := math.NaN()
	var after []float64
	unchanged := 0
	for _, r := range rs {
		sent := r.recv - r.rtt/1e3
		if sent < start || sent >= next {
			continue
		}
		changed := r.rtt >= want-0.5 && math.Abs(r.rtt-want) < math.Abs(r.rtt-old)
		if changed && math.IsNaN(first) {
			first = sent
		}
		if sent >= start+0.1 {
			after = append(after, r.rtt)
			if !changed {
				unchanged++
				t.Logf("%s: ping sent %.0f ms after the request has RTT %.3f ms, want %.0f (was %.0f)", what, (sent-start)*1e3, r.rtt, want, old)
			}
		}
	}
	// A change later than 100 ms would leave at least 10 pings unchanged.
	if limit := max(2, len(after)/20); unchanged > limit {
		t.Errorf("%s: %d of %d pings sent 100 ms or more after the request still have the old RTT (at most %d late outliers allowed)", what, unchanged, len(after), limit)
	}
	if m := median(after); math.Abs(m-want) > 0.5 {
		t.Errorf("%s: median RTT after the change %.3f ms, want %.0f", what, m, want)
	}
	t.Logf("link set %s: command took %.1f ms; first ping with the new RTT (%.0f ms) sent %.1f ms after the request; median RTT after it %.3f ms", what, (done-start)*1e3, want, (first-start)*1e3, median(after))
}

// TestCrossTrafficLoadsCLULAN fills CLU<->LAN of lanman2017 with TCP and
// checks that its one-way delay (ground truth) rises from ~31 to ~65 ms.
func TestCrossTrafficLoadsCLULAN(t *testing.T) {
	b := upBed(t, "lanman2017")
	sock := filepath.Join(b.dir, "wanem.sock")
	sample := func(d time.Duration) []float64 {
		var v []float64
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			var tr wanem.Truth
			if err := wanem.Call(sock, wanem.Request{Op: "truth"}, &tr); err != nil {
				t.Fatal(err)
			}
			for _, l := range tr.Links {
				if l.From == "CLU" && l.To == "LAN" {
					v = append(v, l.ExpectedMS)
				}
			}
		}
		return v
	}
	idle := median(sample(500 * time.Millisecond))
	if _, e, err := b.run("traffic", "start", "clu-lan"); err != nil {
		t.Fatalf("traffic start: %v: %s", err, e)
	}
	time.Sleep(3 * time.Second)
	loaded := median(sample(10 * time.Second))
	if _, e, err := b.run("traffic", "stop", "clu-lan"); err != nil {
		t.Errorf("traffic stop: %v: %s", err, e)
	}
	t.Logf("CLU->LAN one-way delay: idle %.2f ms, loaded (median over 10 s) %.2f ms", idle, loaded)
	if idle != 31 {
		t.Errorf("idle CLU->LAN %.2f ms, want 31", idle)
	}
	if loaded < 55 || loaded > 75 {
		t.Errorf("loaded CLU->LAN %.2f ms, want about 65 (55-75)", loaded)
	}
	for _, p := range trafficLeft(b.dir) {
		t.Errorf("cross-traffic process %d still running after stop", p)
	}
}

// trafficLeft lists running iperf3 processes recorded for a bed.
func trafficLeft(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "traffic.json"))
	var procs []testbed.Proc
	json.Unmarshal(b, &procs)
	var pids []int
	for _, p := range procs {
		if p.Alive() {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// TestOverlaysConnectAllSites brings up lanman2017 over kernel VXLAN and
// over tinc and pings every host from every other site.
func TestOverlaysConnectAllSites(t *testing.T) {
	for _, overlay := range []string{"vxlan", "tinc"} {
		t.Run(overlay, func(t *testing.T) {
			b := upBed(t, "lanman2017", "--overlay", overlay)
			t.Logf("lanman2017 over %s up in %.2fs (host MTU %d)", overlay, b.upDur.Seconds(), b.st.HostMTU)
			var mu sync.Mutex
			forPairs(len(b.st.Sites), func(x, y int) {
				var err error
				for try := 0; try < 3; try++ {
					if _, err = pingRTTs(b.st.Sites[x].Hosts[0].NS, b.st.Sites[y].Hosts[0].Addr, 1, "0.2"); err == nil {
						break
					}
				}
				if err != nil {
					mu.Lock()
					t.Errorf("%s host -> %s host over %s: %v", b.sc.Sites[x].Name, b.sc.Sites[y].Name, overlay, err)
					mu.Unlock()
				}
			})
		})
	}
}

// TestBadInputCreatesNothing checks that bad scenarios and arguments get
// one clear error naming the problem, and that nothing is created.
func TestBadInputCreatesNothing(t *testing.T) {
	bin := labBin(t)
	head := "sites: [{name: A}, {name: B}]\nlinks:\n  default: {delay: 5ms}\n  overrides:\n"
	cases := []struct{ name, args, scen, want string }{
		{"unknown site", "", head + "    - {from: A, to: C, delay: 1ms}\n", `line 5: links.overrides[0].to: unknown site "C"`},
		{"negative delay", "", head + "    - {from: A, to: B, delay: -3ms}\n", "line 5: links.overrides[0].delay: -3ms is negative"},
		{"malformed rate", "", head + "    - {from: A, to: B, rate: 10mbits}\n", `line 5: links.overrides[0].rate: "10mbits" is not a rate`},
		{"duplicate link", "", head + "    - {from: A, to: B, delay: 1ms}\n    - {from: A, to: B, delay: 2ms}\n", "line 6: links.overrides[1]: duplicate link A->B"},
		{"unknown overlay", "--overlay=zerotier", head + "    - {from: A, to: B, delay: 1ms}\n", `--overlay "zerotier"`},
		{"unknown scenario", "", "", `unknown scenario "no-such-scenario"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			target := "no-such-scenario"
			if c.scen != "" {
				target = writeScenario(t, c.scen)
			}
			args := []string{"testbed", "up", target}
			if c.args != "" {
				args = append(args, c.args)
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "DETOUR_TESTBED_STATE="+dir, "DETOUR_TESTBED_PREFIX="+tbPrefix)
			out, err := cmd.CombinedOutput()
			msg := strings.TrimSpace(string(out))
			if err == nil {
				t.Fatalf("accepted: %s", msg)
			}
			if !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 0 {
				t.Errorf("error %q: want one line containing %q", msg, c.want)
			}
			if ns := namespaces(tbPrefix); len(ns) > 0 {
				t.Errorf("namespaces created: %v", ns)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				t.Errorf("state created: %v", entries)
			}
		})
	}
	t.Run("not root", func(t *testing.T) {
		cmd := exec.Command(bin, "testbed", "up", "leon-japan")
		cmd.Env = append(os.Environ(), "DETOUR_TESTBED_STATE="+t.TempDir(), "DETOUR_TESTBED_PREFIX="+tbPrefix)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "needs root") {
			t.Errorf("as nobody: %v: %s", err, out)
		}
	})
}

// TestZZNothingLeftBehind runs last in this file: no namespace with the
// tests' prefix and no process of theirs may remain.
func TestZZNothingLeftBehind(t *testing.T) { nothingLeftBehind(t, tbPrefix) }

// nothingLeftBehind fails if a namespace with the prefix, or a process
// naming the prefix or one of the tests' state directories, remains.
func nothingLeftBehind(t *testing.T, prefix string) {
	detourBin(t)
	if ns := namespaces(prefix); len(ns) > 0 {
		t.Errorf("namespaces left: %v", ns)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		mine := strings.Contains(cmd, prefix)
		bedDirsMu.Lock()
		for _, d := range bedDirs {
			mine = mine || strings.Contains(cmd, d)
		}
		bedDirsMu.Unlock()
		if mine {
			t.Errorf("process left: %s: %s", filepath.Dir(p), cmd)
		}
	}
}
