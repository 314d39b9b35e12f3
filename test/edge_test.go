//go:build netns

// This file tests the federation edge of issue 5 end to end, in real
// namespaces: encryption on the wire (no plaintext, unlisted keys refused,
// replays dropped, forged control ignored), isolated virtual networks with
// overlapping addresses, hosts at MTU 1500 over a 1400-byte underlay
// through a relay, rate limits, host migration with an open TCP
// connection, the cost of encryption, and bad keys in a configuration.
//
// Longer versions of the measurements run from scripts/bench-edge.sh,
// through DETOUR_EDGE_SECONDS (length of each iperf3 run, default 4).
package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/lab/testbed"
	"github.com/detour-overlay/detour/internal/wire"
)

// ---- helpers ----

// edPrefix names the namespaces of these tests: other tests of the
// package run concurrently under their own prefixes, and `testbed up`
// clears the namespaces of its prefix.
const edPrefix = "dte-"

// upEdge brings a testbed up with prefix edPrefix and registers its
// removal, which runs even when the test fails.
func upEdge(t *testing.T, scen string, args ...string) *overlay {
	t.Helper()
	return withAgents(t, upWith(t, edPrefix, scen, args...))
}

// detourIn runs the detour binary in site's gateway namespace (against
// its agent's API) and returns its combined output.
func (o *overlay) detourIn(site string, args ...string) (string, error) {
	gw := o.st.Sites[o.idx(site)].Gateway
	out, err := exec.Command("ip", append([]string{"netns", "exec", gw, o.bin}, args...)...).CombinedOutput()
	return string(out), err
}

// mustDetour is detourIn that fails the test on error and logs the
// command.
func (o *overlay) mustDetour(t *testing.T, site string, args ...string) string {
	t.Helper()
	out, err := o.detourIn(site, args...)
	if err != nil {
		t.Fatalf("%s: detour %s: %v: %s", site, strings.Join(args, " "), err, out)
	}
	t.Logf("%s$ detour %s", site, strings.Join(args, " "))
	return out
}

// counters returns site's counters from `detour status --json`.
func (o *overlay) counters(t *testing.T, site string) map[string]uint64 {
	t.Helper()
	s, err := o.status(o.idx(site))
	if err != nil {
		t.Fatalf("%s: status: %v", site, err)
	}
	return s.Counters
}

// delta returns after-before for the named counters, as "name+d" text
// and a map.
func delta(before, after map[string]uint64, names ...string) (map[string]uint64, string) {
	d := map[string]uint64{}
	if os.Getenv("DETOUR_EDGE_DEBUG") != "" {
		var all []string
		for k, v := range after {
			if v != before[k] {
				all = append(all, fmt.Sprintf("%s%+d", k, int64(v-before[k])))
			}
		}
		fmt.Println("DEBUG delta:", strings.Join(all, " "))
	}
	var parts []string
	for _, n := range names {
		d[n] = after[n] - before[n]
		parts = append(parts, fmt.Sprintf("%s+%d", n, d[n]))
	}
	return d, strings.Join(parts, " ")
}

// capture is a running tcpdump writing a pcap file.
type capture struct {
	cmd  *exec.Cmd
	file string
	done bool
}

