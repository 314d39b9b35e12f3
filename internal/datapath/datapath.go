// Package datapath forwards Ethernet frames between a site's TAP devices and
// the underlay: frames from local hosts are encapsulated with a source route
// and sent to the first hop of the destination site's path; datagrams from
// the underlay are delivered to the local device of their virtual network or
// relayed to the next site of their path. Control datagrams (probes, link
// state, membership) are handed to the control plane untouched.
//
// The forwarding path allocates nothing in steady state: each loop owns its
// buffers, and routes are an immutable snapshot read through an atomic
// pointer.
package datapath

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/edge"
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// Routes is the routing state the data path reads. Implementations are
// immutable snapshots: the control plane publishes a new one with SetRoutes
// whenever routes or membership change.
type Routes interface {
	// Lookup returns the route to a live destination.
	Lookup(dst wire.SiteID) (*routing.Route, bool)
	// Addr returns the underlay address of a live member.
	Addr(site wire.SiteID) (netip.AddrPort, bool)
	// Sites lists the live members other than this site.
	Sites() []wire.SiteID
}

// ControlHandler receives control datagrams. pkt is only valid during the
// call; the handler must copy what it keeps. at is when the kernel
// received the datagram (wall clock), or zero when the socket does not
// say.
type ControlHandler func(from netip.AddrPort, pkt []byte, at time.Time)

// Port is the attachment of one virtual network to this site.
type Port struct {
	Network uint32
	Dev     device.Device
	FDB     *fdb.Table
	// KV is the network's key router (package router), nil when the
	// network has no key-value pool: the forwarding path then costs one
	// nil check.
	KV atomic.Pointer[router.Table]
	// Flood limits and watches the frames the port floods (flood.go);
	// nil floods without limit.
	Flood *FloodGuard

	// stashed counts the neighbour requests and answers the device loop
	// keeps for sites not reachable yet (stash.go).
	stashed atomic.Int32
}

// Config configures an Engine.
type Config struct {
	Self    wire.SiteID
	Conn    transport.Conn
	Ports   []*Port
	Control ControlHandler
	// Now returns monotonic nanoseconds; it stamps FDB entries.
	Now func() int64
	// Wall, when set, returns the wall clock in nanoseconds (the clock
	// probes are stamped with), and data packets carry send stamps
	// (wire.DataFlagStamped) from it; received stamps are recorded in
	// Stats.Peers either way.
	Wall func() int64
	// Crypto, when set, seals every data packet and rejects unsealed
	// ones; nil carries frames in the clear.
	Crypto Crypto
}

// Crypto seals and opens data packets end to end between sites and
// authenticates relayed packets hop by hop (package session implements it).
// Its methods must be safe for concurrent use and must not allocate.
type Crypto interface {
	// SealData builds a sealed packet in b from the frame of frameLen
	// bytes at b[wire.FrameOffset(n, true):] for a path of n sites,
	// writing the header h, and returns its length.
	SealData(b []byte, h *wire.DataHeader, frameLen int) (int, error)
	// Relay checks a packet this site relays, advances its hop index and
	// re-tags it for the next site, which it returns.
	Relay(b []byte, h *wire.DataHeader, off int) (wire.SiteID, error)
	// OpenData authenticates and decrypts a packet that reached this site
	// and returns its frame.
	OpenData(b []byte, h *wire.DataHeader, off int) ([]byte, error)
}

// maxFrame is the largest Ethernet frame the data path carries.
const maxFrame = 65535

type routesBox struct{ r Routes }

// Engine is a site's data path.
type Engine struct {
	self    wire.SiteID
	conn    transport.Conn
	control ControlHandler
	now     func() int64
	wall    func() int64
	crypto  Crypto
	routes  atomic.Pointer[routesBox]
	writeMu sync.Mutex // serialises writers of conn
	stats   Stats

	// ports maps network IDs to ports; it is replaced, never changed, so
	// the loops read it without locks. portMu serialises the writers.
	ports  atomic.Pointer[map[uint32]*Port]
	portMu sync.Mutex
	loops  sync.WaitGroup
	errMu  sync.Mutex
	err    error
	run    bool

	// mss packs the clamp for IPv4 (high 16 bits) and IPv6 (low 16 bits);
	// zero disables clamping.
	mss      atomic.Uint32
	innerMTU atomic.Int64
	shaper   atomic.Pointer[edge.Shaper]
	flowCfg  atomic.Pointer[FlowConfig]

	// Sources whose sequence windows the underlay loop must forget.
	resetMu    sync.Mutex
	resetSites []wire.SiteID
	resetGen   atomic.Uint64
}

// New returns an engine; Run starts it.
func New(cfg Config) *Engine {
	e := &Engine{self: cfg.Self, conn: cfg.Conn, control: cfg.Control, now: cfg.Now, wall: cfg.Wall, crypto: cfg.Crypto}
	ports := map[uint32]*Port{}
	for _, p := range cfg.Ports {
		ports[p.Network] = p
	}
	e.ports.Store(&ports)
	e.routes.Store(&routesBox{r: noRoutes{}})
	e.SetFlowConfig(DefaultFlowConfig())
	return e
}

