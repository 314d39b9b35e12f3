package tcpterm

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/wire"
)

// Config configures a Terminator.
type Config struct {
	// Dev is the terminator's own TAP device, on the site's bridge.
	Dev device.Device
	// Bridge, when set, is the network's own TAP device (the data
	// path's): the terminator then takes the frames of clients and local
	// servers from the router in the process (router.Table.SetTCPSink)
	// and writes its frames to them there, and uses Dev only for the
	// frames of remote servers (which must leave through the data path)
	// and the replies that come back from them.
	Bridge device.Device
	// Self is this site: the terminator's MAC is router.TermMAC(Self).
	Self wire.SiteID
	// Table returns the network's router table in force.
	Table func() *router.Table
	Log   *slog.Logger
	// Now returns the monotonic nanoseconds the router's passive failure
	// detection runs on (the agent's clock); nil for time.Now.
	Now func() int64
	// Limits; zero takes the default.
	MaxConns       int           // client connections in all (DefaultMaxConns)
	MaxPerClient   int           // client connections per client address (DefaultMaxPerClient)
	ClientIdle     time.Duration // a client connection without requests is closed (DefaultClientIdle)
	ServerIdle     time.Duration // an unused server connection is closed (DefaultServerIdle)
	ConnsPerServer int           // server connections per server and protocol (DefaultConnsPerServer)
	DialTimeout    time.Duration // to connect to a server (DefaultDialTimeout)
	ProbeEvery     time.Duration // version requests to local replicas (DefaultProbeEvery; negative: none)
}

// The default limits.
const (
	DefaultMaxConns       = 1024 // memcached's own default (-c)
	DefaultMaxPerClient   = 64
	DefaultClientIdle     = 5 * time.Minute
	DefaultServerIdle     = 60 * time.Second // below router.TCPConnIdle
	DefaultConnsPerServer = 2
	DefaultDialTimeout    = time.Second
	DefaultProbeEvery     = 40 * time.Millisecond // under half the agent's health check interval (probe.go)
)

// Stats are a terminator's counters.
type Stats struct {
	Accepted     atomic.Uint64 // client connections accepted
	Refused      atomic.Uint64 // client connections refused by a limit
	Active       atomic.Int64  // client connections open
	Requests     atomic.Uint64 // requests parsed
	Split        atomic.Uint64 // multi-key gets split over several servers
	Errors       atomic.Uint64 // malformed requests answered with memcached's error
	NoServer     atomic.Uint64 // requests whose key had no usable server
	Failed       atomic.Uint64 // replies lost with a server connection, or not sent for a failed dial
	Dials        atomic.Uint64 // server connections opened
	DialFailures atomic.Uint64 // server connections that could not be opened
	ServerConns  atomic.Int64  // server connections open
	BadReplies   atomic.Uint64 // server streams that could not be framed
	InputDrops   atomic.Uint64 // frames from the router dropped: the terminator's queue was full
}

// Coalescing returns how many frames from the router the stack took and
// how many packets it was given from them: segments of one TCP flow that
// arrive together are joined first.
func (t *Terminator) Coalescing() (frames, packets uint64) {
	return t.ns.injected.Load(), t.ns.link.delivered.Load()
}

// Terminator terminates TCP connections to the virtual addresses of one
// network's pools and sends their requests over pooled connections to
// the servers.
type Terminator struct {
	cfg   Config
	ns    *netStack
	stats Stats

	in     chan *[]byte // frames from the router (Input)
	inPool sync.Pool
	macMu  sync.RWMutex
	macs   map[netip.Addr][6]byte // client MACs, from their frames

	mu        sync.Mutex
	addrs     map[netip.Addr]bool
	listening map[netip.AddrPort]net.Listener
	perClient map[netip.Addr]int
	ups       map[upKey][]*upConn
}

