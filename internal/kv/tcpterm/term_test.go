package tcpterm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/kv/kvtest"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/wire"
)

// site is one site in a process: a gVisor stack holding the LAN's hosts
// (a client, and the pool's servers, each a relay to a real memcached on
// loopback), the bridge, the gateway's router and its terminator. Frames
// the hosts send go through the router as the detour TAP device would
// give them; frames the router writes back go to the host or to the
// terminator their destination MAC names.
type site struct {
	t      *testing.T
	table  *router.Table
	term   *Terminator
	dev    *device.Fake
	br     *device.Fake // the network's TAP device, when the terminator writes there
	hosts  *stack.Stack
	ep     *channel.Endpoint
	macs   map[netip.Addr][6]byte
	direct []string // each server's memcached on loopback
	// lag delays each server's replies (ns), as a slow disk would.
	lag [3]atomic.Int64
}

var (
	self     = wire.SiteIDFromName("lan")
	vip      = netip.MustParseAddrPort("10.20.0.250:11211")
	clientIP = netip.MustParseAddr("10.20.0.5")
	servers  = []netip.AddrPort{
		netip.MustParseAddrPort("10.20.0.11:11211"),
		netip.MustParseAddrPort("10.20.0.12:11211"),
		netip.MustParseAddrPort("10.20.0.13:11211"),
	}
)

func newSite(t *testing.T, cfg Config, bridge bool, shape ...func(*router.PoolSpec)) *site {
	s := &site{t: t, macs: map[netip.Addr][6]byte{}}
	spec := router.Spec{Self: self, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []router.PoolSpec{{Name: "cache", VIP: vip, Hash: ring.Ketama}}}
	for _, a := range servers {
		spec.Pools[0].Servers = append(spec.Pools[0].Servers, router.ServerSpec{Addr: a, Weight: 1, Site: self})
	}
	for _, f := range shape {
		f(&spec.Pools[0])
	}
	tb, err := router.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	tb.EnableTCP(true)
	s.table = tb
	s.hosts = stack.New(stack.Options{NetworkProtocols: []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol}})
	s.ep = channel.New(4096, 1400, "")
	if err := s.hosts.CreateNIC(1, s.ep); err != nil {
		t.Fatal(err)
	}
	s.hosts.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	addrs := []netip.Addr{clientIP}
	for _, a := range servers {
		addrs = append(addrs, a.Addr())
	}
	for i, a := range addrs {
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFrom4(a.As4()).WithPrefix()}
		if err := s.hosts.AddProtocolAddress(1, pa, stack.AddressProperties{}); err != nil {
			t.Fatal(err)
		}
		s.macs[a] = [6]byte{0x52, 0x54, 0, 0, 0, byte(i + 1)}
	}
	for i, a := range servers {
		tb.Pools()[0].Servers[i].SetMAC(s.macs[a.Addr()])
		port := kvtest.FreePort(t, "127.0.0.1")
		kvtest.Memcached(t, "127.0.0.1", port, false)
		s.direct = append(s.direct, fmt.Sprintf("127.0.0.1:%d", port))
		s.relay(a, s.direct[i], &s.lag[i])
	}
	s.dev = device.NewFake("kv", 1400, 4096)
	cfg.Dev, cfg.Self, cfg.Table = s.dev, self, func() *router.Table { return tb }
	switch hb, held := cfg.Bridge.(*heldBridge); {
	case held:
		s.br = hb.Fake
	case bridge:
		s.br = device.NewFake("detour0", 1400, 4096)
		cfg.Bridge = s.br
	}
	if s.term, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.term.Run(ctx)
	go s.bridge(ctx)
	// Ready: the terminator takes the router's frames (bridge) and listens
	// on the pool's address; a client that dialled before would be refused.
	for deadline := time.Now().Add(5 * time.Second); (bridge && !tb.HasTCPSink()) || !s.term.listensOn(vip); {
		if time.Now().After(deadline) {
			t.Fatal("the terminator did not take the router's frames or listen on the pool's address")
		}
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(func() {
		cancel()
		s.dev.Close()
		if s.br != nil {
			s.br.Close()
		}
		s.ep.Close()
		s.hosts.Close()
	})
	return s
}