// SetRoutes publishes a new routing snapshot, and wakes the device loops
// that keep neighbour requests or answers for sites that may have become
// reachable.
func (e *Engine) SetRoutes(r Routes) {
	e.routes.Store(&routesBox{r: r})
	for _, p := range *e.ports.Load() {
		if p.stashed.Load() == 0 {
			continue
		}
		if w, ok := p.Dev.(device.Waker); ok {
			if err := w.Wake(); err != nil {
				e.stats.DropDevice.Add(1)
			}
		}
	}
}

// SetInnerMTU sets the largest IP packet of a host that the underlay
// carries without fragmenting it: TCP SYNs crossing this site get their
// MSS clamped to fit, and larger TCP segments are answered with an ICMP
// "packet too big" (other large packets are fragmented on the underlay).
// Zero disables both.
func (e *Engine) SetInnerMTU(mtu int) {
	e.innerMTU.Store(int64(mtu))
	if mtu == 0 {
		e.mss.Store(0)
		return
	}
	v4, v6 := edge.MSSForMTU(mtu)
	e.mss.Store(uint32(v4)<<16 | uint32(v6))
}

// SetShaper installs the egress rate limits (nil for none).
func (e *Engine) SetShaper(s *edge.Shaper) { e.shaper.Store(s) }

// ResetSource makes the data path forget the sequence numbers seen from
// site, which left or restarted.
func (e *Engine) ResetSource(site wire.SiteID) {
	e.resetMu.Lock()
	e.resetSites = append(e.resetSites, site)
	e.resetGen.Add(1)
	e.resetMu.Unlock()
}

// Routes returns the routing snapshot in force.
func (e *Engine) Routes() Routes { return e.routes.Load().r }

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Port returns the port of a network.
func (e *Engine) Port(network uint32) *Port { return (*e.ports.Load())[network] }

// Ports returns the ports, in no particular order.
func (e *Engine) Ports() []*Port {
	var out []*Port
	for _, p := range *e.ports.Load() {
		out = append(out, p)
	}
	return out
}

// ErrPortExists is returned by AddPort for a network already attached.
var ErrPortExists = errors.New("datapath: network already attached")

// AddPort attaches a network; if the engine runs, its device loop starts.
func (e *Engine) AddPort(p *Port) error {
	e.portMu.Lock()
	defer e.portMu.Unlock()
	old := *e.ports.Load()
	if _, ok := old[p.Network]; ok {
		return ErrPortExists
	}
	ports := make(map[uint32]*Port, len(old)+1)
	for id, q := range old {
		ports[id] = q
	}
	ports[p.Network] = p
	e.ports.Store(&ports)
	if e.run {
		e.startLoop(func() error { return e.deviceLoop(p) })
	}
	return nil
}

// RemovePort detaches a network: frames for it are dropped from now on.
// It returns the removed port, whose device the caller closes (which ends
// its loop).
func (e *Engine) RemovePort(network uint32) *Port {
	e.portMu.Lock()
	defer e.portMu.Unlock()
	old := *e.ports.Load()
	p := old[network]
	if p == nil {
		return nil
	}
	ports := make(map[uint32]*Port, len(old))
	for id, q := range old {
		if id != network {
			ports[id] = q
		}
	}
	e.ports.Store(&ports)
	return p
}

// Send writes control datagrams on the engine's socket; the control plane
// uses it so that all writers share one lock.
func (e *Engine) Send(msgs []transport.Message) error {
	e.writeMu.Lock()
	_, err := e.conn.WriteBatch(msgs)
	e.writeMu.Unlock()
	return err
}

// Run forwards until the socket and devices are closed. It returns nil
// after a clean close, or the first error a loop ended with.
func (e *Engine) Run() error {
	e.portMu.Lock()
	e.run = true
	e.startLoop(e.underlayLoop)
	for _, p := range *e.ports.Load() {
		e.startLoop(func() error { return e.deviceLoop(p) })
	}
	e.portMu.Unlock()
	e.loops.Wait()
	e.errMu.Lock()
	defer e.errMu.Unlock()
	return e.err
}

// startLoop runs f in a goroutine and records its error unless it only
// reports a closed socket or device.
func (e *Engine) startLoop(f func() error) {
	e.loops.Add(1)
	go func() {
		defer e.loops.Done()
		err := f()
		if err != nil && !errors.Is(err, transport.ErrClosed) && !errors.Is(err, device.ErrClosed) {
			e.errMu.Lock()
			if e.err == nil {
				e.err = err
			}
			e.errMu.Unlock()
		}
	}()
}

type noRoutes struct{}

func (noRoutes) Lookup(wire.SiteID) (*routing.Route, bool) { return nil, false }
func (noRoutes) Addr(wire.SiteID) (netip.AddrPort, bool)   { return netip.AddrPort{}, false }
func (noRoutes) Sites() []wire.SiteID                      { return nil }
