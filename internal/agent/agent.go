// Package agent is the I/O shell of a site's daemon: it opens the TAP
// devices and the underlay socket, runs the data path, drives the pure
// control plane (membership, measurement, link state, routing) with the
// clock and the control datagrams, publishes every new routing table to the
// data path, and serves the local API.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/edge"
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/history"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// Agent is one site's running daemon.
type Agent struct {
	cfg     *config.Agent
	log     *slog.Logger
	clock   *Clock
	conn    transport.Conn
	ports   []*datapath.Port
	netCfg  map[uint32]config.Network // guarded by mu
	given   map[uint32]device.Device  // devices from Options, for tests
	shaper  *edge.Shaper
	mssV4   uint16 // the clamp in force, guarded by mu
	mssV6   uint16
	engine  *datapath.Engine
	version string

	// mu guards the control node, which is a pure state machine and not
	// safe for concurrent use; the control loop and API handlers take it.
	mu          sync.Mutex
	flushMu     sync.Mutex // serialises flushes (control loop, API overrides)
	node        *control.Node
	table       *routing.Table
	changes     map[wire.SiteID]uint64 // path changes per destination
	history     *history.Recorder      // links' last hour and route changes, for the API
	sec         *secure                // nil when the overlay runs in the clear
	hs          *handshakes            // the handshake path, with sec
	lastNow     time.Time              // the latest time given to the node
	lastSecTick time.Time
	ctlIn       chan ctlPacket
	started     time.Time
	registry    *prometheus.Registry
	ctlDropped  prometheus.Counter
	ctlRejected prometheus.Counter
}

type ctlPacket struct {
	from netip.AddrPort
	data []byte
	at   time.Time // when the datagram was read from the socket
}

// Options are the agent's run-time dependencies; tests replace them with
// fakes.
type Options struct {
	// Conn is the underlay socket; nil opens a UDP socket on cfg.Listen.
	Conn transport.Conn
	// Devices maps network IDs to devices; a nil map opens TAP devices.
	Devices map[uint32]device.Device
	// Clock is the agent's clock; nil uses the monotonic system clock
	// shifted by cfg.TestClockOffset.
	Clock   *Clock
	Logger  *slog.Logger
	Version string
}

// New opens the agent's devices and socket and builds its state. Nothing
// runs until Run.
func New(cfg *config.Agent, opt Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: opt.Logger, clock: opt.Clock, conn: opt.Conn, version: opt.Version,
		ctlIn: make(chan ctlPacket, 1024), changes: map[wire.SiteID]uint64{}, history: history.New(time.Now()), netCfg: map[uint32]config.Network{}}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.clock == nil {
		a.clock = NewClock(cfg.TestClockOffset)
	}
	if err := a.openUnderlay(); err != nil {
		return nil, err
	}
	if err := a.openDevices(opt.Devices); err != nil {
		a.closeAll()
		return nil, err
	}
	node, err := control.New(a.controlConfig(), a.clock.Now())
	if err != nil {
		a.closeAll()
		return nil, err
	}
	a.node = node
	dcfg := datapath.Config{
		Self: wire.SiteIDFromName(cfg.Site), Conn: a.conn, Ports: a.ports,
		Control: a.onControl, Now: a.clock.Mono,
	}
	if cfg.Encrypted() {
		if a.sec, err = newSecure(cfg); err != nil {
			a.closeAll()
			return nil, err
		}
		dcfg.Crypto = a.sec.node
		a.hs = newHandshakes(a)
		a.sec.hsCounters = a.hs.counters
	}
	a.engine = datapath.New(dcfg)
	a.shaper = edge.NewShaper(float64(cfg.EgressRate))
	for _, n := range cfg.Networks {
		a.shaper.Set(n.ID, edge.Limits{MaxBps: float64(n.MaxRate), MinBps: float64(n.MinRate)})
	}
	a.engine.SetShaper(a.shaper)
	a.updateMSS()
	a.registry = a.newRegistry()
	return a, nil
}