// listensOn reports whether the terminator listens on vip.
func (t *Terminator) listensOn(vip netip.AddrPort) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.listening[vip] != nil
}

// relay makes server address a relay to a memcached on loopback, whose
// replies wait lag before they go on.
func (s *site) relay(a netip.AddrPort, to string, lag *atomic.Int64) {
	l, err := gonet.ListenTCP(s.hosts, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(a.Addr().As4()), Port: a.Port()}, ipv4.ProtocolNumber)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			m, err := net.Dial("tcp4", to)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(m, c); m.Close() }()
			go func() { io.Copy(c, lagReader{m, lag}); c.Close() }()
		}
	}()
}

// lagReader delays every read by lag.
type lagReader struct {
	r   io.Reader
	lag *atomic.Int64
}

func (l lagReader) Read(b []byte) (int, error) {
	n, err := l.r.Read(b)
	if d := l.lag.Load(); d > 0 && n > 0 {
		time.Sleep(time.Duration(d))
	}
	return n, err
}

// bridge carries frames between the hosts, the router and the
// terminator's device, in one goroutine as the device loop does.
func (s *site) bridge(ctx context.Context) {
	w := router.NewWorker()
	fromHosts := make(chan []byte, 4096)
	go func() {
		for {
			pkt := s.ep.ReadContext(ctx)
			if pkt == nil {
				return
			}
			v := pkt.ToView()
			pkt.DecRef()
			p := v.AsSlice()
			f := make([]byte, 14+len(p))
			vmac := router.VirtualMAC(vip.Addr())
			src := s.macs[netip.AddrFrom4([4]byte(p[12:16]))]
			copy(f[0:6], vmac[:])
			copy(f[6:12], src[:])
			f[12], f[13] = 0x08, 0x00
			copy(f[14:], p)
			v.Release()
			fromHosts <- f
		}
	}()
	term := router.TermMAC(self)
	var brOut <-chan []byte
	if s.br != nil {
		brOut = s.br.Out()
	}
	for {
		var f []byte
		select {
		case <-ctx.Done():
			return
		case f = <-fromHosts:
		case f = <-s.dev.Out():
		case f = <-brOut:
			// Written to the network's TAP device: the bridge takes it
			// to the host its destination MAC names.
			s.toHosts(f)
			continue
		}
		handled, outs := w.Egress(s.table, f, time.Now().UnixNano())
		if !handled {
			continue
		}
		for _, o := range outs {
			if !o.Local {
				s.t.Errorf("a frame left for site %v; every server is local", o.Site)
				continue
			}
			if [6]byte(o.Frame[0:6]) == term {
				s.dev.Inject(o.Frame)
				continue
			}
			s.toHosts(o.Frame)
		}
	}
}

// toHosts delivers a frame on the bridge to the hosts' stack.
func (s *site) toHosts(f []byte) {
	for _, m := range s.macs {
		if [6]byte(f[0:6]) == m {
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(append([]byte(nil), f[14:]...))})
			s.ep.InjectInbound(ipv4.ProtocolNumber, pkt)
			pkt.DecRef()
			return
		}
	}
	s.t.Errorf("a frame on the bridge to %x, no host's MAC", f[0:6])
}

// dial connects the client host to the virtual address.
func (s *site) dial() (*gonet.TCPConn, *bufio.Reader) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := gonet.DialTCPWithBind(ctx, s.hosts, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(clientIP.As4())},
		tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(vip.Addr().As4()), Port: vip.Port()}, ipv4.ProtocolNumber)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	l, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading: %v (%q)", err, l)
	}
	return l
}