// startCapture runs tcpdump on dev in namespace ns, writing every packet
// in full to a file, and waits until it listens. It is stopped by stop
// or, at the latest, by the test's cleanup.
func startCapture(t *testing.T, ns, dev string, filter ...string) *capture {
	t.Helper()
	file := filepath.Join(t.TempDir(), strings.ReplaceAll(ns, ".", "_")+"-"+dev+".pcap")
	args := append([]string{"netns", "exec", ns, "tcpdump", "-i", dev, "-n", "-U", "-s", "0", "-w", file}, filter...)
	cmd := exec.Command("ip", args...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &capture{cmd: cmd, file: file}
	t.Cleanup(func() { c.stop() })
	ready := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		var seen []byte
		closed := false
		for {
			n, err := stderr.Read(buf)
			seen = append(seen, buf[:n]...)
			if !closed && bytes.Contains(seen, []byte("listening on")) {
				close(ready)
				closed = true
			}
			if err != nil {
				if !closed {
					close(ready)
				}
				return
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatalf("tcpdump on %s in %s did not start", dev, ns)
	}
	return c
}

// stop ends tcpdump (SIGINT to its PID, so that it flushes) and returns
// the captured packets.
func (c *capture) stop() []capPacket {
	if !c.done {
		c.done = true
		time.Sleep(100 * time.Millisecond)
		c.cmd.Process.Signal(syscall.SIGINT)
		ch := make(chan struct{})
		go func() { c.cmd.Wait(); close(ch) }()
		select {
		case <-ch:
		case <-time.After(3 * time.Second):
			c.cmd.Process.Kill()
			<-ch
		}
	}
	pk, _ := readPcap(c.file)
	return pk
}

// capPacket is one captured packet: its link type and bytes.
type capPacket struct {
	link uint32
	data []byte
}

// readPcap reads a classic pcap file (any byte order, micro or nano
// seconds).
func readPcap(file string) ([]capPacket, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if len(b) < 24 {
		return nil, fmt.Errorf("%s: short pcap", file)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch binary.LittleEndian.Uint32(b) {
	case 0xa1b2c3d4, 0xa1b23c4d:
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("%s: not a pcap file", file)
	}
	link := bo.Uint32(b[20:])
	var out []capPacket
	for off := 24; off+16 <= len(b); {
		n := int(bo.Uint32(b[off+8:]))
		if off+16+n > len(b) {
			break
		}
		out = append(out, capPacket{link: link, data: b[off+16 : off+16+n]})
		off += 16 + n
	}
	return out, nil
}

// ipv4 returns the IPv4 packet inside a captured packet (raw IP or
// Ethernet link types), or nil.
func (p capPacket) ipv4() []byte {
	d := p.data
	switch p.link {
	case 1: // Ethernet
		if len(d) < 14 || binary.BigEndian.Uint16(d[12:]) != 0x0800 {
			return nil
		}
		d = d[14:]
	case 101, 12, 228: // raw IP
	default:
		return nil
	}
	if len(d) < 20 || d[0]>>4 != 4 {
		return nil
	}
	return d
}

// udpPayload returns the UDP payload of an IPv4 packet, or nil.
func udpPayload(ip []byte) []byte {
	if ip == nil || ip[9] != 17 {
		return nil
	}
	ihl := int(ip[0]&15) * 4
	if len(ip) < ihl+8 || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 { // fragments excluded
		return nil
	}
	return ip[ihl+8:]
}

// inNSThread runs f on a thread that entered namespace ns; the thread is
// then discarded.
func inNSThread(ns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := os.Open("/run/netns/" + ns)
		if err != nil {
			ch <- err
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		ch <- f()
	}()
	return <-ch
}

// rawSend sends whole IPv4 packets (headers included, as captured or as
// built by udpPacket) from namespace ns with a raw socket, spaced by gap.
func rawSend(ns string, pkts [][]byte, gap time.Duration) (int, error) {
	sent := 0
	err := inNSThread(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, p := range pkts {
			var dst [4]byte
			copy(dst[:], p[16:20])
			if err := unix.Sendto(fd, p, 0, &unix.SockaddrInet4{Addr: dst}); err != nil {
				return err
			}
			sent++
			time.Sleep(gap)
		}
		return nil
	})
	return sent, err
}

// udpPacket builds an IPv4/UDP packet (UDP checksum 0: none).
func udpPacket(src, dst string, sport, dport int, payload []byte) []byte {
	p := make([]byte, 28+len(payload))
	p[0], p[8], p[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	copy(p[12:16], net.ParseIP(src).To4())
	copy(p[16:20], net.ParseIP(dst).To4())
	binary.BigEndian.PutUint16(p[20:], uint16(sport))
	binary.BigEndian.PutUint16(p[22:], uint16(dport))
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
	copy(p[28:], payload)
	return p
}

// listenIn opens a TCP listener inside namespace ns.
func listenIn(ns, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNSThread(ns, func() error {
		var err error
		l, err = net.Listen("tcp4", addr)
		return err
	})
	return l, err
}

// iperfResult is what the tests read from iperf3 -J.
type iperfResult struct {
	RecvMbps, SentMbps float64
	LostPercent        float64
	Packets, Lost      int
	Intervals          []float64 // received Mbit/s per interval
	// RcvbufDrops is how many datagrams the receiving host's kernel
	// dropped during the run because a UDP socket's buffer was full (Udp
	// RcvbufErrors in its namespace): the receiving iperf3, descheduled on
	// a loaded machine, read too late. They count in Lost but were
	// delivered by the network.
	RcvbufDrops int
}

// NetworkLost is how many of the lost datagrams the network lost: those
// the receiving host's full socket buffer dropped are not its doing.
func (r iperfResult) NetworkLost() int { return max(0, r.Lost-r.RcvbufDrops) }

// udpRcvbufErrors reads the count of UDP datagrams dropped for a full
// socket buffer in namespace ns.
func udpRcvbufErrors(t *testing.T, ns string) int {
	t.Helper()
	out, err := inNS(ns, "cat", "/proc/net/snmp")
	if err != nil {
		t.Fatalf("/proc/net/snmp in %s: %v: %s", ns, err, out)
	}
	n, err := snmpField(out, "Udp", "RcvbufErrors")
	if err != nil {
		t.Fatalf("/proc/net/snmp in %s: %v", ns, err)
	}
	return n
}

// snmpField returns one counter of /proc/net/snmp, whose protocols each
// have a line of names followed by a line of values.
func snmpField(snmp, proto, name string) (int, error) {
	var names []string
	for line := range strings.Lines(snmp) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		for i, n := range names {
			if n == name && i+1 < len(f) {
				return strconv.Atoi(f[i+1])
			}
		}
		break
	}
	return 0, fmt.Errorf("no %s %s", proto, name)
}

// iperfNS runs an iperf3 client in srcNS against a one-shot server in
// dstNS (at dstAddr) and returns its result. Extra client args follow.
func iperfNS(t *testing.T, srcNS, dstNS, dstAddr string, port int, args ...string) iperfResult {
	t.Helper()
	srv := exec.Command("ip", "netns", "exec", dstNS, "iperf3", "-s", "-1", "-p", strconv.Itoa(port))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	drops := udpRcvbufErrors(t, dstNS)
	var out string
	var err error
	for try := 0; try < 30; try++ {
		time.Sleep(100 * time.Millisecond)
		out, err = inNS(srcNS, append([]string{"iperf3", "-c", dstAddr, "-p", strconv.Itoa(port), "-J"}, args...)...)
		if err == nil || !strings.Contains(out, "connect") {
			break
		}
	}
	if err != nil {
		t.Fatalf("iperf3 %s -> %s %v: %v: %.400s", srcNS, dstAddr, args, err, out)
	}
	var res struct {
		Intervals []struct {
			Sum struct {
				BPS float64 `json:"bits_per_second"`
			} `json:"sum"`
		} `json:"intervals"`
		End struct {
			SumReceived struct {
				BPS float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			SumSent struct {
				BPS float64 `json:"bits_per_second"`
			} `json:"sum_sent"`
			Sum struct {
				BPS         float64 `json:"bits_per_second"`
				LostPercent float64 `json:"lost_percent"`
				Packets     int     `json:"packets"`
				Lost        int     `json:"lost_packets"`
			} `json:"sum"`
		} `json:"end"`
	}
	if i := strings.Index(out, "{"); i > 0 { // warnings on stderr first
		out = out[i:]
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("iperf3 output: %v: %.400s", err, out)
	}
	r := iperfResult{RecvMbps: res.End.SumReceived.BPS / 1e6, SentMbps: res.End.SumSent.BPS / 1e6,
		LostPercent: res.End.Sum.LostPercent, Packets: res.End.Sum.Packets, Lost: res.End.Sum.Lost,
		RcvbufDrops: udpRcvbufErrors(t, dstNS) - drops}
	if r.RecvMbps == 0 { // UDP
		r.RecvMbps = res.End.Sum.BPS / 1e6
	}
	for _, iv := range res.Intervals {
		r.Intervals = append(r.Intervals, iv.Sum.BPS/1e6)
	}
	return r
}

// host returns site's first host.
func (o *overlay) host(site string) testbed.HostState { return o.st.Sites[o.idx(site)].Hosts[0] }

func (o *overlay) gw(site string) string { return o.st.Sites[o.idx(site)].Gateway }

// agentKeys reads every site's public key from the testbed's agent
// configurations (each site's key appears in the others' peer lists).
func (o *overlay) agentKeys(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range o.st.Sites {
		b, err := os.ReadFile(filepath.Join(o.dir, "detour", strings.ToLower(s.Name)+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var name string
		for _, line := range strings.Split(string(b), "\n") {
			l := strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(l, "- name: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(l, "public_key: "); ok && name != "" {
				out[name] = v
			}
		}
	}
	return out
}

// sendTCP sends data over TCP from namespace srcNS to addr (a listener in
// another namespace, which reads it all).
func sendTCP(srcNS, addr string, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialIn(ctx, srcNS, "tcp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Write(data)
	return err
}

// sink accepts connections on l and counts the bytes it reads.
func sink(l net.Listener) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				buf := make([]byte, 64<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			})
		}
	})
	return &wg
}

// ---- 1. encryption ----

// marker is the known payload the captures look for.
const marker = "DETOUR-EDGE-PLAINTEXT-MARKER-0123456789"

// transferMarker sends 256 KB made of the marker from Fujisawa's host to
// Seoul's host (through Inagi) over TCP.
func (o *overlay) transferMarker(t *testing.T) {
	t.Helper()
	dst := o.host("Seoul")
	l, err := listenIn(dst.NS, dst.Addr+":5400")
	if err != nil {
		t.Fatal(err)
	}
	wg := sink(l)
	defer func() { l.Close(); wg.Wait() }()
	data := bytes.Repeat([]byte(marker), 256<<10/len(marker))
	if err := sendTCP(o.host("Fujisawa").NS, dst.Addr+":5400", data); err != nil {
		t.Fatalf("transfer: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
}

// markerHits counts captured packets that contain the marker (or its
// first 16 bytes, so that a marker cut by a segment boundary counts too).
func markerHits(pk []capPacket) int {
	n := 0
	for _, p := range pk {
		if bytes.Contains(p.data, []byte(marker[:16])) {
			n++
		}
	}
	return n
}

// captureTransfer captures the underlay of Fujisawa (source) and Inagi
// (the relay) during a marker transfer and returns the hits and packet
// counts.
func (o *overlay) captureTransfer(t *testing.T) (hits, pkts map[string]int, fuj []capPacket) {
	if _, err := o.waitPath("Fujisawa", "Seoul", "Inagi>Seoul", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	caps := map[string]*capture{}
	for _, s := range []string{"Fujisawa", "Inagi"} {
		caps[s] = startCapture(t, o.gw(s), "wan0", "udp")
	}
	o.transferMarker(t)
	pingRTTs(o.host("Fujisawa").NS, o.host("Inagi").Addr, 30, "0.02") // direct packets too
	hits, pkts = map[string]int{}, map[string]int{}
	for s, c := range caps {
		pk := c.stop()
		hits[s], pkts[s] = markerHits(pk), len(pk)
		if s == "Fujisawa" {
			fuj = pk
		}
	}
	return hits, pkts, fuj
}

// forgedLinkState is an unsealed link-state message from Inagi saying
// that its link to Seoul takes a second: were it believed, Fujisawa would
// leave the path through Inagi.
func (o *overlay) forgedLinkState(seq uint32) []byte {
	ls := wire.LinkState{Origin: wire.SiteIDFromName("Inagi"), Incarnation: uint64(time.Now().UnixNano()) * 4, Seq: seq,
		Entries: []wire.LinkEntry{
			{Peer: wire.SiteIDFromName("Seoul"), Flags: wire.LinkFlagUp, RTT: 2_000_000, Delay: int64(time.Second)},
			{Peer: wire.SiteIDFromName("Fujisawa"), Flags: wire.LinkFlagUp, RTT: 4_000, Delay: int64(2 * time.Millisecond)},
		}}
	b, _ := wire.AppendLinkState(nil, &ls)
	return b
}

// injectForged sends n forged link-state messages and n forged probes
// from Inagi's gateway, with Inagi's underlay address and agent port, to
// Fujisawa's agent.
func (o *overlay) injectForged(t *testing.T, n int) {
	t.Helper()
	in, fu := o.st.Sites[o.idx("Inagi")].Underlay, o.st.Sites[o.idx("Fujisawa")].Underlay
	var pkts [][]byte
	for k := range n {
		pkts = append(pkts, udpPacket(in, fu, 4800, 4800, o.forgedLinkState(uint32(k+1))))
		pr := wire.Probe{Sender: wire.SiteIDFromName("Inagi"), Receiver: wire.SiteIDFromName("Fujisawa"), Seq: uint32(1 << 30), SendTime: time.Now().UnixNano()}
		pkts = append(pkts, udpPacket(in, fu, 4800, 4800, wire.AppendProbe(nil, &pr)))
	}
	if sent, err := rawSend(o.gw("Inagi"), pkts, 50*time.Millisecond); err != nil {
		t.Fatalf("forged control: sent %d: %v", sent, err)
	}
}

// TestEdgeEncryption: the payload of a relayed transfer never appears on
// the underlay of the source or of the relay with --overlay detour (and
// does with detour-plain); forged unsealed control messages, replayed
// sealed datagrams, altered relayed datagrams and agents whose key is not
// listed are all dropped and counted, and move no route.
func TestEdgeEncryption(t *testing.T) {
	t.Run("detour-plain shows the marker", func(t *testing.T) {
		o := upEdge(t, "leon-japan", "--overlay", "detour-plain")
		hits, pkts, _ := o.captureTransfer(t)
		t.Logf("detour-plain: tcpdump -i wan0 udp in Fujisawa's gateway: %d of %d packets contain the marker; in Inagi's (relay): %d of %d", hits["Fujisawa"], pkts["Fujisawa"], hits["Inagi"], pkts["Inagi"])
		if hits["Fujisawa"] < 50 || hits["Inagi"] < 50 {
			t.Errorf("in the clear the marker should be on the wire: %v hits", hits)
		}
		// The same forgery as below, unencrypted: the positive control.
		o.injectForged(t, 20)
		time.Sleep(500 * time.Millisecond)
		t.Logf("detour-plain: after 20 forged link-state messages from Inagi, Fujisawa's path to Seoul is %q", o.path(o.idx("Fujisawa"), "Seoul"))
	})
	t.Run("detour", func(t *testing.T) {
		o := upEdge(t, "leon-japan", "--overlay", "detour")
		hits, pkts, fuj := o.captureTransfer(t)
		t.Logf("detour: tcpdump -i wan0 udp in Fujisawa's gateway: %d of %d packets contain the marker; in Inagi's (relay): %d of %d", hits["Fujisawa"], pkts["Fujisawa"], hits["Inagi"], pkts["Inagi"])
		if pkts["Fujisawa"] < 100 || pkts["Inagi"] < 100 {
			t.Fatalf("captures too small to mean anything: %v", pkts)
		}
		if hits["Fujisawa"] != 0 || hits["Inagi"] != 0 {
			t.Errorf("plaintext on the encrypted underlay: %v packets contain the marker", hits)
		}
		t.Run("replays", func(t *testing.T) { o.checkReplays(t, fuj) })
		t.Run("forged control", func(t *testing.T) { o.checkForged(t) })
		t.Run("altered packets", func(t *testing.T) { o.checkAltered(t, fuj) })
		t.Run("unlisted keys", func(t *testing.T) { o.checkRogues(t) })
	})
}

// inbound returns the UDP payloads of captured packets addressed to dst,
// by the type of the detour message, with the whole IP packets.
func inbound(pk []capPacket, dst string) map[wire.Type][][]byte {
	out := map[wire.Type][][]byte{}
	want := net.ParseIP(dst).To4()
	for _, p := range pk {
		ip := p.ipv4()
		u := udpPayload(ip)
		if len(u) < 4 || !bytes.Equal(ip[16:20], want) || u[0] != 0xD7 {
			continue
		}
		out[wire.Type(u[2])] = append(out[wire.Type(u[2])], append([]byte(nil), ip...))
	}
	return out
}

// siteOf returns the gateway namespace of the site whose underlay address
// is the source of an IPv4 packet.
func (o *overlay) siteOf(ip []byte) string {
	src := net.IP(ip[12:16]).String()
	for _, s := range o.st.Sites {
		if s.Underlay == src {
			return s.Gateway
		}
	}
	return ""
}

// checkReplays resends, from their own sites' gateways, sealed data
// packets and sealed control messages that Fujisawa has already received.
func (o *overlay) checkReplays(t *testing.T, fuj []capPacket) {
	in := inbound(fuj, o.st.Sites[o.idx("Fujisawa")].Underlay)
	data, ctl := in[wire.TypeData], in[wire.TypeSealed]
	t.Logf("captured at Fujisawa: %d sealed data packets, %d sealed control messages", len(data), len(ctl))
	if len(data) < 20 || len(ctl) < 3 {
		t.Fatalf("too few captured packets to replay: %d data, %d control", len(data), len(ctl))
	}
	data, ctl = data[len(data)-20:], ctl[max(0, len(ctl)-20):]
	before := o.counters(t, "Fujisawa")
	for _, set := range [][][]byte{data, ctl} {
		bySite := map[string][][]byte{}
		for _, p := range set {
			bySite[o.siteOf(p)] = append(bySite[o.siteOf(p)], p)
		}
		for ns, pk := range bySite {
			if _, err := rawSend(ns, pk, 2*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	after := o.counters(t, "Fujisawa")
	d, text := delta(before, after, "session_replays", "drop_crypto", "session_auth_failures", "session_hop_auth_failures", "frames_in", "control_in")
	t.Logf("replayed %d sealed data packets and %d sealed control messages to Fujisawa (raw socket in the senders' gateways): %s", len(data), len(ctl), text)
	if n := uint64(len(data) + len(ctl)); d["session_replays"] < n {
		t.Errorf("session_replays rose by %d for %d replayed datagrams", d["session_replays"], n)
	}
	if d["drop_crypto"] < 20 {
		t.Errorf("drop_crypto rose by %d for 20 replayed data packets", d["drop_crypto"])
	}
}

// checkForged sends unsealed link-state messages and probes that claim to
// come from Inagi (its address and port): Fujisawa drops and counts them,
// and its route to Seoul stays through Inagi.
func (o *overlay) checkForged(t *testing.T) {
	before := o.counters(t, "Fujisawa")
	// Fujisawa's view of the link Inagi->Seoul, sampled every 100 ms
	// while the forgeries arrive and for a second after.
	var worst float64
	var samples int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var links []api.Link
			if err := o.api[o.idx("Fujisawa")].Get("/v1/links", &links); err == nil {
				for _, l := range links {
					if l.From == "Inagi" && l.To == "Seoul" {
						worst = max(worst, l.RTTMs, l.OneWayMs)
						samples++
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	o.injectForged(t, 20)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	after := o.counters(t, "Fujisawa")
	d, text := delta(before, after, "control_unsealed_dropped", "control_in_packets_link-state")
	p := o.path(o.idx("Fujisawa"), "Seoul")
	t.Logf("20 forged link-state messages (Inagi->Seoul 1 s) and 20 forged probes from Inagi's address: %s; Fujisawa's link Inagi->Seoul at most %.1f ms (RTT or one way, %d samples of detour links); path to Seoul %q", text, worst, samples, p)
	if d["control_unsealed_dropped"] < 40 {
		t.Errorf("control_unsealed_dropped rose by %d for 40 forged messages", d["control_unsealed_dropped"])
	}
	if samples == 0 || worst > 100 {
		t.Errorf("forged link state reached Fujisawa's matrix: Inagi->Seoul up to %.1f ms (%d samples)", worst, samples)
	}
	if p != "Inagi>Seoul" {
		t.Errorf("Fujisawa's path to Seoul after the forgeries: %q", p)
	}
}

// checkAltered alters captured data packets the way an attacker on the
// underlay would and sends them to Fujisawa from Inagi's gateway: the
// frame gets a flipped bit and the counters a fresh value (so that the
// replay window does not stop them first). Both fail authentication at
// Fujisawa (the destination checks the end-to-end tag). Afterwards traffic still flows: unauthenticated
// counters did not move the replay windows. (A relay holding its hop key
// could re-tag; what stops it then is the end-to-end tag, exercised here
// on the direct packets and by the unit tests of internal/session and
// internal/datapath/crypto_test.go.)
func (o *overlay) checkAltered(t *testing.T, fuj []capPacket) {
	data := inbound(fuj, o.st.Sites[o.idx("Fujisawa")].Underlay)[wire.TypeData]
	var relayed, direct [][]byte
	for _, p := range data {
		ihl := int(p[0]&15) * 4
		u := p[ihl+8:]
		if len(u) < 6 || o.siteOf(p) != o.gw("Inagi") {
			continue
		}
		pathLen := int(u[5])
		hl := 16 + 4*pathLen
		if len(u) < hl+wire.SealedDataOverhead(pathLen)+20 {
			continue
		}
		q := append([]byte(nil), p...)
		u = q[ihl+8:]
		binary.BigEndian.PutUint64(u[hl+4:], binary.BigEndian.Uint64(u[hl+4:])+1<<20)
		if pathLen > 1 {
			binary.BigEndian.PutUint64(u[hl+16:], binary.BigEndian.Uint64(u[hl+16:])+1<<20)
		}
		u[len(u)-20] ^= 0x01                     // inside the encrypted frame
		binary.BigEndian.PutUint16(q[ihl+6:], 0) // no UDP checksum
		if pathLen > 1 && len(relayed) < 20 {
			relayed = append(relayed, q)
		} else if pathLen == 1 && len(direct) < 20 {
			direct = append(direct, q)
		}
	}
	t.Logf("altering %d relayed (Seoul->Inagi->Fujisawa) and %d direct (Inagi->Fujisawa) data packets", len(relayed), len(direct))
	if len(relayed) < 10 || len(direct) < 5 {
		t.Fatalf("too few captured data packets from Inagi: %d relayed, %d direct", len(relayed), len(direct))
	}
	before := o.counters(t, "Fujisawa")
	if _, err := rawSend(o.gw("Inagi"), append(relayed, direct...), 2*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	after := o.counters(t, "Fujisawa")
	d, text := delta(before, after, "drop_crypto", "session_auth_failures", "session_hop_auth_failures", "session_replays", "frames_in")
	t.Logf("altered packets (one bit flipped in the sealed frame, counters +2^20) sent to Fujisawa from Inagi's gateway: %s", text)
	if n := uint64(len(relayed) + len(direct)); d["session_auth_failures"]+d["session_hop_auth_failures"] < n {
		t.Errorf("authentication failures rose by %d+%d for %d altered packets", d["session_auth_failures"], d["session_hop_auth_failures"], n)
	}
	if d["drop_crypto"] < uint64(len(relayed)+len(direct)) {
		t.Errorf("drop_crypto rose by %d for %d altered packets", d["drop_crypto"], len(relayed)+len(direct))
	}
	for _, dst := range []string{"Inagi", "Seoul"} {
		rtts, _ := pingRTTs(o.host("Fujisawa").NS, o.host(dst).Addr, 10, "0.05")
		t.Logf("after the altered packets: ping Fujisawa host -> %s host: %d of 10 replies", dst, len(rtts))
		if len(rtts) < 9 {
			t.Errorf("traffic Fujisawa <-> %s broken after altered packets: %d of 10 replies", dst, len(rtts))
		}
	}
}

// rogue is an agent started by hand in Seoul's gateway namespace, on its
// own port, TAP device and API address.
type rogue struct {
	name, site, tap, api string
	port                 int
	keyed                bool // with a private key of its own (not listed anywhere)
}

// checkRogues starts three agents whose keys no site lists: a new site
// with a key, a site that claims to be Seoul with its own key, and a site
// without keys. None joins, none delivers a frame, and Fujisawa counts
// their attempts.
func (o *overlay) checkRogues(t *testing.T) {
	keys := o.agentKeys(t)
	seoulGW := o.gw("Seoul")
	rogues := []rogue{
		{name: "new site with an unlisted key", site: "Mallory", tap: "rogue1", api: "127.0.0.1:7461", port: 4801, keyed: true},
		{name: "Seoul's name with another key", site: "Seoul", tap: "rogue2", api: "127.0.0.1:7462", port: 4802, keyed: true},
		{name: "a site without keys", site: "Eve", tap: "rogue3", api: "127.0.0.1:7463", port: 4803},
	}
	before := map[string]map[string]uint64{}
	for _, s := range []string{"Fujisawa", "Inagi"} {
		before[s] = o.counters(t, s)
	}
	for k, r := range rogues {
		conf := fmt.Sprintf("site: %s\nlisten: %s:%d\napi: %s\n", r.site, o.st.Sites[o.idx("Seoul")].Underlay, r.port, r.api)
		if r.keyed {
			priv, err := exec.Command(o.bin, "genkey").Output()
			if err != nil {
				t.Fatal(err)
			}
			conf += "private_key: " + strings.TrimSpace(string(priv)) + "\n"
		}
		conf += "peers:\n"
		for _, p := range []string{"Fujisawa", "Inagi"} {
			conf += fmt.Sprintf("  - name: %s\n    address: %s:4800\n", p, o.st.Sites[o.idx(p)].Underlay)
			if r.keyed {
				conf += "    public_key: " + keys[p] + "\n"
			}
		}
		conf += fmt.Sprintf("networks:\n  - {name: default, id: 1, tap: %s, mtu: 1400, queue_len: 2048}\n", r.tap)
		file := filepath.Join(t.TempDir(), fmt.Sprintf("rogue%d.yaml", k))
		// Seoul's own agent has the namespace's default socket.
		conf += fmt.Sprintf("api_socket: %s\n", strings.TrimSuffix(file, ".yaml")+".sock")
		os.WriteFile(file, []byte(conf), 0o600)
		logf, _ := os.Create(file + ".log")
		cmd := exec.Command("ip", "netns", "exec", seoulGW, o.bin, "agent", "--config", file)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				cmd.Process.Kill()
				<-done
			}
			logf.Close()
		})
		// Give the rogue's TAP an address in the overlay's subnet.
		deadline := time.Now().Add(5 * time.Second)
		for {
			if exec.Command("ip", "-n", seoulGW, "link", "show", r.tap).Run() == nil {
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(file + ".log")
				t.Fatalf("rogue %s: no TAP %s after 5 s: %s", r.site, r.tap, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// A network's queue_len reaches its TAP device.
		if out, _ := inNS(seoulGW, "ip", "link", "show", r.tap); !strings.Contains(out, "qlen 2048") {
			t.Errorf("rogue %s: queue_len 2048 in the config, TAP %s is %s", r.site, r.tap, strings.TrimSpace(out))
		}
		exec.Command("ip", "-n", seoulGW, "addr", "add", fmt.Sprintf("198.19.9.%d/32", k+1), "dev", r.tap).Run()
		exec.Command("ip", "-n", seoulGW, "link", "set", r.tap, "up").Run()
	}
	// Each rogue pings Fujisawa's host from its TAP for 3 s: ARP
	// broadcasts and unicast frames that must reach no site.
	var wg sync.WaitGroup
	replies := make([]int, len(rogues))
	for k, r := range rogues {
		wg.Go(func() {
			out, _ := inNS(seoulGW, "ping", "-n", "-c", "15", "-i", "0.2", "-W", "1", "-I", r.tap, o.host("Fujisawa").Addr)
			replies[k] = len(rttRE.FindAllString(out, -1))
		})
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	macs := map[string]string{}
	for _, r := range rogues {
		if l, err := exec.Command("ip", "-n", seoulGW, "-br", "link", "show", r.tap).Output(); err == nil {
			if f := strings.Fields(string(l)); len(f) >= 3 {
				macs[f[2]] = r.site
			}
		}
	}
	for _, s := range []string{"Fujisawa", "Inagi"} {
		i := o.idx(s)
		st, err := o.status(i)
		if err != nil {
			t.Fatal(err)
		}
		var members []string
		for _, m := range st.Members {
			members = append(members, m.Name+"@"+m.Address+"("+m.State+")")
			if m.Name == "Mallory" || m.Name == "Eve" || !strings.HasSuffix(m.Address, ":4800") {
				t.Errorf("%s lists rogue member %s at %s", s, m.Name, m.Address)
			}
			if m.Name == "Seoul" && m.Address != o.st.Sites[o.idx("Seoul")].Underlay+":4800" {
				t.Errorf("%s: Seoul's address became %s", s, m.Address)
			}
		}
		var fdb []api.FDBEntry
		if err := o.api[i].Get("/v1/fdb", &fdb); err != nil {
			t.Fatal(err)
		}
		for _, e := range fdb {
			if r, ok := macs[e.MAC]; ok {
				t.Errorf("%s learnt the MAC %s of rogue %s (from %s)", s, e.MAC, r, e.Site)
			}
		}
		_, text := delta(before[s], st.Counters, "session_unknown_peer", "session_handshake_rejected", "control_unsealed_dropped", "drop_crypto", "frames_out")
		t.Logf("%s after the rogues: members %s; %s", s, strings.Join(members, " "), text)
		if os.Getenv("DETOUR_EDGE_DEBUG") != "" {
			for k, v := range st.Counters {
				if v != before[s][k] {
					t.Logf("  %s %s: %d -> %d", s, k, before[s][k], v)
				}
			}
		}
		d, _ := delta(before[s], st.Counters, "session_unknown_peer", "session_handshake_rejected", "control_unsealed_dropped")
		if s == "Fujisawa" && (d["session_unknown_peer"] == 0 || d["session_handshake_rejected"] == 0 || d["control_unsealed_dropped"] == 0) {
			t.Errorf("%s: the rogues' attempts were not all counted: %v", s, d)
		}
	}
	for k, r := range rogues {
		t.Logf("rogue %s (%s, port %d): %d ping replies of 15 from Fujisawa's host", r.site, r.name, r.port, replies[k])
		if replies[k] != 0 {
			t.Errorf("rogue %s reached Fujisawa's host: %d replies", r.site, replies[k])
		}
	}
	if p := o.path(o.idx("Fujisawa"), "Seoul"); p != "Inagi>Seoul" {
		t.Errorf("Fujisawa's path to Seoul after the rogues: %q", p)
	}
}

// ---- 2. virtual networks ----

// vnet is a virtual network added by a test: a bridge per gateway and a
// host per site behind it, addressed like the default network's hosts
// (the same 198.19.0.0/16 addresses: overlapping ranges).
type vnet struct {
	name  string
	id    uint32
	hosts []testbed.HostState // per site, in site order
}

// addNetwork creates network name with identifier id on every site: a
// bridge brN in each gateway, a host namespace (under the tests' prefix)
// on it with the address of the site's default host, and `detour net
// attach` of the network to the bridge.
func (o *overlay) addNetwork(t *testing.T, name string, id uint32, tag string, extra ...string) *vnet {
	t.Helper()
	v := &vnet{name: name, id: id}
	br := "br" + tag
	for i, s := range o.st.Sites {
		ns := s.Gateway + "." + tag
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		addr := s.Hosts[0].Addr
		lines := []string{
			"link add " + br + " type bridge", "link set " + br + " up",
			fmt.Sprintf("link add v%s type veth peer name eth0 netns %s", tag, ns),
			fmt.Sprintf("link set v%s master %s mtu %d up", tag, br, o.st.HostMTU),
		}
		cmd := exec.Command("ip", "-n", s.Gateway, "-b", "-")
		cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", s.Gateway, err, out)
		}
		cmd = exec.Command("ip", "-n", ns, "-b", "-")
		cmd.Stdin = strings.NewReader(fmt.Sprintf("link set lo up\nlink set eth0 mtu %d up\naddr add %s/16 dev eth0\n", o.st.HostMTU, addr))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", ns, err, out)
		}
		v.hosts = append(v.hosts, testbed.HostState{NS: ns, Addr: addr})
		args := append([]string{"net", "attach", name, "--id", strconv.Itoa(int(id)), "--tap", "dt-" + tag, "--bridge", br, "--mtu", strconv.Itoa(o.st.HostMTU)}, extra...)
		o.mustDetour(t, s.Name, args...)
		_ = i
	}
	return v
}

// checkAttachQueueLen checks that a network attached with --queue-len
// got a TAP device tap of that queue at every site, and that a queue the
// configuration does not allow is refused, naming queue_len, and attaches
// nothing.
func checkAttachQueueLen(t *testing.T, o *overlay, tap string, queue int) {
	t.Helper()
	for _, s := range o.st.Sites {
		if out, _ := inNS(s.Gateway, "ip", "link", "show", tap); !strings.Contains(out, fmt.Sprintf("qlen %d", queue)) {
			t.Errorf("%s: attached with --queue-len %d, TAP %s is %s", s.Name, queue, tap, strings.TrimSpace(out))
		}
	}
	site := o.st.Sites[0].Name
	out, err := o.detourIn(site, "net", "attach", "short", "--id", "99", "--queue-len", "3")
	if err == nil || !strings.Contains(out, "queue_len") {
		t.Errorf("%s: net attach --queue-len 3: %v: %s", site, err, out)
	}
	if list := o.mustDetour(t, site, "net", "list"); strings.Contains(list, "short") {
		t.Errorf("%s: the refused network was attached: %s", site, list)
	}
}

// macOf returns the MAC address of dev in namespace ns.
func macOf(t *testing.T, ns, dev string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-br", "link", "show", dev).Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) < 3 {
		t.Fatalf("MAC of %s in %s: %v: %s", dev, ns, err, out)
	}
	return f[2]
}

// srcMACs counts the frames of an Ethernet capture by source MAC.
func srcMACs(pk []capPacket) map[string]int {
	out := map[string]int{}
	for _, p := range pk {
		if p.link == 1 && len(p.data) >= 14 {
			out[net.HardwareAddr(p.data[6:12]).String()]++
		}
	}
	return out
}

// TestEdgeTwoNetworks: the default network and a second one ("blue", id
// 77) span the three sites with the same host addresses. Every host pings
// the other two of its network, both networks at once: all replies
// arrive, every host resolves the addresses to its own network's MACs,
// captures on the six hosts show no frame from the other network, and
// every site's FDB keeps each network's MACs apart.
func TestEdgeTwoNetworks(t *testing.T) {
	o := upEdge(t, "leon-japan", "--overlay", "detour")
	blue := o.addNetwork(t, "blue", 77, "b1", "--queue-len", "512")
	checkAttachQueueLen(t, o, "dt-b1", 512)
	red := &vnet{name: "default", id: 1}
	for _, s := range o.st.Sites {
		red.hosts = append(red.hosts, s.Hosts[0])
	}
	nets := []*vnet{red, blue}
	mac := map[string]string{} // MAC -> network name
	for _, n := range nets {
		for _, h := range n.hosts {
			mac[macOf(t, h.NS, "eth0")] = n.name
		}
	}
	for _, s := range o.st.Sites {
		mac[macOf(t, s.Gateway, "detour0")] = "default"
		mac[macOf(t, s.Gateway, "dt-b1")] = "blue"
	}
	var caps []*capture
	for _, n := range nets {
		for _, h := range n.hosts {
			caps = append(caps, startCapture(t, h.NS, "eth0"))
		}
	}
	type res struct {
		net, from, to string
		sent, got     int
	}
	var mu sync.Mutex
	var results []res
	var wg sync.WaitGroup
	for _, n := range nets {
		for i, h := range n.hosts {
			for j, d := range n.hosts {
				if i == j {
					continue
				}
				wg.Go(func() {
					rtts, _ := pingRTTs(h.NS, d.Addr, 20, "0.05")
					mu.Lock()
					results = append(results, res{n.name, o.st.Sites[i].Name, o.st.Sites[j].Name, 20, len(rtts)})
					mu.Unlock()
				})
			}
		}
	}
	wg.Wait()
	for _, r := range results {
		t.Logf("network %-7s ping %s -> %s (same addresses in both networks): %d of %d replies", r.net, r.from, r.to, r.got, r.sent)
		if r.got < r.sent-1 {
			t.Errorf("network %s: %s -> %s: %d of %d replies", r.net, r.from, r.to, r.got, r.sent)
		}
	}
	k := 0
	for _, n := range nets {
		for i, h := range n.hosts {
			pk := caps[k].stop()
			k++
			var own, cross int
			for m, c := range srcMACs(pk) {
				switch mac[m] {
				case n.name:
					own += c
				case "":
				default:
					cross += c
					t.Errorf("network %s, host at %s: %d frames from %s of network %s", n.name, o.st.Sites[i].Name, c, m, mac[m])
				}
			}
			// ARP: every address resolves to its own network's host.
			neigh, _ := exec.Command("ip", "-n", h.NS, "neigh", "show", "dev", "eth0").Output()
			bad := 0
			for _, line := range strings.Split(strings.TrimSpace(string(neigh)), "\n") {
				f := strings.Fields(line)
				if len(f) >= 3 && f[1] == "lladdr" && mac[f[2]] != n.name {
					bad++
					t.Errorf("network %s, host at %s: %s resolves to %s (%q)", n.name, o.st.Sites[i].Name, f[0], f[2], mac[f[2]])
				}
			}
			t.Logf("tcpdump -i eth0 on network %s's host at %s: %d frames, %d from its own network, %d from the other; ARP entries of the other network: %d", n.name, o.st.Sites[i].Name, len(pk), own, cross, bad)
			if own < 40 {
				t.Errorf("network %s, host at %s: only %d frames of its own network captured", n.name, o.st.Sites[i].Name, own)
			}
		}
	}
	for i, s := range o.st.Sites {
		var fdb []api.FDBEntry
		if err := o.api[i].Get("/v1/fdb", &fdb); err != nil {
			t.Fatal(err)
		}
		per := map[uint32]int{}
		for _, e := range fdb {
			want := map[string]uint32{"default": 1, "blue": 77}[mac[e.MAC]]
			if want != 0 && want != e.Network {
				t.Errorf("%s: FDB has %s (network %s) in network %d", s.Name, e.MAC, mac[e.MAC], e.Network)
			}
			per[e.Network]++
		}
		c := o.counters(t, s.Name)
		t.Logf("%s: detour fdb: %d entries in network 1, %d in network 77; drop_unknown_network %d", s.Name, per[1], per[77], c["drop_unknown_network"])
	}
}

// ---- 4. rate limits ----

// tapTx reads the bytes the kernel handed to a TAP device (the frames the
// agent reads from it, before the shaper).
func tapTx(t *testing.T, ns, dev string) uint64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+dev+"/statistics/tx_bytes").Output()
	if err != nil {
		t.Fatalf("tx_bytes of %s in %s: %v", dev, ns, err)
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	return v
}

// limitedFlow runs one TCP flow Fujisawa -> Inagi on a network's hosts
// for secs seconds (the first second omitted) and returns the goodput
// (iperf3) in Mbit/s.
func limitedFlow(t *testing.T, src, dst testbed.HostState, port, secs int) iperfResult {
	return iperfNS(t, src.NS, dst.NS, dst.Addr, port, "-t", strconv.Itoa(secs), "-O", "1")
}

// TestEdgeRateLimits: a network's ceiling set at run time (`detour net
// limit`) holds one TCP flow within ±5 % of it (20 and 50 Mbit/s); with a
// site egress of 20 Mbit/s (`detour net egress`) two networks competing
// get their guaranteed minimums (15 and 4 Mbit/s).
//
// A ceiling must never be exceeded by more than 5 %. Below it, the flow
// must reach within 5 % of it in the bench (DETOUR_TIMING_TESTS=1); in `make
// test`, within 10 %: on two cores shared with another test suite a 50
// Mbit/s flow, descheduled now and then, fell 5-6 % short in 5 runs of 10.
func TestEdgeRateLimits(t *testing.T) {
	secs := envInt("DETOUR_EDGE_SECONDS", 4)
	under := 0.10
	if timingBounds() {
		under = 0.05
	}
	o := upEdge(t, "leon-japan", "--overlay", "detour")
	blue := o.addNetwork(t, "blue", 78, "b2")
	src, dst := o.host("Fujisawa"), o.host("Inagi")
	fgw := o.gw("Fujisawa")
	for _, rate := range []float64{20, 50} {
		o.mustDetour(t, "Fujisawa", "net", "limit", "default", "--max-rate", fmt.Sprintf("%gmbit", rate))
		// The TAP's tx_bytes (frames the agent reads) from 1.5 s after
		// the start to the end of the run: the shaped rate in steady state.
		var l2 float64
		var wg sync.WaitGroup
		wg.Go(func() {
			time.Sleep(1500 * time.Millisecond)
			tx0, t0 := tapTx(t, fgw, "detour0"), time.Now()
			time.Sleep(time.Duration(secs)*time.Second - time.Second)
			l2 = float64(tapTx(t, fgw, "detour0")-tx0) * 8 / time.Since(t0).Seconds() / 1e6
		})
		r := limitedFlow(t, src, dst, 5410, secs)
		wg.Wait()
		t.Logf("max_rate %g Mbit/s: Ethernet frames into the TAP %.2f Mbit/s (%+.1f %%); iperf3 -c %s -t %d -O 1 Fujisawa -> Inagi: TCP goodput %.2f Mbit/s (%+.1f %%; per second %.1f)",
			rate, l2, (l2/rate-1)*100, dst.Addr, secs, r.RecvMbps, (r.RecvMbps/rate-1)*100, r.Intervals)
		if l2 > rate*1.05 || l2 < rate*(1-under) {
			t.Errorf("max_rate %g Mbit/s: frames leave at %.2f Mbit/s, not within +5 %% / -%.0f %%", rate, l2, 100*under)
		}
		// Headers: with MTU 1400 a full frame of 1414 bytes carries 1348
		// bytes of TCP payload (95.3 %); allow 3 % more for the TCP.
		if r.RecvMbps < rate*0.953*(0.97-under+0.05) || r.RecvMbps > rate*1.05 {
			t.Errorf("max_rate %g Mbit/s: goodput %.2f Mbit/s", rate, r.RecvMbps)
		}
	}
	o.mustDetour(t, "Fujisawa", "net", "egress", "20mbit")
	o.mustDetour(t, "Fujisawa", "net", "limit", "default", "--max-rate", "", "--min-rate", "15mbit")
	o.mustDetour(t, "Fujisawa", "net", "limit", "blue", "--min-rate", "4mbit")
	var wg sync.WaitGroup
	var red, bl iperfResult
	wg.Go(func() { red = limitedFlow(t, src, dst, 5411, secs) })
	wg.Go(func() { bl = limitedFlow(t, blue.hosts[0], blue.hosts[1], 5412, secs) })
	wg.Wait()
	t.Logf("egress 20 Mbit/s, default min 15, blue min 4, both saturating: default %.2f Mbit/s (per second %.1f), blue %.2f Mbit/s (per second %.1f), sum %.2f",
		red.RecvMbps, red.Intervals, bl.RecvMbps, bl.Intervals, red.RecvMbps+bl.RecvMbps)
	// The shaper counts Ethernet frames; goodput is 95.3 % of them (see
	// above), with 3 % for the TCP.
	if red.RecvMbps < 15*0.953*0.97 || bl.RecvMbps < 4*0.953*0.97 {
		t.Errorf("guaranteed minimums not met: default %.2f (min 15), blue %.2f (min 4) Mbit/s", red.RecvMbps, bl.RecvMbps)
	}
	if sum := red.RecvMbps + bl.RecvMbps; sum > 20*1.05 {
		t.Errorf("egress 20 Mbit/s exceeded: %.2f Mbit/s", sum)
	}
}

// ---- 3. MTU ----

// mtuBounds are the MTU test's bounds on what a busy machine may lose. A
// datagram, ping or segment the MTU stops is lost every time, so a black
// hole fails even the loose bounds of `make test`; what else is lost is
// socket buffers that overflowed and queues that filled while other
// processes had the CPU (each datagram is two fragments once the underlay
// MTU is 1300), which on two cores shared with another test suite reached
// a quarter of the datagrams. The strict bounds (scripts/bench-edge.sh,
// DETOUR_TIMING_TESTS=1) are the claims.
type mtuBounds struct {
	// udpLoss is the share of 1472-byte UDP datagrams, in %, that may be
	// lost.
	udpLoss float64
	// recovery bounds, in seconds, the last burst of ping losses after the
	// underlay MTU drops (0: not checked), and latePings the pings lost
	// later than 5 s after it (of 30).
	recovery  float64
	latePings int
	// tcpKeep is the share of its rate before the drop that a TCP flow
	// across it must keep.
	tcpKeep float64
}

func edgeMTUBounds() mtuBounds {
	if timingBounds() {
		return mtuBounds{udpLoss: 10, recovery: 5, latePings: 4, tcpKeep: 0.5}
	}
	return mtuBounds{udpLoss: 50, latePings: 15, tcpKeep: 0.2}
}

// mtuChecks runs, from Fujisawa's host to Seoul's (through Inagi),
// `ping -s 1472` (with -M do, fragmentation prohibited at the host, when
// df is set) and 1472-byte UDP datagrams, and returns the ping replies of
// 5 and the UDP loss.
//
// After the underlay MTU drops, a TCP flow crossing the change gets
// detour's ICMP "packet too big", and its host then holds a smaller path
// MTU for the destination, for every protocol: `ping -M do -s 1472` must
// then fail locally (that is path-MTU discovery working), while a plain
// `ping -s 1472`, as the issue states it, is fragmented by the host and
// must succeed.
func (o *overlay) mtuChecks(t *testing.T, port int, df bool) (int, iperfResult) {
	src, dst := o.host("Fujisawa"), o.host("Seoul")
	args := []string{"ping", "-n", "-c", "5", "-i", "0.1", "-W", "1", "-s", "1472"}
	if df {
		args = append(args, "-M", "do")
	}
	out, _ := inNS(src.NS, append(args, dst.Addr)...)
	var rtts []float64
	for _, m := range rttRE.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		rtts = append(rtts, v)
	}
	udp := iperfNS(t, src.NS, dst.NS, dst.Addr, port, "-u", "-l", "1472", "-b", "20M", "-t", "2")
	return len(rtts), udp
}

// setHostMTU sets the MTU of the hosts of the given sites (their eth0).
func (o *overlay) setHostMTU(t *testing.T, mtu int, sites ...string) {
	t.Helper()
	for _, s := range sites {
		if out, err := inNS(o.host(s).NS, "ip", "link", "set", "eth0", "mtu", strconv.Itoa(mtu)); err != nil {
			t.Fatalf("host MTU %d at %s: %v: %s", mtu, s, err, out)
		}
	}
}

// mtuComparison measures one TCP flow Fujisawa -> Inagi -> Seoul with the
// two hosts at MTU 1500 (SYNs clamped by detour) and at 1400, rounds times
// each, interleaved (1400 first in even rounds, 1500 first in odd ones) so
// that a load that comes and goes on the machine reaches both alike. It
// leaves the hosts at 1500 and returns the throughputs in Mbit/s per host
// MTU and the SYNs Fujisawa clamped during the 1500 runs.
func (o *overlay) mtuComparison(t *testing.T, rounds, secs int) (map[int][]float64, uint64) {
	src, dst := o.host("Fujisawa"), o.host("Seoul")
	thr := map[int][]float64{}
	var clamped uint64
	for round := 0; round < rounds; round++ {
		order := []int{1400, 1500}
		if round%2 == 1 {
			order = []int{1500, 1400}
		}
		for _, mtu := range order {
			o.setHostMTU(t, mtu, "Fujisawa", "Seoul")
			before := o.counters(t, "Fujisawa")
			r := iperfNS(t, src.NS, dst.NS, dst.Addr, 5420, "-t", strconv.Itoa(secs), "-O", "1")
			d, text := delta(before, o.counters(t, "Fujisawa"), "mss_clamped", "drop_send", "drop_malformed")
			if mtu == 1500 {
				clamped += d["mss_clamped"]
			}
			thr[mtu] = append(thr[mtu], r.RecvMbps)
			t.Logf("round %d, host MTU %d, underlay 1400, Fujisawa -> Inagi -> Seoul: iperf3 -t %d -O 1: %.1f Mbit/s (per second %.1f); Fujisawa %s", round+1, mtu, secs, r.RecvMbps, r.Intervals, text)
		}
	}
	o.setHostMTU(t, 1500, "Fujisawa", "Seoul")
	return thr, clamped
}

// TestEdgeMTU: hosts at MTU 1500 over a 1400-byte underlay, Fujisawa ->
// Seoul through the relay Inagi: SYNs are clamped, and one TCP flow is about
// as fast as with the hosts at MTU 1400 (median of DETOUR_EDGE_MTU_ROUNDS
// interleaved runs each, not more than DETOUR_EDGE_MTU_TOLERANCE % slower);
// `ping -s 1472 -M do` and 1472-byte UDP datagrams get through; after the
// underlay MTU drops to 1300 at run time on every gateway, the same work
// again within 5 s, and new flows keep at least max(25, 100 - 2 x
// tolerance) % of the throughput before the drop.
//
// Both host MTUs are measured on one testbed, the hosts' MTU changed
// between runs, so that the runs can alternate. Under `make test` (one
// round of 3 s, tolerance 75 %, the loose mtuBounds) the speed and loss
// checks only catch an MTU that stalls TCP or drops datagrams outright (a
// black hole, fragments lost): on two shared cores
// with other work running, even medians of five runs differ by more than
// 10 %. scripts/bench-edge.sh measures the claim of 10 % with five rounds
// of 15 s.
func TestEdgeMTU(t *testing.T) {
	secs := envInt("DETOUR_EDGE_SECONDS", 3)
	rounds := envInt("DETOUR_EDGE_MTU_ROUNDS", 1)
	tol := float64(envInt("DETOUR_EDGE_MTU_TOLERANCE", 75)) / 100
	bound := edgeMTUBounds()
	o := upEdge(t, "leon-japan", "--overlay", "detour", "--underlay-mtu", "1400", "--host-mtu", "1500")
	if _, err := o.waitPath("Fujisawa", "Seoul", "Inagi>Seoul", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	src, dst := o.host("Fujisawa"), o.host("Seoul")
	runs, clamped := o.mtuComparison(t, rounds, secs)
	thr := map[int]float64{1400: median(runs[1400]), 1500: median(runs[1500])}
	t.Logf("one TCP flow through the relay, median of %d interleaved runs: host MTU 1500 %.1f Mbit/s %.1f vs 1400 %.1f Mbit/s %.1f: %+.1f %%",
		rounds, thr[1500], runs[1500], thr[1400], runs[1400], (thr[1500]/thr[1400]-1)*100)
	if clamped == 0 {
		t.Errorf("no SYN clamped at host MTU 1500")
	}
	// Not slower by more than the tolerance (faster is run-to-run noise).
	if thr[1500] < (1-tol)*thr[1400] {
		t.Errorf("host MTU 1500 over underlay 1400: median %.1f Mbit/s, more than %.0f %% below %.1f with the hosts at 1400", thr[1500], tol*100, thr[1400])
	}
	n, udp := o.mtuChecks(t, 5421, true)
	t.Logf("ping -s 1472 -M do Fujisawa host -> Seoul host: %d of 5 replies; iperf3 -u -l 1472 -b 20M: %d datagrams, %d lost (%.2f %%)", n, udp.Packets, udp.Lost, udp.LostPercent)
	if n < 5 || udp.Packets < 1000 || udp.LostPercent > bound.udpLoss {
		t.Errorf("1472-byte payloads at underlay MTU 1400: ping %d of 5, UDP %d datagrams with %.2f %% lost", n, udp.Packets, udp.LostPercent)
	}
	// Lower the underlay MTU at run time; a TCP flow and 1472-byte pings
	// (every 100 ms) run across the change.
	var wg sync.WaitGroup
	var tcp iperfResult
	var pingOut string
	wg.Go(func() { tcp = iperfNS(t, src.NS, dst.NS, dst.Addr, 5422, "-t", "10") })
	wg.Go(func() {
		pingOut, _ = inNS(src.NS, "ping", "-n", "-c", "100", "-i", "0.1", "-W", "1", "-s", "1472", dst.Addr)
	})
	time.Sleep(2 * time.Second)
	for _, s := range o.st.Sites {
		if out, e, err := o.run("exec", s.Name, "--gateway", "--", "ip", "link", "set", "wan0", "mtu", "1300"); err != nil {
			t.Fatalf("lower MTU at %s: %v: %s%s", s.Name, err, out, e)
		}
	}
	t.Logf("$ detour-lab testbed exec SITE --gateway -- ip link set wan0 mtu 1300   (every site, 2 s into the runs, 0.2 s into ping seq 20)")
	wg.Wait()
	got := map[int]bool{}
	for _, m := range rttRE.FindAllStringSubmatch(pingOut, -1) {
		seq, _ := strconv.Atoi(m[1])
		got[seq] = true
	}
	var lost []int
	for seq := 1; seq <= 100; seq++ {
		if !got[seq] {
			lost = append(lost, seq)
		}
	}
	// Recovery ends with the last burst of losses (two within 1 s): a
	// lone loss next to a saturating flow is a queue drop, not MTU
	// trouble. Later than 5 s after the change, at most 4 of the 30
	// remaining pings may be lost: queue drops next to the flow on a busy
	// machine, where pings the MTU stops would all be lost.
	lastBurst, late := 0, 0
	for i, seq := range lost {
		if seq > 20 && ((i+1 < len(lost) && lost[i+1]-seq <= 10) || (i > 0 && lost[i-1] > 20 && seq-lost[i-1] <= 10)) {
			lastBurst = seq
		}
		if seq > 70 {
			late++
		}
	}
	recovery := max(0, float64(lastBurst-20)) * 0.1
	t.Logf("1472-byte pings every 100 ms across the change, with a TCP flow running: %d of 100 replies, lost seq %v: last burst of losses %.1f s after the change, %d lost later than 5 s", len(got), lost, recovery, late)
	t.Logf("the TCP flow across the change (iperf3 -t 10, change at 2 s), Mbit/s per second: %.1f", tcp.Intervals)
	// The flow's own seconds before the change are its reference: the
	// median of seconds 8 to 10 must keep a share (bound.tcpKeep) of the
	// median of seconds 1 and 2, a bound a busy machine does not reach but
	// a flow stalled by a black hole does.
	t.Run("existing TCP flow keeps its throughput", func(t *testing.T) {
		if len(tcp.Intervals) < 10 {
			t.Fatalf("TCP flow across the change: %d intervals", len(tcp.Intervals))
		}
		pre, post := median(tcp.Intervals[:2]), median(tcp.Intervals[7:10])
		if post < bound.tcpKeep*pre {
			t.Errorf("TCP seconds 8 to 10 (6 to 8 s after the MTU drop): median %.1f Mbit/s, before the drop %.1f", post, pre)
		}
		if (bound.recovery > 0 && recovery > bound.recovery) || late > bound.latePings {
			t.Errorf("1472-byte pings next to the flow: losses in bursts until %.1f s after the underlay MTU dropped, %d of 30 lost later than 5 s; want recovery within %.0f s and at most %d lost", recovery, late, bound.recovery, bound.latePings)
		}
	})
	// New TCP flows after the change: their median must keep all but twice
	// the tolerance of the median before it, and a quarter at least (the
	// new MTU costs about 8 % more segments for the same bytes, and the
	// runs cannot alternate).
	var after []float64
	for try := 0; try < rounds; try++ {
		r2 := iperfNS(t, src.NS, dst.NS, dst.Addr, 5424, "-t", strconv.Itoa(secs), "-O", "1")
		after = append(after, r2.RecvMbps)
		t.Logf("underlay MTU 1300: new TCP flow: %.1f Mbit/s (before the drop, median %.1f)", r2.RecvMbps, thr[1500])
	}
	if m := median(after); m < max(0.25, 1-2*tol)*thr[1500] {
		t.Errorf("new TCP flows at underlay MTU 1300: median %.1f Mbit/s %.1f, before the drop %.1f", m, after, thr[1500])
	}
	n, udp = o.mtuChecks(t, 5423, false)
	t.Logf("underlay MTU 1300: ping -s 1472: %d of 5 replies; iperf3 -u -l 1472 -b 20M: %d datagrams, %d lost (%.2f %%)", n, udp.Packets, udp.Lost, udp.LostPercent)
	if n < 5 || udp.Packets < 1000 || udp.LostPercent > bound.udpLoss {
		t.Errorf("1472-byte payloads at underlay MTU 1300: ping %d of 5, UDP %d datagrams with %.2f %% lost", n, udp.Packets, udp.LostPercent)
	}
}

// ---- 5. migration ----

// TestEdgeMigration: Fujisawa's host streams timestamped records every 5
// ms over TCP to Seoul's host; it moves to Inagi (`detour-lab testbed migrate
// Fujisawa --to Inagi`). The connection carries on, the largest gap
// between records at Seoul is under 1 s, and every site's FDB has the
// host at Inagi within 1 s of the move.
func TestEdgeMigration(t *testing.T) {
	o := upEdge(t, "leon-japan", "--overlay", "detour")
	src, dst := o.host("Fujisawa"), o.host("Seoul")
	hostMAC := macOf(t, src.NS, "eth0")
	l, err := listenIn(dst.NS, dst.Addr+":5430")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialIn(ctx, src.NS, "tcp4", dst.Addr+":5430")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var arrivals []time.Time
	var seqs []uint64
	readDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 16)
		for {
			srv.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(srv, buf); err != nil {
				readDone <- err
				return
			}
			arrivals = append(arrivals, time.Now())
			seqs = append(seqs, binary.BigEndian.Uint64(buf))
		}
	}()
	stopW := make(chan struct{})
	writeDone := make(chan error, 1)
	go func() {
		rec := make([]byte, 16)
		for seq := uint64(0); ; seq++ {
			binary.BigEndian.PutUint64(rec, seq)
			binary.BigEndian.PutUint64(rec[8:], uint64(time.Now().UnixNano()))
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write(rec); err != nil {
				writeDone <- err
				return
			}
			select {
			case <-stopW:
				writeDone <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	time.Sleep(time.Second)
	t0 := time.Now()
	out, e, err := o.run("migrate", "Fujisawa", "--to", "Inagi")
	moved := time.Now()
	if err != nil {
		t.Fatalf("migrate: %v: %s%s", err, out, e)
	}
	t.Logf("$ detour-lab testbed migrate Fujisawa --to Inagi: %.0f ms", durMS(moved.Sub(t0)))
	// Every site's FDB must place the host's MAC at Inagi.
	fdbAt := map[string]time.Duration{}
	for time.Since(t0) < 3*time.Second && len(fdbAt) < len(o.st.Sites) {
		for i, s := range o.st.Sites {
			if _, ok := fdbAt[s.Name]; ok {
				continue
			}
			var fdb []api.FDBEntry
			if o.api[i].Get("/v1/fdb", &fdb) != nil {
				continue
			}
			for _, en := range fdb {
				if en.MAC == hostMAC && en.Network == 1 && strings.HasPrefix(en.Site, "Inagi") {
					fdbAt[s.Name] = time.Since(t0)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	close(stopW)
	if err := <-writeDone; err != nil {
		t.Errorf("the connection broke on the sending side: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	srv.SetReadDeadline(time.Now())
	<-readDone
	var gap time.Duration
	var gapAt time.Time
	for k := 1; k < len(arrivals); k++ {
		if d := arrivals[k].Sub(arrivals[k-1]); d > gap {
			gap, gapAt = d, arrivals[k-1]
		}
	}
	inOrder := true
	for k := range seqs {
		if seqs[k] != uint64(k) {
			inOrder = false
			break
		}
	}
	after := 0
	for _, a := range arrivals {
		if a.After(moved) {
			after++
		}
	}
	for _, s := range o.st.Sites {
		d, ok := fdbAt[s.Name]
		t.Logf("%s's FDB has the host at Inagi %.0f ms after the migration started (found: %v)", s.Name, durMS(d), ok)
		if !ok || d > time.Second+moved.Sub(t0) {
			t.Errorf("%s's FDB did not follow the host within 1 s of its move (found %v after %v)", s.Name, ok, d)
		}
	}
	t.Logf("TCP stream of a 16-byte record every 5 ms Fujisawa host -> Seoul host across the move: %d records, all in order %v, %d after the move; largest gap %.0f ms (%.0f ms after the migration started)",
		len(seqs), inOrder, after, durMS(gap), durMS(gapAt.Sub(t0)))
	if !inOrder || after < 100 {
		t.Errorf("the stream did not continue: %d records after the move, in order %v", after, inOrder)
	}
	if gap >= time.Second {
		t.Errorf("largest gap in the stream %v, want under 1 s", gap)
	}
}

// ---- 6. cost of encryption ----

// TestEdgeEncryptionCost: one TCP flow and the idle ping RTT between
// Fujisawa's and Seoul's hosts on leon-japan with zero delays, with
// --overlay detour and detour-plain. Encryption may cost throughput, but
// not more than half of it, and not more than 0.5 ms of RTT.
//
// Both overlays are pinned to the direct path: at zero delay a flood that
// queues the direct link's probes can move the route through Inagi, which
// is slower on two shared cores, and the two overlays were then compared
// on different paths. One 4-second flow on two shared cores varies widely,
// so each overlay is measured in DETOUR_EDGE_ROUNDS rounds, a testbed of
// its own per run, the order alternating between rounds, and the medians
// are compared.
func TestEdgeEncryptionCost(t *testing.T) {
	timingTest(t)
	secs := envInt("DETOUR_EDGE_SECONDS", 4)
	rounds := envInt("DETOUR_EDGE_ROUNDS", 3)
	thr, rtt := map[string][]float64{}, map[string][]float64{}
	for round := 0; round < rounds; round++ {
		order := []string{"detour-plain", "detour"}
		if round%2 == 1 {
			order = []string{"detour", "detour-plain"}
		}
		for _, ov := range order {
			t.Run(fmt.Sprintf("%s round %d", ov, round+1), func(t *testing.T) {
				o := upEdge(t, filepath.Join("testdata", "leon-japan-zero.yaml"), "--overlay", ov)
				src, dst := o.host("Fujisawa"), o.host("Seoul")
				o.pin(t, "Fujisawa", "Seoul")
				o.pin(t, "Seoul", "Fujisawa")
				rtts := o.hostPing(t, "Fujisawa", "Seoul", 100, "0.01")
				rtt[ov] = append(rtt[ov], median(rtts))
				t.Logf("%s, zero delays: idle ping median %.3f ms (p95 %.3f, %d replies)", ov, median(rtts), percentile(rtts, 95), len(rtts))
				r := iperfNS(t, src.NS, dst.NS, dst.Addr, 5440, "-t", strconv.Itoa(secs), "-O", "1")
				thr[ov] = append(thr[ov], r.RecvMbps)
				t.Logf("%s, path Fujisawa->Seoul %q: iperf3 -t %d -O 1: %.1f Mbit/s (per second %.1f)",
					ov, o.path(o.idx("Fujisawa"), "Seoul"), secs, r.RecvMbps, r.Intervals)
			})
		}
	}
	if len(thr["detour"]) != rounds || len(thr["detour-plain"]) != rounds {
		t.Fatalf("missing measurements: detour %.1f, detour-plain %.1f", thr["detour"], thr["detour-plain"])
	}
	enc, plain := median(thr["detour"]), median(thr["detour-plain"])
	encRTT, plainRTT := median(rtt["detour"]), median(rtt["detour-plain"])
	t.Logf("encryption cost, one TCP flow, median of %d runs: %.1f %.1f vs %.1f %.1f Mbit/s (%+.1f %%); idle RTT %.3f vs %.3f ms (%+.3f ms)",
		rounds, enc, thr["detour"], plain, thr["detour-plain"], (enc/plain-1)*100, encRTT, plainRTT, encRTT-plainRTT)
	if enc < 0.5*plain {
		t.Errorf("encrypted throughput's median %.1f Mbit/s is less than half of %.1f in the clear", enc, plain)
	}
	if encRTT-plainRTT > 0.5 {
		t.Errorf("encryption adds %.3f ms to the idle RTT (medians)", encRTT-plainRTT)
	}
}

// ---- 7. bad keys ----

// TestAgentBadKeys: bad keys in a configuration give one clear error, one
// line naming the field and its line, and start nothing, with and without
// --check.
func TestAgentBadKeys(t *testing.T) {
	bin := detourBin(t)
	ns := edPrefix + "badkeys"
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	priv, err := exec.Command(bin, "genkey").Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "pubkey")
	cmd.Stdin = bytes.NewReader(priv)
	pub, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	k, p := strings.TrimSpace(string(priv)), strings.TrimSpace(string(pub))
	conf := func(privLine, peerKey string) string {
		s := "site: A\nlisten: 127.0.0.1:4800\n" + privLine + "peers:\n  - name: B\n    address: 198.18.0.2:4800\n"
		if peerKey != "" {
			s += "    public_key: " + peerKey + "\n"
		}
		return s
	}
	cases := []struct{ name, conf, want string }{
		{"private key of the wrong length", conf("private_key: c2hvcnQ=\n", p), "line 3: private_key: bad key: decodes to 5 bytes, want 32"},
		{"private key not base64", conf("private_key: not*base64!\n", p), "line 3: private_key: bad key: not valid base64"},
		{"peer key of the wrong length", conf("private_key: "+k+"\n", "AAAA"), "line 7: peers[0].public_key: bad key: decodes to 3 bytes, want 32"},
		{"peer key not base64", conf("private_key: "+k+"\n", "not*base64!"), "peers[0].public_key: bad key"},
		{"peer without key, with a private key", conf("private_key: "+k+"\n", ""), "peers[0].public_key: missing"},
		{"peer keys without a private key", conf("", p), "private_key: missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "site.yaml")
			os.WriteFile(file, []byte(c.conf), 0o644)
			for _, args := range [][]string{{"--check"}, nil} {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, bin, "agent", "--config", file}, args...)...)
				out, err := cmd.CombinedOutput()
				timedOut := ctx.Err() != nil
				cancel()
				msg := strings.TrimSpace(string(out))
				if timedOut {
					t.Fatalf("agent %v kept running on bad keys: %s", args, msg)
				}
				if err == nil || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 0 {
					t.Errorf("agent %v: %v: %q, want one line containing %q", args, err, msg, c.want)
				}
				if l, _ := exec.Command("ip", "-n", ns, "-o", "link", "show").CombinedOutput(); strings.Contains(string(l), "detour0") {
					t.Errorf("agent %v created a TAP device", args)
				}
			}
			t.Logf("detour agent --config F --check: %s", strings.SplitN(c.want, "\n", 2)[0])
		})
	}
}