func (a *Agent) openUnderlay() error {
	if a.conn != nil {
		return nil
	}
	addr, err := netip.ParseAddrPort(a.cfg.Listen)
	if err != nil {
		return err
	}
	c, err := transport.ListenUDP(addr)
	if err != nil {
		return err
	}
	a.conn = c
	return nil
}

func (a *Agent) openDevices(given map[uint32]device.Device) error {
	a.given = given
	for _, n := range a.cfg.Networks {
		p, err := a.openPort(n)
		if err != nil {
			return err
		}
		a.netCfg[n.ID] = n
		a.ports = append(a.ports, p)
	}
	return nil
}

// openPort opens the device of a network: a TAP device, or the one given
// in Options.
func (a *Agent) openPort(n config.Network) (*datapath.Port, error) {
	dev, ok := a.given[n.ID]
	if a.given == nil {
		var err error
		if dev, err = openTAP(n); err != nil {
			return nil, fmt.Errorf("network %s: %w", n.Name, err)
		}
		ok = true
	}
	if !ok {
		return nil, fmt.Errorf("network %s: no device given", n.Name)
	}
	return &datapath.Port{Network: n.ID, Dev: dev, FDB: fdb.New(fdb.DefaultTTL)}, nil
}

func (a *Agent) controlConfig() control.Config {
	adv, _ := netip.ParseAddrPort(a.cfg.Listen)
	if a.cfg.Advertise != "" {
		adv, _ = netip.ParseAddrPort(a.cfg.Advertise)
	}
	var boot []netip.AddrPort
	for _, p := range a.cfg.Peers {
		if ap, err := netip.ParseAddrPort(p.Address); err == nil {
			boot = append(boot, ap) // peers without an address are only accepted keys
		}
	}
	cfg := control.DefaultConfig(a.cfg.Site, adv, boot...)
	cfg.ProbeInterval = a.cfg.ProbeInterval
	cfg.MaxProbeRate = a.cfg.MaxProbeRate
	// Failure detection counts missed probes: suspect after 2.5 intervals,
	// down after 5 (250 ms and 500 ms at the default 100 ms).
	cfg.SuspectAfter = a.cfg.ProbeInterval * 5 / 2
	cfg.DownAfter = 5 * a.cfg.ProbeInterval
	cfg.Routing.MaxHops = a.cfg.MaxHops
	return cfg
}

func (a *Agent) closeAll() {
	if a.conn != nil {
		a.conn.Close()
	}
	ports := a.ports
	if a.engine != nil {
		ports = a.engine.Ports()
	}
	for _, p := range ports {
		p.Dev.Close()
	}
}

// onControl is called by the data path for every control datagram;
// handshakes go to the handshake path, which screens them at once. Its
// time is the kernel's receive time when the socket gives it (mapped onto
// the agent's clock by how long ago it was), so that probe timestamps do
// not include the time a busy gateway took to read the datagram.
func (a *Agent) onControl(from netip.AddrPort, pkt []byte, rx time.Time) {
	if a.hs != nil && isHandshake(pkt) {
		a.hs.offer(from, pkt)
		return
	}
	at := a.clock.Now()
	if !rx.IsZero() {
		if lag := time.Since(rx); lag > 0 && lag < time.Second {
			at = at.Add(-lag)
		}
	}
	select {
	case a.ctlIn <- ctlPacket{from: from, data: append([]byte(nil), pkt...), at: at}:
	default:
		// The control loop is behind; probes are periodic, so losing one
		// only costs a sample.
		a.ctlDropped.Inc()
	}
}