// TestTerminator sends pipelined sets, gets and a multi-key get through
// the router and the terminator to three real memcached servers: replies
// in request order, one END for the multi-key get, and every key on its
// ring owner.
func TestTerminator(t *testing.T) {
	t.Run("bridge", func(t *testing.T) { testTerminator(t, true) })
	t.Run("hairpin", func(t *testing.T) { testTerminator(t, false) })
}

// testTerminator runs TestTerminator with the terminator writing to the
// network's TAP device (bridge) or only to its own (hairpin, every frame
// through the router).
func testTerminator(t *testing.T, bridge bool) {
	s := newSite(t, Config{}, bridge)
	c, r := s.dial()
	var b strings.Builder
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
		fmt.Fprintf(&b, "set %s 0 0 4\r\nv%03d\r\n", keys[i], i)
	}
	for i := len(keys) - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "get %s\r\n", keys[i])
	}
	fmt.Fprintf(&b, "get %s\r\n", strings.Join(keys[:30], " "))
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if l := readLine(t, r); l != "STORED\r\n" {
			t.Fatalf("set %d: %q", i, l)
		}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		if l := readLine(t, r); l != fmt.Sprintf("VALUE %s 0 4\r\n", keys[i]) {
			t.Fatalf("get %s: %q", keys[i], l)
		}
		if l := readLine(t, r); l != fmt.Sprintf("v%03d\r\n", i) {
			t.Fatalf("get %s: %q", keys[i], l)
		}
		if l := readLine(t, r); l != "END\r\n" {
			t.Fatalf("get %s: %q", keys[i], l)
		}
	}
	values := 0
	for l := readLine(t, r); l != "END\r\n"; l = readLine(t, r) {
		if !strings.HasPrefix(l, "VALUE k0") {
			t.Fatalf("multi-get: %q", l)
		}
		readLine(t, r)
		values++
	}
	if values != 30 || s.term.Stats().Split.Load() != 1 {
		t.Fatalf("multi-get: %d values, %d splits", values, s.term.Stats().Split.Load())
	}
	// With the bridge, no frame of the terminator went through the
	// router; without, all did.
	if from := s.table.TCPStats().FromTerminator.Load(); (from == 0) != bridge {
		t.Fatalf("bridge %v: %d frames from the terminator through the router", bridge, from)
	}
	// Each key on its owner: ask the servers directly.
	p := s.table.Pools()[0]
	for i, addr := range s.direct {
		m, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		mr := bufio.NewReader(m)
		for _, k := range keys {
			fmt.Fprintf(m, "mg %s\r\n", k)
			l, _ := mr.ReadString('\n')
			if held, owner := l == "HD\r\n", p.RingOwner([]byte(k)) == i; held != owner {
				t.Fatalf("key %s on server %d: %q, owner %v", k, i, l, owner)
			}
		}
		m.Close()
	}
}

// TestTerminatorLimits checks the limit on connections per client and
// that a client closing its side still gets the replies to what it sent.
func TestTerminatorLimits(t *testing.T) {
	s := newSite(t, Config{MaxPerClient: 2}, true)
	s.dial()
	s.dial()
	c, r := s.dial()
	if l, err := r.ReadString('\n'); err == nil {
		t.Fatalf("a third connection was served: %q", l)
	}
	c.Close()
	if s.term.Stats().Refused.Load() != 1 {
		t.Fatalf("refused %d", s.term.Stats().Refused.Load())
	}
	// Half-close: the replies still come.
	s2 := newSite(t, Config{}, true)
	c, r = s2.dial()
	c.Write([]byte("set hc 0 0 1\r\nx\r\nget hc\r\n"))
	c.CloseWrite()
	all, err := io.ReadAll(r)
	if err != nil || string(all) != "STORED\r\nVALUE hc 0 1\r\nx\r\nEND\r\n" {
		t.Fatalf("after a half-close: %q, %v", all, err)
	}
}

