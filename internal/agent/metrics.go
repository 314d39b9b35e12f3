package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newRegistry builds the agent's Prometheus registry: the data path's
// counters, the control plane's, and the Go runtime's.
func (a *Agent) newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.ctlDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "detour_control_dropped_total",
		Help: "Control datagrams dropped because the control loop was behind.",
	})
	a.ctlRejected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "detour_control_rejected_total",
		Help: "Control datagrams the control plane rejected (malformed, unknown sender, stale).",
	})
	reg.MustRegister(a.ctlDropped, a.ctlRejected)
	reg.MustRegister(counterSet{
		desc: prometheus.NewDesc("detour_datapath_total", "Data path counters by name (frames, packets, bytes, drops by reason).", []string{"counter"}, nil),
		read: a.engine.Stats().Snapshot,
	})
	reg.MustRegister(counterSet{
		desc: prometheus.NewDesc("detour_control_total", "Control plane counters by name (messages and bytes by type and direction).", []string{"counter"}, nil),
		read: a.controlCounters,
	})
	reg.MustRegister(gaugeSet{a})
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "detour_probe_bytes_total",
		Help: "Bytes of packet trains (available-throughput probes) this site sent, IP and UDP headers included; see docs/throughput.md.",
	}, func() float64 { return float64(a.controlCounters()["probe_bytes"]) }))
	if a.hs != nil {
		reg.MustRegister(counterSet{
			desc: prometheus.NewDesc("detour_handshake_total", "Handshake path counters by name: messages admitted to Diffie-Hellman work, dropped by reason (mac1, mac2, rate_limited, queue_full, malformed), cookie replies sent.", []string{"counter"}, nil),
			read: a.hs.counters,
		})
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "detour_handshake_under_load",
			Help: "1 while this site is under handshake load and asks initiators for cookies.",
		}, a.hs.underLoad))
	}
	return reg
}

// counterSet exports a map of named counters as one labelled metric.
type counterSet struct {
	desc *prometheus.Desc
	read func() map[string]uint64
}

func (c counterSet) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c counterSet) Collect(ch chan<- prometheus.Metric) {
	for name, v := range c.read() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v), name)
	}
}

var (
	linkDelayDesc = prometheus.NewDesc("detour_link_rtt_seconds", "Measured round-trip time of the direct link to a peer.", []string{"peer"}, nil)
	linkLossDesc  = prometheus.NewDesc("detour_link_loss_ratio", "Measured loss of the direct link to a peer.", []string{"peer"}, nil)
	routeDesc     = prometheus.NewDesc("detour_route_latency_seconds", "Estimated one-way latency of the path in use to a destination.", []string{"dest", "relayed"}, nil)
	routeSaveDesc = prometheus.NewDesc("detour_route_saving_seconds", "Latency saved by the path in use over the direct path.", []string{"dest"}, nil)
	membersDesc   = prometheus.NewDesc("detour_members", "Live members of the overlay, this site included.", nil, nil)
	flowsDesc     = prometheus.NewDesc("detour_flows", "Live TCP and UDP flows sent from this site, by class (latency, bulk); counted at the flow tables' last sweep.", []string{"class"}, nil)
	classFrames   = prometheus.NewDesc("detour_class_frames_total", "Frames sent to other sites by class (latency, bulk); frames that are no TCP or UDP flow are latency.", []string{"class"}, nil)
	classBytes    = prometheus.NewDesc("detour_class_bytes_total", "Bytes of frames sent to other sites by class (latency, bulk).", []string{"class"}, nil)
	linkRateDesc  = prometheus.NewDesc("detour_link_rate_bits_per_second", "Estimated available throughput of the direct link to a peer, as the peer reports it.", []string{"peer", "kind"}, nil)
)

// gaugeSet exports the current links and routes.
type gaugeSet struct{ a *Agent }

func (g gaugeSet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{linkDelayDesc, linkLossDesc, routeDesc, routeSaveDesc, membersDesc, flowsDesc, classFrames, classBytes, linkRateDesc} {
		ch <- d
	}
}

func (g gaugeSet) Collect(ch chan<- prometheus.Metric) {
	self := g.a.cfg.Site
	for _, l := range g.a.Links() {
		if l.From != self {
			continue
		}
		ch <- prometheus.MustNewConstMetric(linkDelayDesc, prometheus.GaugeValue, l.RTTMs/1e3, l.To)
		ch <- prometheus.MustNewConstMetric(linkLossDesc, prometheus.GaugeValue, l.LossPct/100, l.To)
		if l.RateMbps > 0 {
			ch <- prometheus.MustNewConstMetric(linkRateDesc, prometheus.GaugeValue, l.RateMbps*1e6, l.To, l.RateKind)
		}
	}
	for _, r := range g.a.Routes() {
		relayed := "false"
		if r.Relayed {
			relayed = "true"
		}
		ch <- prometheus.MustNewConstMetric(routeDesc, prometheus.GaugeValue, r.LatencyMs/1e3, r.Dest, relayed)
		ch <- prometheus.MustNewConstMetric(routeSaveDesc, prometheus.GaugeValue, r.SavingMs/1e3, r.Dest)
	}
	ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(len(g.a.Status().Members)))
	st := g.a.engine.Stats()
	lat, bulk := st.Flows()
	ch <- prometheus.MustNewConstMetric(flowsDesc, prometheus.GaugeValue, float64(lat), "latency")
	ch <- prometheus.MustNewConstMetric(flowsDesc, prometheus.GaugeValue, float64(bulk), "bulk")
	ch <- prometheus.MustNewConstMetric(classFrames, prometheus.CounterValue, float64(st.LatencyFrames.Load()), "latency")
	ch <- prometheus.MustNewConstMetric(classFrames, prometheus.CounterValue, float64(st.BulkFrames.Load()), "bulk")
	ch <- prometheus.MustNewConstMetric(classBytes, prometheus.CounterValue, float64(st.LatencyBytes.Load()), "latency")
	ch <- prometheus.MustNewConstMetric(classBytes, prometheus.CounterValue, float64(st.BulkBytes.Load()), "bulk")
}
