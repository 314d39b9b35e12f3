package agent

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/kv/tcpterm"
	"github.com/detour-overlay/detour/internal/wire"
)

// The key router's TCP terminator (issue 17, item 3; docs/kv.md): for
// every network with pools and a bridge, a TAP device of its own on the
// bridge and a user-space TCP stack that takes the clients' connections
// to the pools' virtual addresses and sends their requests over pooled
// connections to the servers. It needs nothing the agent does not have
// already (CAP_NET_ADMIN, for the TAP device). DETOUR_NO_KV_TCP turns it
// off: TCP to the virtual addresses is then dropped and counted.

// kvTCPEvery is how often (in kv ticks: 1 s) the kv loop looks for
// networks that gained or lost their pools other than by a hand-over.
const kvTCPEvery = 40

// termTAPName is the name of a network's terminator device: its TAP
// device's name (at most 12 bytes of it) and "-kv".
func termTAPName(n config.Network) string { return fmt.Sprintf("%.12s-kv", n.TAP) }

// tcpTerm is one running terminator.
type tcpTerm struct {
	network string
	port    *datapath.Port
	term    *tcpterm.Terminator
	stop    context.CancelFunc
	done    chan struct{}
}

// tcpTerms are the running terminators, one per network port with pools;
// the kv loop changes them, the metrics read them.
type tcpTerms struct {
	mu         sync.Mutex
	running    []*tcpTerm
	failed     map[string]bool // networks whose terminator could not start (logged once)
	registered bool
}

// kvTCPSync starts a terminator for every network of st that has pools
// and a bridge and none yet, and stops those whose network lost its
// pools or its port. It runs on the kv loop.
func (a *Agent) kvTCPSync(ctx context.Context, st *kvState, tt *tcpTerms) {
	if os.Getenv("DETOUR_NO_KV_TCP") != "" {
		return
	}
	tt.mu.Lock()
	defer tt.mu.Unlock()
	var keep []*tcpTerm
	for _, r := range tt.running {
		if r.port.KV.Load() != nil && a.engine.Port(r.port.Network) == r.port {
			keep = append(keep, r)
			continue
		}
		r.stop()
		<-r.done
		a.log.Info("kv tcp: terminator stopped", "network", r.network)
	}
	tt.running = keep
	for _, kn := range st.nets {
		if kn.port.KV.Load() == nil || tt.has(kn.port) {
			continue
		}
		n, ok := kvNetConfig(st, kn.name)
		if !ok {
			continue
		}
		if r := a.startTCPTerm(ctx, n, kn.port, tt); r != nil {
			tt.running = append(tt.running, r)
		}
	}
	if len(tt.running) > 0 && !tt.registered && a.registry != nil {
		a.registry.MustRegister(tcpTermCollector{tt})
		tt.registered = true
	}
}

// has reports whether port has a terminator.
func (tt *tcpTerms) has(port *datapath.Port) bool {
	for _, r := range tt.running {
		if r.port == port {
			return true
		}
	}
	return false
}

// stopAll stops every terminator and waits for them.
func (tt *tcpTerms) stopAll() {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for _, r := range tt.running {
		r.stop()
		<-r.done
	}
	tt.running = nil
}

// kvNetConfig returns the network called name as the kv loop knows it.
func kvNetConfig(st *kvState, name string) (config.Network, bool) {
	for _, n := range st.netcfg {
		if n.Name == name {
			return n, true
		}
	}
	return config.Network{}, false
}