// TestTerminatorReplicas writes through a pool whose first shard has two
// replicas (servers 0 and 1) and whose second has one (server 2): every
// key must be on every replica of its shard and nowhere else, and a read
// finds it.
func TestTerminatorReplicas(t *testing.T) {
	s := newSite(t, Config{}, true, func(ps *router.PoolSpec) {
		ps.Shards = []router.ShardSpec{{Weight: 1}, {Weight: 1}}
		ps.Servers[1].Shard = 0
		ps.Servers[2].Shard = 1
	})
	c, r := s.dial()
	var b strings.Builder
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprintf("r%02d", i)
		fmt.Fprintf(&b, "set %s 0 0 1\r\nx\r\nget %s\r\n", keys[i], keys[i])
	}
	c.Write([]byte(b.String()))
	for _, k := range keys {
		for _, want := range []string{"STORED\r\n", "VALUE " + k + " 0 1\r\n", "x\r\n", "END\r\n"} {
			if l := readLine(t, r); l != want {
				t.Fatalf("%s: %q, want %q", k, l, want)
			}
		}
	}
	p := s.table.Pools()[0]
	held := make([]map[string]bool, len(s.direct))
	for i, addr := range s.direct {
		held[i] = map[string]bool{}
		m, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		mr := bufio.NewReader(m)
		for _, k := range keys {
			fmt.Fprintf(m, "mg %s\r\n", k)
			if l, _ := mr.ReadString('\n'); l == "HD\r\n" {
				held[i][k] = true
			}
		}
		m.Close()
	}
	shard0 := 0
	for _, k := range keys {
		sh := p.RingOwner([]byte(k))
		want := [3]bool{sh == 0, sh == 0, sh == 1}
		if got := [3]bool{held[0][k], held[1][k], held[2][k]}; got != want {
			t.Fatalf("key %s of shard %d held by %v, want %v", k, sh, got, want)
		}
		if sh == 0 {
			shard0++
		}
	}
	if shard0 == 0 || shard0 == len(keys) {
		t.Fatalf("%d of %d keys on shard 0: the test needs both shards", shard0, len(keys))
	}
}

// TestTerminatorChoosesReplica: reads over TCP of a replicated pool
// under the predicted policy go to the replica whose replies come
// faster, once the chooser has timed both (the exploring copies keep the
// other's estimate), and `kv why` shows the TCP samples and the key's
// size.
func TestTerminatorChoosesReplica(t *testing.T) {
	s := newSite(t, Config{ProbeEvery: -1}, true, func(ps *router.PoolSpec) {
		ps.Shards = []router.ShardSpec{{Weight: 1}}
		ps.Policy = replica.Predicted
		for i := range ps.Servers {
			ps.Servers[i].Shard = 0
		}
	})
	s.lag[0].Store(int64(15 * time.Millisecond))
	c, r := s.dial()
	value := strings.Repeat("v", 5000)
	fmt.Fprintf(c, "set k 0 0 %d\r\n%s\r\n", len(value), value)
	if l := readLine(t, r); l != "STORED\r\n" {
		t.Fatalf("set: %q", l)
	}
	p := s.table.Pools()[0]
	before := [3]uint64{}
	for i := range before {
		before[i] = p.Servers[i].Requests.Load()
	}
	const reads = 60
	for i := 0; i < reads; i++ {
		fmt.Fprintf(c, "get k\r\n")
		for _, want := range []string{fmt.Sprintf("VALUE k 0 %d\r\n", len(value)), value + "\r\n", "END\r\n"} {
			if l := readLine(t, r); l != want {
				t.Fatalf("read %d: %.40q, want %.40q", i, l, want)
			}
		}
	}
	var got [3]uint64
	for i := range got {
		got[i] = p.Servers[i].Requests.Load() - before[i]
	}
	if got[0] > reads/4 || got[1]+got[2] < reads*3/4 {
		t.Fatalf("reads per server %v: want most away from the slow server 0", got)
	}
	w := p.Why([]byte("k"), s.term.cfg.Now())
	if !w.SizeKnown || w.Size < len(value) || w.Replicas[0].Class.Samples == 0 || w.Replicas[0].Class.Median < int64(10*time.Millisecond) ||
		w.Replicas[0].Chosen || w.Replicas[0].Outstanding != 0 {
		t.Fatalf("why %+v", w)
	}
	if p.Stats.ReadsLocal.Load() != reads {
		t.Fatalf("%d reads counted, want %d", p.Stats.ReadsLocal.Load(), reads)
	}
}