// New builds a terminator on cfg.Dev.
func New(cfg Config) (*Terminator, error) {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxPerClient <= 0 {
		cfg.MaxPerClient = DefaultMaxPerClient
	}
	if cfg.ClientIdle <= 0 {
		cfg.ClientIdle = DefaultClientIdle
	}
	if cfg.ServerIdle <= 0 {
		cfg.ServerIdle = DefaultServerIdle
	}
	if cfg.ConnsPerServer <= 0 {
		cfg.ConnsPerServer = DefaultConnsPerServer
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.ProbeEvery == 0 {
		cfg.ProbeEvery = DefaultProbeEvery
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
	}
	ns, err := newNetStack(cfg.Dev, router.TermMAC(cfg.Self))
	if err != nil {
		return nil, err
	}
	return &Terminator{cfg: cfg, ns: ns, addrs: map[netip.Addr]bool{}, listening: map[netip.AddrPort]net.Listener{},
		perClient: map[netip.Addr]int{}, ups: map[upKey][]*upConn{}, in: make(chan *[]byte, inQueue),
		macs: map[netip.Addr][6]byte{}}, nil
}

// Stats returns the terminator's counters.
func (t *Terminator) Stats() *Stats { return &t.stats }

// Run serves until ctx is done, then closes every connection and the
// stack (not the device, which the caller closes). While it runs, the
// table in force has TCP on (Table.EnableTCP).
func (t *Terminator) Run(ctx context.Context) error {
	go t.ns.outbound(ctx, t.cfg.Bridge, t.direct)
	inErr := make(chan error, 1)
	go func() { inErr <- t.ns.inbound() }()
	go t.injector(ctx)
	if t.cfg.ProbeEvery > 0 {
		go (&prober{t: t, failed: map[netip.AddrPort]time.Time{}}).run(ctx)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	defer t.shutdown()
	for {
		t.sync(ctx)
		t.reapServers(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case err := <-inErr:
			return err
		case <-tick.C:
		}
	}
}

// sync gives the stack the virtual addresses of the pools in force and
// listens on each pool's address and port.
func (t *Terminator) sync(ctx context.Context) {
	tb := t.cfg.Table()
	if tb == nil {
		return
	}
	if !tb.TCPEnabled() {
		tb.EnableTCP(true) // a table built anew (not by Replace) starts without
	}
	if t.cfg.Bridge != nil && !tb.HasTCPSink() {
		tb.SetTCPSink(t)
	}
	t.mu.Lock()
	for vip, l := range t.listening {
		if !hasPool(tb, vip) {
			l.Close() // the pool is gone; its clients are closed at their next request
			delete(t.listening, vip)
			t.cfg.Log.Info("kv tcp: stopped listening", "address", vip)
		}
	}
	t.mu.Unlock()
	for _, p := range tb.Pools() {
		t.mu.Lock()
		haveAddr, listening := t.addrs[p.VIP.Addr()], t.listening[p.VIP] != nil
		t.mu.Unlock()
		if !haveAddr {
			if err := t.ns.addAddress(p.VIP.Addr()); err != nil {
				t.cfg.Log.Error("kv tcp: address", "pool", p.Name, "err", err)
				continue
			}
			t.mu.Lock()
			t.addrs[p.VIP.Addr()] = true
			t.mu.Unlock()
		}
		if listening {
			continue
		}
		l, err := t.ns.listen(p.VIP)
		if err != nil {
			t.cfg.Log.Error("kv tcp: listen", "pool", p.Name, "address", p.VIP, "err", err)
			continue
		}
		t.mu.Lock()
		t.listening[p.VIP] = l
		t.mu.Unlock()
		t.cfg.Log.Info("kv tcp: listening", "pool", p.Name, "address", p.VIP)
		go t.accept(ctx, l, p.VIP)
	}
}

// hasPool reports whether tb has a pool at vip.
func hasPool(tb *router.Table, vip netip.AddrPort) bool {
	for _, p := range tb.Pools() {
		if p.VIP == vip {
			return true
		}
	}
	return false
}

// shutdown turns TCP off in the table in force and closes the listeners,
// the server connections and the stack.
func (t *Terminator) shutdown() {
	if tb := t.cfg.Table(); tb != nil {
		tb.EnableTCP(false)
		tb.SetTCPSink(nil)
	}
	t.mu.Lock()
	for _, l := range t.listening {
		l.Close()
	}
	for _, cs := range t.ups {
		for _, c := range cs {
			c.conn.Close()
		}
	}
	t.mu.Unlock()
	t.ns.close()
}

// accept takes the client connections of one virtual address.
func (t *Terminator) accept(ctx context.Context, l net.Listener, vip netip.AddrPort) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		from, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		if !t.admit(from.Addr()) {
			t.stats.Refused.Add(1)
			c.Close()
			continue
		}
		t.stats.Accepted.Add(1)
		t.stats.Active.Add(1)
		cl := &client{t: t, ctx: ctx, conn: c, vip: vip, from: from.Addr(), wake: make(chan struct{}, 1), room: make(chan struct{}, 1)}
		cl.s.Tag = cl
		go cl.write()
		go func() {
			cl.read(ctx)
			t.release(from.Addr())
		}()
	}
}