// Run runs the agent until ctx is cancelled, then leaves the overlay
// cleanly and releases everything.
func (a *Agent) Run(ctx context.Context) error {
	a.started = time.Now()
	closeAPI, err := a.serveAPI()
	if err != nil {
		a.closeAll()
		return err
	}

	engineDone := make(chan error, 1)
	go func() { engineDone <- a.engine.Run() }()
	go a.runKV(ctx) // kv.go: the key router's pools and health checks
	if a.hs != nil {
		go a.hs.run(ctx)
	}
	a.log.Info("agent started", "site", a.cfg.Site, "listen", a.conn.LocalAddr(), "api", a.cfg.API)

	a.controlLoop(ctx)

	a.leave()
	closeAPI()
	a.closeAll()
	if err := <-engineDone; err != nil && !errors.Is(err, transport.ErrClosed) {
		return err
	}
	a.log.Info("agent stopped", "site", a.cfg.Site)
	return nil
}

// controlLoop steps the control node on every control datagram and timer
// deadline until ctx is done.
func (a *Agent) controlLoop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	expire := time.NewTicker(10 * time.Second)
	defer expire.Stop()
	mtuCheck := time.NewTicker(mtuCheckInterval)
	defer mtuCheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-a.ctlIn:
			a.mu.Lock()
			a.receive(p)
			a.drainControl()
			a.mu.Unlock()
		case <-timer.C:
			a.mu.Lock()
			now := a.clock.Now()
			a.lastNow = now
			a.node.Tick(now)
			if a.sec != nil && now.Sub(a.lastSecTick) >= secTickInterval {
				a.sec.tick(now, a.sendNow)
				a.lastSecTick = now
			}
			a.mu.Unlock()
		case <-expire.C:
			for _, p := range a.engine.Ports() {
				p.FDB.Expire(a.clock.Mono())
			}
		case <-mtuCheck.C:
			a.updateMSS()
		}
		a.flush()
		a.resetTimer(timer)
	}
}

// maxControlBatch bounds how many queued control datagrams the control
// loop takes at once before it sends the answers in one batch.
const maxControlBatch = 64

// drainControl receives the control datagrams already queued, so that
// under load one flush and one timer reset (a system call and an O(N)
// deadline scan) serve a whole batch. The caller holds a.mu.
func (a *Agent) drainControl() {
	for range maxControlBatch - 1 {
		select {
		case p := <-a.ctlIn:
			a.receive(p)
		default:
			return
		}
	}
}

// secTickInterval is the period of the session timers (handshake retries,
// rekeying, expiry).
const secTickInterval = 100 * time.Millisecond

// receive hands a control datagram to the control node, through the
// secure layer when the overlay is encrypted. The caller holds a.mu.
func (a *Agent) receive(p ctlPacket) {
	// Probe timestamps must be those of the socket read, not of the
	// moment the control loop got to the datagram; but the node's clock
	// never goes back, even if a tick ran after the read.
	now := p.at
	if now.Before(a.lastNow) {
		now = a.lastNow
	}
	a.lastNow = now
	data := p.data
	if a.sec != nil {
		if data = a.sec.open(now, p.from, data, a.sendNow); data == nil {
			return
		}
	}
	if err := a.node.Receive(now, p.from, data); err != nil {
		a.ctlRejected.Inc()
	}
}

// sendNow sends one datagram at once.
func (a *Agent) sendNow(to netip.AddrPort, payload []byte) {
	if err := a.engine.Send([]transport.Message{{Buf: payload, N: len(payload), Addr: to}}); err != nil {
		a.log.Debug("control send", "to", to, "err", err)
	}
}

// memberAddrs returns the underlay address of every known member. The
// caller holds a.mu.
func (a *Agent) memberAddrs() map[wire.SiteID]netip.AddrPort {
	out := map[wire.SiteID]netip.AddrPort{}
	for _, m := range a.node.Members() {
		if !m.Self && m.Addr.IsValid() {
			out[m.ID] = m.Addr
		}
	}
	return out
}