// TestTerminatorProbes: the terminator asks every local server of a
// replicated pool for its version over TCP, so that a server that does
// not answer UDP still has replies (the agent's health check counts
// them).
func TestTerminatorProbes(t *testing.T) {
	s := newSite(t, Config{ProbeEvery: 10 * time.Millisecond}, true, func(ps *router.PoolSpec) {
		ps.Shards = []router.ShardSpec{{Weight: 1}}
		for i := range ps.Servers {
			ps.Servers[i].Shard = 0
		}
	})
	p := s.table.Pools()[0]
	start := time.Now().UnixNano()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n := 0
		for _, srv := range p.Servers {
			if srv.Replies.Load() >= 3 && srv.LastReply() > start {
				n++
			}
		}
		if n == len(p.Servers) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replies %d %d %d after 5 s", p.Servers[0].Replies.Load(), p.Servers[1].Replies.Load(), p.Servers[2].Replies.Load())
		}
	}
}

// setDirect stores key=value in server i's memcached, bypassing the
// router.
func (s *site) setDirect(i int, key, value string) {
	s.t.Helper()
	m, err := net.Dial("tcp4", s.direct[i])
	if err != nil {
		s.t.Fatal(err)
	}
	defer m.Close()
	fmt.Fprintf(m, "set %s 0 0 %d\r\n%s\r\n", key, len(value), value)
	if l, err := bufio.NewReader(m).ReadString('\n'); err != nil || l != "STORED\r\n" {
		s.t.Fatalf("set at server %d: %q %v", i, l, err)
	}
}

// TestTerminatorHedgesRead: a read over TCP whose chosen replica stalls
// is copied to the next best replica once the chosen one's p95 has
// passed, and the copy's reply is the client's; the stalled reply, when
// it comes, is dropped, so the next read gets its own.
func TestTerminatorHedgesRead(t *testing.T) {
	s := newSite(t, Config{ProbeEvery: -1}, true, func(ps *router.PoolSpec) {
		ps.Shards = []router.ShardSpec{{Weight: 1}}
		ps.Policy, ps.Hedge = replica.Predicted, true
		for i := range ps.Servers {
			ps.Servers[i].Shard = 0
		}
	})
	for i := range servers {
		s.setDirect(i, "k", fmt.Sprintf("from-%d", i))
		s.setDirect(i, "j", "other")
	}
	c, r := s.dial()
	get := func(key string) string {
		fmt.Fprintf(c, "get %s\r\n", key)
		head := readLine(t, r)
		v := readLine(t, r)
		if end := readLine(t, r); !strings.HasPrefix(head, "VALUE "+key+" ") || end != "END\r\n" {
			t.Fatalf("get %s: %q %q %q", key, head, v, end)
		}
		return strings.TrimSuffix(v, "\r\n")
	}
	for range 40 {
		get("k")
	}
	p := s.table.Pools()[0]
	chosen := -1
	for i, rw := range p.Why([]byte("k"), s.term.cfg.Now()).Replicas {
		if rw.Chosen {
			chosen = i
		}
	}
	if chosen < 0 {
		t.Fatal("no replica chosen")
	}
	hedges := p.Stats.HedgesSent.Load()
	s.lag[chosen].Store(int64(time.Second))
	if v := get("k"); v == fmt.Sprintf("from-%d", chosen) {
		t.Fatalf("the stalled replica %d answered: no hedge", chosen)
	}
	if p.Stats.HedgesSent.Load() != hedges+1 {
		t.Fatalf("hedges sent %d, want %d", p.Stats.HedgesSent.Load(), hedges+1)
	}
	s.lag[chosen].Store(0)
	time.Sleep(1200 * time.Millisecond) // the stalled reply arrives
	if v := get("j"); v != "other" {
		t.Fatalf("get j after the stalled reply: %q", v)
	}
}

