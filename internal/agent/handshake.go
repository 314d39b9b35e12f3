package agent

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/site"
	"github.com/detour-overlay/detour/internal/wire"
)

// handshakes is the I/O shell of the handshake path. The underlay reader
// screens every handshake message with the guard (mac1, load, mac2, rate
// per source: no public-key operation) and queues the admitted ones for
// one worker goroutine, which does the Diffie-Hellman work. The queue is
// bounded: when it is full the message is dropped and counted, so a
// flood of handshakes costs the data path the screening only, and never
// the Diffie-Hellman work nor a wait.
type handshakes struct {
	a      *Agent
	guard  *session.Guard
	queue  chan hsMsg
	pool   sync.Pool
	full   atomic.Uint64 // admitted messages dropped because the queue was full
	failed atomic.Uint64 // admitted messages the node rejected

	// The kernel shield (shield.go); filter is nil without one.
	filter        shieldFilter
	shielded      atomic.Bool
	trustChanged  atomic.Bool
	shieldChanges atomic.Uint64
	shieldMu      sync.Mutex // guards trusted and the program's changes
	trusted       map[wire.SiteID]netip.AddrPort
}

type hsMsg struct {
	from netip.AddrPort
	buf  *[hsBufLen]byte
	n    int
}

// hsBufLen holds the longest handshake message.
const hsBufLen = max(wire.HandshakeInitLen, wire.HandshakeResponseLen, wire.CookieReplyLen)

// shieldCheckInterval is how often the worker checks whether the shield
// is still wanted.
const shieldCheckInterval = 250 * time.Millisecond

// hsQueueLen bounds the admitted messages waiting for the worker; the
// guard counts the site under load from a sixteenth of it
// (session.DefaultLoadBacklog).
const hsQueueLen = 256

func newHandshakes(a *Agent) *handshakes {
	h := &handshakes{a: a, guard: session.NewGuard(a.sec, session.GuardConfig{}), queue: make(chan hsMsg, hsQueueLen),
		trusted: map[wire.SiteID]netip.AddrPort{}}
	h.pool.New = func() any { return new([hsBufLen]byte) }
	for site, addr := range configuredAddrs(a.cfg) {
		h.trust(site, addr)
	}
	h.setupShield()
	return h
}

// configuredAddrs returns the configured underlay address of every peer
// that has one.
func configuredAddrs(cfg *config.Agent) map[wire.SiteID]netip.AddrPort {
	out := map[wire.SiteID]netip.AddrPort{}
	for _, p := range cfg.Peers {
		if ap, err := netip.ParseAddrPort(p.Address); err == nil {
			out[wire.SiteIDFromName(p.Name)] = ap
		}
	}
	return out
}

// offer screens a handshake message on the underlay reader's goroutine and
// queues it if admitted. pkt is only valid during the call.
func (h *handshakes) offer(from netip.AddrPort, pkt []byte) {
	now := h.a.clock.Now()
	v, reply := h.guard.Screen(now, from, pkt, len(h.queue))
	if reply != nil {
		h.a.sendNow(from, reply)
	}
	if h.filter != nil && h.guard.Shielded(now) != h.shielded.Load() {
		h.checkShield()
	}
	if v != session.Admit || len(pkt) > hsBufLen {
		return
	}
	buf := h.pool.Get().(*[hsBufLen]byte)
	m := hsMsg{from: from, buf: buf, n: copy(buf[:], pkt)}
	select {
	case h.queue <- m:
	default:
		h.pool.Put(buf)
		h.full.Add(1)
	}
}

// run is the worker: it does the handshake work of the admitted messages
// until ctx is done, and lowers the shield when a flood is over even if
// no handshake message comes to tell.
func (h *handshakes) run(ctx context.Context) {
	tick := time.NewTicker(shieldCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.checkShield()
		case m := <-h.queue:
			h.handle(m.from, m.buf[:m.n])
			h.pool.Put(m.buf)
		}
	}
}

// handle runs one admitted message through the session node
// (site.HandshakeWork) on the worker, outside the control loop; what the
// result changes in the core (the reply to send, the peer's address, the
// messages that waited for the session) is done on the loop.
func (h *handshakes) handle(from netip.AddrPort, pkt []byte) {
	now := h.a.clock.Now()
	res, err := site.HandshakeWork(h.a.sec, now, pkt)
	if err != nil {
		h.failed.Add(1)
	} else if res.Peer != 0 {
		h.trust(res.Peer, from)
	}
	if res.Reply != nil || (err == nil && res.Peer != 0) {
		h.a.do(func() { h.a.core.Handshaken(now, from, res, err) })
	}
}

// counters returns the handshake path's counters by name: the guard's
// verdicts (admitted, dropped_mac1, dropped_mac2, dropped_rate_limited,
// dropped_malformed), cookie replies sent, queue overflows, the admitted
// messages the node rejected, the shield's changes, and the datagrams the
// kernel dropped at the underlay socket (dropped_by_kernel: the shield's,
// of any type, and those that found the receive buffer full).
func (h *handshakes) counters() map[string]uint64 {
	counts, cookies := h.guard.Counts()
	out := map[string]uint64{
		"cookie_replies_sent": cookies,
		"dropped_queue_full":  h.full.Load(),
		"failed":              h.failed.Load(),
		"shield_changes":      h.shieldChanges.Load(),
	}
	if sd, ok := h.a.conn.(interface{ SocketDrops() (uint64, error) }); ok {
		if n, err := sd.SocketDrops(); err == nil {
			out["dropped_by_kernel"] = n
		}
	}
	for name, v := range counts {
		if name == session.Admit.String() {
			out["admitted"] = v
		} else {
			out["dropped_"+name] = v
		}
	}
	return out
}

// underLoad is 1 while the site asks initiators for cookies, else 0.
func (h *handshakes) underLoad() float64 {
	if h.guard.UnderLoad(h.a.clock.Now()) {
		return 1
	}
	return 0
}
