// Package agent is the I/O shell of a site's daemon: it opens the TAP
// devices and the underlay socket, runs the data path, drives the pure
// site core (package site: control plane, sealing, timers) with the clock
// and the control datagrams, publishes every new routing table to the
// data path, and serves the local API.
//
// One goroutine, the control loop, owns the core: control datagrams,
// timers and the API's requests all reach it through channels, and the
// API's handlers wait for the loop's answer (Agent.do). The data path and
// the handshake worker share only the core's session node, which is safe
// for concurrent use.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/edge"
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/history"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/runstate"
	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/site"
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
	netCfg  map[uint32]config.Network // owned by the control loop
	given   map[uint32]device.Device  // devices from Options, for tests
	shaper  *edge.Shaper
	mssV4   uint16 // the clamp in force, owned by the control loop
	mssV6   uint16
	engine  *datapath.Engine
	version string

	// file is the configuration file's settings, cfg those in force (the
	// file merged with the run-time state). state is the run-time state,
	// store its file (nil: not kept), pendPins and pendForbid the
	// state's overrides waiting for their sites. All belong to the
	// control loop.
	file       *config.Agent
	state      *runstate.Doc
	store      *runstate.Store
	pendPins   map[string][]string
	pendForbid []string
	// revSeen is how many revocations the core had applied when the
	// run-time state was last brought up to date with them.
	revSeen   int
	cfgPath   string
	loopsSeen map[uint32]uint64 // loops logged, by network

	// core is the site's protocol state, owned by the control loop (and
	// before Run and after the loop by Run's goroutine).
	core *site.Core
	// sec is the core's session node, shared with the data path and the
	// handshake worker; nil when the overlay runs in the clear.
	sec         *session.Node
	hs          *handshakes       // the handshake path, with sec
	history     *history.Recorder // links' last hour and route changes, for the API
	ctlIn       chan ctlPacket
	peerCounts  []datapath.PeerCount       // feedThroughput's snapshot (throughput.go)
	reqs        chan func()                // the API's requests to the control loop
	kvReqs      chan func(*kvState, int64) // the API's requests to the key router's loop (kv.go)
	kvBox       *kvBox                     // pools and networks handed to the kv loop (kvdist.go)
	kvNets      atomic.Pointer[[]kvNet]    // the networks with pools, for the metrics
	running     atomic.Bool                // the control loop takes requests
	startMu     sync.Mutex                 // orders requests run before Run (do) with Run's start
	stopped     chan struct{}
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
	// StatePath is the file that keeps the changes made at run time
	// (runstate); empty keeps them in memory only.
	StatePath string
	// ConfigPath is the configuration file, read again by Reload; empty
	// refuses reloads.
	ConfigPath string
}

// New opens the agent's devices and socket and builds its state. Nothing
// runs until Run.
func New(cfg *config.Agent, opt Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: opt.Logger, clock: opt.Clock, conn: opt.Conn, version: opt.Version,
		ctlIn: make(chan ctlPacket, 1024), reqs: make(chan func()), kvReqs: make(chan func(*kvState, int64)), stopped: make(chan struct{}), history: history.New(time.Now()), netCfg: map[uint32]config.Network{},
		kvBox: newKVBox()}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.clock == nil {
		a.clock = NewClock(cfg.TestClockOffset)
	}
	a.cfgPath = opt.ConfigPath
	if err := a.loadState(opt.StatePath); err != nil {
		return nil, err
	}
	cfg = a.cfg
	if err := a.openUnderlay(); err != nil {
		return nil, err
	}
	if err := a.openDevices(opt.Devices); err != nil {
		a.closeAll()
		return nil, err
	}
	scfg, err := a.siteConfig()
	if err != nil {
		a.closeAll()
		return nil, err
	}
	if a.core, err = site.New(scfg, a.clock.Now()); err != nil {
		a.closeAll()
		return nil, err
	}
	dcfg := datapath.Config{
		Self: wire.SiteIDFromName(cfg.Site), Conn: a.conn, Ports: a.ports,
		Control: a.onControl, Now: a.clock.Mono,
		Wall: func() int64 { return a.clock.Now().UnixNano() },
	}
	if a.sec = a.core.Sessions(); a.sec != nil {
		dcfg.Crypto = a.sec
		a.hs = newHandshakes(a)
	}
	a.engine = datapath.New(dcfg)
	a.shaper = edge.NewShaper(float64(cfg.EgressRate))
	for _, n := range cfg.Networks {
		a.shaper.Set(n.ID, edge.Limits{MaxBps: float64(n.MaxRate), MinBps: float64(n.MinRate)})
	}
	a.engine.SetShaper(a.shaper)
	a.engine.SetFlowConfig(flowConfig(cfg.Bulk))
	a.updateMSS()
	if err := a.kvStart(); err != nil {
		a.closeAll()
		return nil, err
	}
	a.registry = a.newRegistry()
	a.registry.MustRegister(kvCollector{a})
	a.applyPending(a.clock.Now())
	a.restoreRevocations()
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
	return &datapath.Port{Network: n.ID, Dev: dev, FDB: fdb.New(fdb.DefaultTTL), Flood: datapath.NewFloodGuard(n.FloodRate)}, nil
}