// heldBridge is a network TAP device that coalesces written frames, as
// device.OffloadTAP does: it holds them until Flush, then passes them on.
type heldBridge struct {
	*device.Fake
	mu              sync.Mutex
	held            [][]byte
	writes, flushes int
}

func (h *heldBridge) Write(f []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, append([]byte(nil), f...))
	h.writes++
	return len(f), nil
}

func (h *heldBridge) Flush() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) > 0 {
		h.flushes++
	}
	for _, f := range h.held {
		if _, err := h.Fake.Write(f); err != nil {
			return err
		}
	}
	h.held = h.held[:0]
	return nil
}

func (h *heldBridge) counts() (writes, flushes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writes, h.flushes
}

// getBig gets the key "big" on a client connection and checks that the
// reply is value, whole.
func getBig(t *testing.T, c io.Writer, r *bufio.Reader, value string) {
	t.Helper()
	fmt.Fprintf(c, "get big\r\n")
	if l := readLine(t, r); l != fmt.Sprintf("VALUE big 0 %d\r\n", len(value)) {
		t.Fatalf("get big: %q", l)
	}
	got := make([]byte, len(value)+2)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != value+"\r\n" {
		t.Fatalf("get big: %d bytes of the value, %v", len(got), err)
	}
	if l := readLine(t, r); l != "END\r\n" {
		t.Fatalf("get big: %q after the value", l)
	}
}

// TestTerminatorBatchesBridgeWrites: the segments of a large reply that
// the terminator sends on a bridge that coalesces writes are flushed
// when the stack has nothing more queued, not one by one, and every
// frame is flushed: the client gets the whole value.
func TestTerminatorBatchesBridgeWrites(t *testing.T) {
	hb := &heldBridge{Fake: device.NewFake("detour0", 1400, 4096)}
	s := newSite(t, Config{Bridge: hb}, true)
	value := strings.Repeat("0123456789abcdef", 300_000/16)
	for i := range servers {
		s.setDirect(i, "big", value)
	}
	c, r := s.dial()
	w0, f0 := hb.counts()
	getBig(t, c, r, value)
	w, f := hb.counts()
	w, f = w-w0, f-f0
	t.Logf("%d frames written to the bridge in %d flushes", w, f)
	if w < 200 || f > w/4 {
		t.Fatalf("%d frames written to the bridge in %d flushes: want one flush per burst, not per frame", w, f)
	}
}

// TestTerminatorCoalescesServerSegments: the segments of a large reply
// that the router hands the terminator in a burst reach its stack joined
// into larger ones (generic receive offload, flushed when no frame waits),
// and the client gets the whole value, in order.
func TestTerminatorCoalescesServerSegments(t *testing.T) {
	s := newSite(t, Config{}, true)
	value := strings.Repeat("0123456789abcdef", 1_000_000/16)
	for i := range servers {
		s.setDirect(i, "big", value)
	}
	c, r := s.dial()
	frames0, packets0 := s.term.Coalescing()
	for range 3 {
		getBig(t, c, r, value)
	}
	frames, packets := s.term.Coalescing()
	frames, packets = frames-frames0, packets-packets0
	t.Logf("%d frames from the router reached the stack as %d packets", frames, packets)
	if frames < 2000 || packets > frames/2 {
		t.Fatalf("%d frames from the router reached the stack as %d packets: want them joined", frames, packets)
	}
}
