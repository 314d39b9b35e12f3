package agent

import (
	"context"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/kv/router"
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

// termTAPName is the name of a network's terminator device: its TAP
// device's name (at most 12 bytes of it) and "-kv".
func termTAPName(n config.Network) string { return fmt.Sprintf("%.12s-kv", n.TAP) }

// tcpTerm is one running terminator.
type tcpTerm struct {
	network string
	term    *tcpterm.Terminator
	port    func() *router.Table
}

// startTCPTerms starts the terminator of every network of st that has a
// bridge; each runs until ctx is done.
func (a *Agent) startTCPTerms(ctx context.Context, st *kvState) {
	if os.Getenv("DETOUR_NO_KV_TCP") != "" || len(st.nets) == 0 {
		return
	}
	var terms []tcpTerm
	for _, kn := range st.nets {
		n, ok := a.configuredNetwork(kn.name)
		if !ok {
			continue
		}
		if n.Bridge == "" {
			a.log.Info("kv tcp: the network has no bridge; TCP to its pools is not terminated", "network", n.Name)
			continue
		}
		dev, err := device.OpenTAPWith(termTAPName(n), n.MTU, n.Bridge, device.TAPOptions{})
		if err != nil {
			a.log.Error("kv tcp: terminator device", "network", n.Name, "err", err)
			continue
		}
		port := kn.port
		term, err := tcpterm.New(tcpterm.Config{Dev: dev, Bridge: port.Dev, Self: wire.SiteIDFromName(a.cfg.Site), Table: port.KV.Load,
			Log: a.log.With("network", n.Name), Now: a.clock.Mono})
		if err != nil {
			a.log.Error("kv tcp: terminator", "network", n.Name, "err", err)
			dev.Close()
			continue
		}
		terms = append(terms, tcpTerm{network: n.Name, term: term, port: port.KV.Load})
		a.log.Info("kv tcp: terminator started", "network", n.Name, "device", dev.Name())
		go func() {
			if err := term.Run(ctx); err != nil && ctx.Err() == nil {
				a.log.Error("kv tcp: terminator stopped", "network", n.Name, "err", err)
			}
			dev.Close()
		}()
	}
	if len(terms) > 0 && a.registry != nil {
		a.registry.MustRegister(tcpTermCollector{terms})
	}
}

// configuredNetwork returns the network called name as configured (as
// kvTables read it).
func (a *Agent) configuredNetwork(name string) (config.Network, bool) {
	for _, n := range a.cfg.Networks {
		if n.Name == name {
			return n, true
		}
	}
	return config.Network{}, false
}

// tcpTermCollector exports the terminators' counters and the router's
// TCP counters per network.
type tcpTermCollector struct{ terms []tcpTerm }

var kvTCPDesc = prometheus.NewDesc("detour_kv_tcp_total",
	"The key router's TCP terminator: connections, requests and drops by counter (gauges: active, server_conns).",
	[]string{"network", "counter"}, nil)

func (c tcpTermCollector) Describe(ch chan<- *prometheus.Desc) { ch <- kvTCPDesc }

func (c tcpTermCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.terms {
		for name, v := range tcpTermCounters(t) {
			ch <- prometheus.MustNewConstMetric(kvTCPDesc, prometheus.UntypedValue, float64(v), t.network, name)
		}
	}
}

// tcpTermCounters returns a terminator's counters, and its table's TCP
// counters, by name.
func tcpTermCounters(t tcpTerm) map[string]int64 {
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
	if tb := t.port(); tb != nil {
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