// flush sends the control node's outbox (sealed, when encrypted) and
// publishes a new routing table to the data path when there is one.
func (a *Agent) flush() {
	a.flushMu.Lock()
	defer a.flushMu.Unlock()
	a.mu.Lock()
	out := a.node.Outbox()
	msgs := make([]transport.Message, len(out))
	// Probes and replies carry the time they leave, not the time the
	// node built them: on a busy gateway the two can be milliseconds
	// apart, which would read as link delay.
	now := a.clock.Now()
	for i, o := range out {
		wire.Restamp(o.Payload, now.UnixNano())
		msgs[i] = transport.Message{Buf: o.Payload, N: len(o.Payload), Addr: o.To}
	}
	if a.sec != nil && len(msgs) > 0 {
		msgs = a.sec.seal(now, msgs, a.memberAddrs, a.sendNow)
	}
	t := a.node.Table()
	changes := a.describeSwitches(a.node.Switches())
	a.mu.Unlock()
	for _, c := range changes {
		a.log.Info("route changed", "dest", c.Dest, "from", strings.Join(c.From, ">"), "to", strings.Join(c.To, ">"), "reason", c.Reason)
		a.history.RouteChange(c)
	}
	if len(msgs) > 0 {
		if err := a.engine.Send(msgs); err != nil {
			a.log.Debug("control send", "err", err)
		}
	}
	if t != a.table {
		a.publish(t)
	}
}

// describeSwitches turns path changes into events for the log and the
// history: destination, old and new path by site name, and the router's
// reason. Caller holds a.mu.
func (a *Agent) describeSwitches(sw []routing.Switch) []history.Event {
	out := make([]history.Event, 0, len(sw))
	for _, s := range sw {
		out = append(out, history.Event{At: s.At, Dest: a.node.NameOf(s.To[len(s.To)-1]),
			From: a.node.Names(s.From), To: a.node.Names(s.To), Reason: s.Reason})
	}
	return out
}

// publish hands a new table to the data path and forgets the addresses
// learned at sites that are no longer members.
func (a *Agent) publish(t *routing.Table) {
	old := a.table
	a.table = t
	a.engine.SetRoutes(t)
	a.countChanges(old, t)
	if old == nil {
		return
	}
	for _, id := range old.Sites() {
		if _, ok := t.Addr(id); !ok {
			a.engine.ResetSource(id)
			for _, p := range a.engine.Ports() {
				p.FDB.ForgetSite(id)
			}
		}
	}
}

// countChanges counts, per destination, the tables whose path differs from
// the previous table's.
func (a *Agent) countChanges(old, t *routing.Table) {
	for _, r := range t.Routes() {
		if prev, ok := old.Lookup(r.Dest); ok && !slices.Equal(prev.Path, r.Path) {
			a.mu.Lock()
			a.changes[r.Dest]++
			a.mu.Unlock()
		}
	}
}

func (a *Agent) resetTimer(timer *time.Timer) {
	a.mu.Lock()
	next := a.node.NextDeadline()
	a.mu.Unlock()
	d := next.Sub(a.clock.Now())
	if d < 0 {
		d = 0
	}
	if d > time.Second {
		d = time.Second
	}
	if a.sec != nil && d > secTickInterval {
		d = secTickInterval
	}
	if !timer.Stop() {
		select {
		case <-timer.C:
		default:
		}
	}
	timer.Reset(d)
}

// leave tells the other sites this one is going, so they drop it at once.
func (a *Agent) leave() {
	a.mu.Lock()
	a.node.Leave(a.clock.Now())
	a.mu.Unlock()
	a.flush()
}

// openTAP opens a network's TAP device, with segmentation offloads unless
// DETOUR_NO_OFFLOAD is set (to measure what they bring).
func openTAP(n config.Network) (device.Device, error) {
	o := device.TAPOptions{QueueLen: n.QueueLen}
	if os.Getenv("DETOUR_NO_OFFLOAD") != "" {
		return device.OpenTAPWith(n.TAP, n.MTU, n.Bridge, o)
	}
	return device.OpenOffloadTAP(n.TAP, n.MTU, n.Bridge, o)
}