// siteConfig returns the site core's configuration: the control node's,
// and the keys when the overlay is encrypted.
func (a *Agent) siteConfig() (site.Config, error) {
	cfg := site.Config{Control: a.controlConfig()}
	if !a.cfg.Encrypted() {
		return cfg, nil
	}
	priv, err := keys.ParsePrivate(a.cfg.PrivateKey)
	if err != nil {
		return cfg, err
	}
	sec := &site.Secure{Private: priv, Peers: map[wire.SiteID]keys.PublicKey{}, Addrs: configuredAddrs(a.cfg)}
	for _, p := range a.cfg.Peers {
		if p.PublicKey == "" {
			continue // a bootstrap address of an overlay with a CA
		}
		if sec.Peers[wire.SiteIDFromName(p.Name)], err = keys.ParsePublic(p.PublicKey); err != nil {
			return cfg, err
		}
	}
	if err := addTrust(a.cfg, sec, time.Now()); err != nil {
		return cfg, err
	}
	cfg.Secure = sec
	return cfg, nil
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
	cfg.Economy = a.cfg.Measurement == config.MeasurementEconomy
	cfg.Routing.Bulk = bulkRouting(a.cfg.Bulk)
	cfg.Stopwatch = time.Now
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
// the agent's clock by site.ReceiveTime).
func (a *Agent) onControl(from netip.AddrPort, pkt []byte, rx time.Time) {
	if a.hs != nil && site.IsHandshake(pkt) {
		a.hs.offer(from, pkt)
		return
	}
	at := a.clock.Now()
	if !rx.IsZero() {
		at = site.ReceiveTime(at, time.Since(rx))
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
	// From here on the core belongs to the control loop: the API and the
	// handshake worker reach it through requests.
	a.startMu.Lock() // a request running at once (do) finishes first
	a.running.Store(true)
	a.startMu.Unlock()
	closeAPI, err := a.serveAPI()
	if err != nil {
		close(a.stopped)
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
	close(a.stopped)

	a.leave()
	closeAPI()
	a.closeAll()
	if err := <-engineDone; err != nil && !errors.Is(err, transport.ErrClosed) {
		return err
	}
	a.log.Info("agent stopped", "site", a.cfg.Site)
	return nil
}

// controlLoop steps the site core on every control datagram, timer
// deadline and API request until ctx is done; it is the core's one owner.
func (a *Agent) controlLoop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	expire := time.NewTicker(10 * time.Second)
	defer expire.Stop()
	mtuCheck := time.NewTicker(mtuCheckInterval)
	defer mtuCheck.Stop()
	feed := time.NewTicker(throughputFeed)
	defer feed.Stop()
	inband := time.NewTicker(inbandFeed)
	defer inband.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-a.ctlIn:
			a.core.Receive(p.at, p.from, p.data)
			a.drainControl(maxControlBatch - 1)
		case f := <-a.reqs:
			f()
		case <-timer.C:
			// The datagrams read before the deadline go first: after a
			// stall, the replies that came meanwhile must be counted
			// before the failure detector looks at the silence.
			a.drainControl(len(a.ctlIn))
			a.core.Tick(a.clock.Now())
		case <-expire.C:
			for _, p := range a.engine.Ports() {
				p.FDB.Expire(a.clock.Mono())
			}
		case <-mtuCheck.C:
			a.updateMSS()
			a.reportLoops()
		case <-feed.C:
			a.feedThroughput()
		case <-inband.C:
			a.feedInband()
		}
		a.flush()
		resetTimer(timer, a.core.Wait(a.clock.Now()))
	}
}