// admit counts a new client connection against the limits.
func (t *Terminator) admit(a netip.Addr) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(t.stats.Active.Load()) >= t.cfg.MaxConns || t.perClient[a] >= t.cfg.MaxPerClient {
		return false
	}
	t.perClient[a]++
	return true
}

// release forgets a client connection.
func (t *Terminator) release(a netip.Addr) {
	t.mu.Lock()
	if t.perClient[a]--; t.perClient[a] <= 0 {
		delete(t.perClient, a)
	}
	t.mu.Unlock()
	t.stats.Active.Add(-1)
}

// pool returns the pool in force behind a virtual address.
func (t *Terminator) pool(vip netip.AddrPort) *router.Pool {
	tb := t.cfg.Table()
	if tb == nil {
		return nil
	}
	for _, p := range tb.Pools() {
		if p.VIP == vip {
			return p
		}
	}
	return nil
}

// inQueue is how many frames from the router may wait for the stack.
const inQueue = 4096

// Input takes a frame the router hands the terminator (router.TCPSink):
// it copies it and queues it for the stack, or drops it (counted) when
// the queue is full; it never blocks the data path.
func (t *Terminator) Input(f []byte) {
	if len(f) < 14+20 || len(f) > 65535 {
		return
	}
	b, _ := t.inPool.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	*b = append((*b)[:0], f...)
	select {
	case t.in <- b:
	default:
		t.inPool.Put(b)
		t.stats.InputDrops.Add(1)
	}
}

// injector feeds the stack the frames Input queued, learning the MAC of
// each sender.
func (t *Terminator) injector(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			t.ns.flush()
			return
		case b := <-t.in:
			f := *b
			src := netip.AddrFrom4([4]byte(f[14+12 : 14+16]))
			t.macMu.RLock()
			mac, ok := t.macs[src]
			t.macMu.RUnlock()
			if !ok || mac != [6]byte(f[6:12]) {
				t.macMu.Lock()
				if len(t.macs) >= maxMACs {
					clear(t.macs)
				}
				t.macs[src] = [6]byte(f[6:12])
				t.macMu.Unlock()
			}
			t.ns.inject(f)
			t.inPool.Put(b)
			if len(t.in) == 0 {
				t.ns.flush()
			}
		}
	}
}

// maxMACs bounds the table of client MACs (cleared when full).
const maxMACs = 65536

// direct says where a packet of the stack goes without the router: to a
// client, or to a local server whose MAC is known, on the bridge.
func (t *Terminator) direct(p []byte) ([6]byte, bool) {
	ihl := int(p[0]&0x0f) * 4
	if p[9] != 6 || ihl < 20 || len(p) < ihl+4 {
		return [6]byte{}, false
	}
	src := netip.AddrFrom4([4]byte(p[12:16]))
	dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[16:20])), binary.BigEndian.Uint16(p[ihl+2:]))
	if tb := t.cfg.Table(); tb != nil {
		for _, pl := range tb.Pools() {
			if pl.VIP.Addr() != src {
				continue
			}
			if s := pl.ServerAt(dst); s != nil {
				mac, known := s.MAC()
				return mac, s.Local && known
			}
		}
	}
	t.macMu.RLock()
	mac, ok := t.macs[dst.Addr()]
	t.macMu.RUnlock()
	return mac, ok
}