// startTCPTerm opens network n's terminator device and starts its
// terminator, or logs (once) why it cannot.
func (a *Agent) startTCPTerm(ctx context.Context, n config.Network, port *datapath.Port, tt *tcpTerms) *tcpTerm {
	fail := func(msg string, args ...any) *tcpTerm {
		if tt.failed == nil {
			tt.failed = map[string]bool{}
		}
		if !tt.failed[n.Name] {
			a.log.Warn(msg, append([]any{"network", n.Name}, args...)...)
			tt.failed[n.Name] = true
		}
		return nil
	}
	if n.Bridge == "" {
		return fail("kv tcp: the network has no bridge; TCP to its pools is not terminated")
	}
	dev, err := device.OpenTAPWith(termTAPName(n), n.MTU, n.Bridge, device.TAPOptions{})
	if err != nil {
		return fail("kv tcp: terminator device", "err", err)
	}
	term, err := tcpterm.New(tcpterm.Config{Dev: dev, Bridge: port.Dev, Self: wire.SiteIDFromName(a.cfg.Site),
		Table: port.KV.Load, Log: a.log.With("network", n.Name), Now: a.clock.Mono})
	if err != nil {
		dev.Close()
		return fail("kv tcp: terminator", "err", err)
	}
	delete(tt.failed, n.Name)
	tctx, stop := context.WithCancel(ctx)
	r := &tcpTerm{network: n.Name, port: port, term: term, stop: stop, done: make(chan struct{})}
	a.log.Info("kv tcp: terminator started", "network", n.Name, "device", dev.Name())
	go func() {
		defer close(r.done)
		if err := term.Run(tctx); err != nil && tctx.Err() == nil {
			a.log.Error("kv tcp: terminator stopped", "network", n.Name, "err", err)
		}
		dev.Close()
	}()
	return r
}

// tcpTermCollector exports the terminators' counters and the router's
// TCP counters per network.
type tcpTermCollector struct{ tt *tcpTerms }

var kvTCPDesc = prometheus.NewDesc("detour_kv_tcp_total",
	"The key router's TCP terminator: connections, requests and drops by counter (gauges: active, server_conns).",
	[]string{"network", "counter"}, nil)

func (c tcpTermCollector) Describe(ch chan<- *prometheus.Desc) { ch <- kvTCPDesc }

func (c tcpTermCollector) Collect(ch chan<- prometheus.Metric) {
	c.tt.mu.Lock()
	running := append([]*tcpTerm(nil), c.tt.running...)
	c.tt.mu.Unlock()
	for _, t := range running {
		for name, v := range tcpTermCounters(t) {
			ch <- prometheus.MustNewConstMetric(kvTCPDesc, prometheus.UntypedValue, float64(v), t.network, name)
		}
	}
}

// tcpTermCounters returns a terminator's counters, and its table's TCP
// counters, by name.
func tcpTermCounters(t *tcpTerm) map[string]int64 {
	s := t.term.Stats()
	m := map[string]int64{
		"accepted":      int64(s.Accepted.Load()),
		"refused":       int64(s.Refused.Load()),
		"active":        s.Active.Load(),
		"requests":      int64(s.Requests.Load()),
		"split":         int64(s.Split.Load()),
		"errors":        int64(s.Errors.Load()),
		"no_server":     int64(s.NoServer.Load()),
		"failed":        int64(s.Failed.Load()),
		"dials":         int64(s.Dials.Load()),
		"dial_failures": int64(s.DialFailures.Load()),
		"server_conns":  s.ServerConns.Load(),
		"bad_replies":   int64(s.BadReplies.Load()),
		"input_drops":   int64(s.InputDrops.Load()),
	}
	frames, packets := t.term.Coalescing()
	m["input_frames"], m["input_packets"] = int64(frames), int64(packets)
	if tb := t.port.KV.Load(); tb != nil {
		r := tb.TCPStats()
		m["frames_to_terminator"] = int64(r.ToTerminator.Load())
		m["frames_from_terminator"] = int64(r.FromTerminator.Load())
		m["frames_remote"] = int64(r.Remote.Load())
		m["dropped_disabled"] = int64(r.DropDisabled.Load())
		m["dropped_no_client"] = int64(r.DropNoClient.Load())
		m["dropped_no_mac"] = int64(r.DropNoMAC.Load())
		m["dropped_conflict"] = int64(r.DropConflict.Load())
		m["dropped_full"] = int64(r.DropFull.Load())
		m["dropped_other"] = int64(r.DropOther.Load())
	}
	return m
}