// maxControlBatch bounds how many queued control datagrams the control
// loop takes at once before it sends the answers in one batch.
const maxControlBatch = 64

// drainControl receives up to n of the control datagrams already queued,
// so that under load one flush and one timer reset (a system call and an
// O(N) deadline scan) serve a whole batch, and then applies what they
// changed.
func (a *Agent) drainControl(n int) {
	defer func() {
		a.applyPending(a.clock.Now())
		a.storeRevocations()
	}()
	for range n {
		select {
		case p := <-a.ctlIn:
			a.core.Receive(p.at, p.from, p.data)
		default:
			return
		}
	}
}

// do runs f on the control loop, which owns the core, and waits for it;
// before Run it runs f at once. It reports false, without running f, once
// the loop has stopped.
func (a *Agent) do(f func()) bool {
	a.startMu.Lock()
	if !a.running.Load() {
		defer a.startMu.Unlock()
		f()
		return true
	}
	a.startMu.Unlock()
	done := make(chan struct{})
	select {
	case a.reqs <- func() { f(); close(done) }:
		<-done
		return true
	case <-a.stopped:
		return false
	}
}

// sendNow sends one datagram at once.
func (a *Agent) sendNow(to netip.AddrPort, payload []byte) {
	if err := a.engine.Send([]transport.Message{{Buf: payload, N: len(payload), Addr: to}}); err != nil {
		a.log.Debug("control send", "to", to, "err", err)
	}
}

// flush does what the core asks: it sends the datagrams (restamped and
// sealed as they leave now), logs the route changes and publishes a new
// routing table to the data path when there is one.
func (a *Agent) flush() {
	rd := a.core.Ready(a.clock.Now())
	for _, c := range a.describeSwitches(rd.Switches) {
		a.log.Info("route changed", "dest", c.Dest, "from", strings.Join(c.From, ">"), "to", strings.Join(c.To, ">"), "reason", c.Reason)
		a.history.RouteChange(c)
	}
	if rd.Rejected > 0 {
		a.ctlRejected.Add(float64(rd.Rejected))
	}
	if len(rd.Send) > 0 {
		msgs := make([]transport.Message, len(rd.Send))
		for i, d := range rd.Send {
			msgs[i] = transport.Message{Buf: d.Payload, N: len(d.Payload), Addr: d.To}
		}
		if err := a.engine.Send(msgs); err != nil {
			a.log.Debug("control send", "err", err)
		}
	}
	if rd.Table != nil {
		a.publish(rd.Table, rd.Gone)
	}
	if rd.KVPools != nil {
		a.kvHeld(rd.KVPools)
	}
}

// describeSwitches turns path changes into events for the log and the
// history: destination, old and new path by site name, and the router's
// reason.
func (a *Agent) describeSwitches(sw []routing.Switch) []history.Event {
	node := a.core.Control()
	out := make([]history.Event, 0, len(sw))
	for _, s := range sw {
		out = append(out, history.Event{At: s.At, Dest: node.NameOf(s.To[len(s.To)-1]),
			From: node.Names(s.From), To: node.Names(s.To), Reason: s.Reason})
	}
	return out
}

// publish hands a new table to the data path and forgets the addresses
// and MACs learned at the sites gone from it.
func (a *Agent) publish(t *routing.Table, gone []wire.SiteID) {
	a.engine.SetRoutes(t)
	for _, id := range gone {
		a.engine.ResetSource(id)
		for _, p := range a.engine.Ports() {
			p.FDB.ForgetSite(id)
		}
	}
}

// resetTimer sets timer to fire after d.
func resetTimer(timer *time.Timer, d time.Duration) {
	if !timer.Stop() {
		select {
		case <-timer.C:
		default:
		}
	}
	timer.Reset(d)
}

// leave tells the other sites this one is going, so they drop it at once.
// It runs after the control loop, on the core's owner goroutine.
func (a *Agent) leave() {
	a.core.Leave(a.clock.Now())
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
