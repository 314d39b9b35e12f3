// Package narrow runs the experiment of issue 23 (docs/bulk.md) on the
// testbed's narrow-relay scenario: West and East are joined by a direct
// path that is the fastest but only 20 Mbit/s wide, and by a path through
// Relay 3 ms slower and 200 Mbit/s wide. Over each overlay in turn (vxlan,
// tinc, detour) it measures, between a host at West and a host at East:
//
//   - a request/response stream (64-byte requests every 10 ms on one TCP
//     connection, rr.go) while the WAN is idle;
//   - a bulk iperf3 transfer West→East, its throughput, and the same
//     stream during it;
//
// and, over detour, reads the agents' counters through their APIs: the
// flow classes' frames and class changes at West, the frames of a flow
// received out of order at East (the receiving gateway), and the bytes
// of probes and packet trains every agent sent.
//
// The testbed is driven through the lab binary's own CLI, as the lanman
// experiment does (lanman.Testbed).
package narrow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/lab/experiment/lanman"
	"github.com/detour-overlay/detour/internal/lab/experiment/nsnet"
	"github.com/detour-overlay/detour/internal/lab/testbed"
)

// The sites of the narrow-relay scenario.
const (
	West  = "West"
	East  = "East"
	Relay = "Relay"
)

// Ports of the request/response server and of iperf3 at East's host.
const (
	rrPort    = 7000
	iperfPort = 5201
)

// Config describes a run.
type Config struct {
	// Bin is the detour-lab binary (for `testbed` commands); Detour the
	// detour binary the agents run (empty: the testbed's default).
	Bin, Detour string
	// Scenario is the testbed scenario, with sites West, East and Relay.
	Scenario string
	// Overlays are measured in this order.
	Overlays []string
	// Settle is how long the stream runs, unrecorded, once the overlay
	// carries it (detour's agents meanwhile measure their links); Idle is
	// how long it is then recorded on the idle WAN; Transfer is the
	// length of the bulk transfer.
	Settle, Idle, Transfer time.Duration
	// Interval is the request period of the stream.
	Interval time.Duration
	// StateDir and Prefix give the experiment's testbed its own state
	// directory and namespace prefix.
	StateDir, Prefix string
	// Log receives progress lines.
	Log io.Writer
}

// DefaultConfig is the full run: 10 s to settle, 20 s idle, a 30 s
// transfer, requests every 10 ms, over vxlan, tinc and detour.
func DefaultConfig() Config {
	return Config{Scenario: "narrow-relay", Overlays: []string{"vxlan", "tinc", "detour"},
		Settle: 10 * time.Second, Idle: 20 * time.Second, Transfer: 30 * time.Second, Interval: 10 * time.Millisecond}
}

// Short shortens c to a run of about a minute per overlay.
func (c *Config) Short() {
	c.Settle, c.Idle, c.Transfer = 5*time.Second, 8*time.Second, 20*time.Second
}

// OverlayResult is what one overlay gave.
type OverlayResult struct {
	Overlay string `json:"overlay"`
	// ThroughputMbps is what iperf3's receiver got; Retransmits the
	// sender's TCP retransmissions.
	ThroughputMbps float64 `json:"throughput_mbps"`
	Retransmits    int     `json:"retransmits"`
	// Idle and Load are the stream's round trips (ms) on the idle WAN and
	// during the transfer; ChangeAtS is when (s after the transfer's
	// start) detour's West agent first counted a class change, or -1.
	Idle      []float64 `json:"idle_ms"`
	Load      []float64 `json:"load_ms"`
	LoadAtS   []float64 `json:"load_at_s"`
	ChangeAtS float64   `json:"class_change_at_s"`
	// Timeline is West's route to East and flow counters during the
	// transfer, at every change (detour only).
	Timeline []Change `json:"timeline,omitempty"`
	// Counters are, per site, the agents' counters that changed during
	// the transfer (detour only); Totals the counters of probes, trains
	// and flow classes at the end of the run.
	Counters map[string]map[string]uint64 `json:"counters,omitempty"`
	Totals   map[string]map[string]uint64 `json:"totals,omitempty"`
	// Routes are West's and East's route tables at the end (detour's
	// /v1/routes, as the agent wrote them).
	Routes map[string]json.RawMessage `json:"routes,omitempty"`
}

// Result is the whole run.
type Result struct {
	Scenario string          `json:"scenario"`
	Started  time.Time       `json:"started"`
	Config   Config          `json:"-"`
	Overlays []OverlayResult `json:"overlays"`
	Versions string          `json:"versions,omitempty"`
}

// Run measures every overlay in turn; it tears down what it started, also
// when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	res := &Result{Scenario: cfg.Scenario, Started: time.Now(), Config: cfg}
	for _, ov := range cfg.Overlays {
		x := &run{cfg: cfg, ov: ov}
		r, err := x.all(ctx)
		if r != nil {
			res.Overlays = append(res.Overlays, *r)
		}
		if err != nil {
			return res, fmt.Errorf("overlay %s: %w", ov, err)
		}
	}
	return res, nil
}

// run is the experiment on one overlay.
type run struct {
	cfg    Config
	ov     string
	tb     *lanman.Testbed
	st     *testbed.Status
	agents map[string]*api.Client
}

func (x *run) logf(format string, args ...any) {
	if x.cfg.Log != nil {
		fmt.Fprintf(x.cfg.Log, "[%s %s] %s\n", time.Now().Format("15:04:05"), x.ov, fmt.Sprintf(format, args...))
	}
}

func (x *run) all(ctx context.Context) (r *OverlayResult, err error) {
	x.tb = &lanman.Testbed{Bin: x.cfg.Bin, Detour: x.cfg.Detour, StateDir: x.cfg.StateDir, Prefix: x.cfg.Prefix,
		Log: func(format string, args ...any) {}}
	x.logf("testbed up %s --overlay %s", x.cfg.Scenario, x.ov)
	if err := x.tb.Up(ctx, x.cfg.Scenario, x.ov); err != nil {
		_ = x.tb.Down()
		return nil, err
	}
	defer func() {
		if derr := x.tb.Down(); derr != nil && err == nil {
			err = derr
		}
		x.logf("testbed down")
	}()
	x.st = x.tb.Status()
	west, east, err := x.hosts()
	if err != nil {
		return nil, err
	}
	if x.ov == "detour" {
		x.agents = map[string]*api.Client{}
		for _, s := range []string{West, East, Relay} {
			c := api.NewClient(config.DefaultAPI)
			c.HTTP = nsnet.HTTPClient(x.st.Site(s).Gateway, 2*time.Second)
			x.agents[s] = c
		}
	}
	l, err := nsnet.Listen(east.NS, "tcp", net.JoinHostPort(east.Addr, strconv.Itoa(rrPort)))
	if err != nil {
		return nil, err
	}
	defer l.Close()
	go ServeEcho(l)
	conn, err := x.connect(ctx, west.NS, net.JoinHostPort(east.Addr, strconv.Itoa(rrPort)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	r = &OverlayResult{Overlay: x.ov, ChangeAtS: -1}
	if _, err := x.stream(ctx, conn, x.cfg.Settle); err != nil {
		return r, fmt.Errorf("settling: %w", err)
	}
	idle, err := x.stream(ctx, conn, x.cfg.Idle)
	if err != nil {
		return r, fmt.Errorf("idle stream: %w", err)
	}
	r.Idle = millis(idle)
	x.logf("idle: %d requests, p50 %.2f ms", len(idle), ms(Percentile(idle, 50)))
	if err := x.transfer(ctx, conn, west, east, r); err != nil {
		return r, err
	}
	if x.agents != nil {
		x.totals(r)
	}
	return r, nil
}

// hosts returns the first hosts of West and East, with their overlay
// addresses.
func (x *run) hosts() (west, east testbed.HostState, err error) {
	for _, name := range []string{West, East, Relay} {
		s := x.st.Site(name)
		if s == nil || len(s.Hosts) == 0 {
			return west, east, fmt.Errorf("scenario %s has no site %s with a host", x.cfg.Scenario, name)
		}
	}
	west, east = x.st.Site(West).Hosts[0], x.st.Site(East).Hosts[0]
	if p, err := netip.ParsePrefix(east.Addr); err == nil {
		east.Addr = p.Addr().String()
	}
	return west, east, nil
}

// connect opens the stream's connection from West's host, retrying while
// the overlay comes up.
func (x *run) connect(ctx context.Context, ns, addr string) (net.Conn, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := nsnet.DialContext(ctx, ns, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the overlay does not carry West→East: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// stream runs the request/response stream on conn for d.
func (x *run) stream(ctx context.Context, conn net.Conn, d time.Duration) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return Stream(ctx, conn, x.cfg.Interval, 5*time.Second)
}

// transfer runs iperf3 West→East for cfg.Transfer with the stream beside
// it and, over detour, watches West's agent for the class change.
func (x *run) transfer(ctx context.Context, conn net.Conn, west, east testbed.HostState, r *OverlayResult) error {
	srv := nsnet.Command(east.NS, "iperf3", "-s", "-1", "-p", strconv.Itoa(iperfPort))
	if err := srv.Start(); err != nil {
		return fmt.Errorf("iperf3 server: %w", err)
	}
	defer func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	}()
	time.Sleep(500 * time.Millisecond)
	before := x.counters()
	loadCtx, stop := context.WithCancel(ctx)
	defer stop()
	type streamed struct {
		s   []Sample
		err error
	}
	ch := make(chan streamed, 1)
	go func() {
		s, err := Stream(loadCtx, conn, x.cfg.Interval, 5*time.Second)
		ch <- streamed{s, err}
	}()
	start := time.Now()
	seen := make(chan watched, 1)
	go x.watch(loadCtx, start, before, seen)
	x.logf("iperf3 West→East for %v", x.cfg.Transfer)
	secs := strconv.Itoa(int(x.cfg.Transfer / time.Second))
	out, err := nsnet.Command(west.NS, "iperf3", "-c", east.Addr, "-p", strconv.Itoa(iperfPort), "-t", secs, "-J").Output()
	stop()
	got := <-ch
	w := <-seen
	r.ChangeAtS, r.Timeline = w.changeAt, w.changes
	ip, perr := parseIperf(out)
	if err != nil && perr != nil {
		return fmt.Errorf("iperf3 client: %w: %v", err, perr)
	}
	if perr != nil {
		return perr
	}
	if got.err != nil {
		return fmt.Errorf("stream during the transfer: %w", got.err)
	}
	r.ThroughputMbps = ip.End.SumReceived.BitsPerSecond / 1e6
	r.Retransmits = ip.End.SumSent.Retransmits
	r.Load = millis(got.s)
	for _, s := range got.s {
		r.LoadAtS = append(r.LoadAtS, s.At.Sub(start).Seconds())
	}
	if x.agents != nil {
		r.Counters = delta(before, x.counters())
	}
	x.logf("transfer: %.1f Mbit/s, %d retransmits; stream p50 %.2f ms (idle %.2f); class change at %.1f s",
		r.ThroughputMbps, r.Retransmits, ms(Percentile(got.s, 50)), percentileMs(r.Idle, 50), r.ChangeAtS)
	return nil
}

// Change is a moment of West's view during the transfer: its route to
// East (path and bulk path) and its flow counters, recorded whenever they
// differ from the previous poll.
type Change struct {
	AtS          float64  `json:"at_s"`
	Path         []string `json:"path"`
	Bulk         []string `json:"bulk,omitempty"`
	ClassChanges uint64   `json:"class_changes"`
	Repaths      uint64   `json:"flow_repaths"`
	Moves        uint64   `json:"flow_moves"`
}

// watch polls West's agent every 250 ms until ctx ends, records its
// changes, and sends them and when (s after start) its class_changes
// counter first exceeded its value in before (or -1).
func (x *run) watch(ctx context.Context, start time.Time, before map[string]map[string]uint64, out chan<- watched) {
	w := watched{changeAt: -1}
	defer func() { out <- w }()
	if x.agents == nil {
		return
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var st api.Status
		var routes []routeView
		if x.agents[West].Get("/v1/status", &st) != nil || x.agents[West].Get("/v1/routes", &routes) != nil {
			continue
		}
		c := Change{AtS: time.Since(start).Seconds(), ClassChanges: st.Counters["class_changes"] - before[West]["class_changes"],
			Repaths: st.Counters["flow_repaths"] - before[West]["flow_repaths"], Moves: st.Counters["flow_moves"] - before[West]["flow_moves"]}
		for _, r := range routes {
			if r.Dest == East {
				c.Path = r.Path
				if r.Bulk != nil {
					c.Bulk = r.Bulk.Path
				}
			}
		}
		if w.changeAt < 0 && c.ClassChanges > 0 {
			w.changeAt = c.AtS
		}
		if n := len(w.changes); n == 0 || !sameView(w.changes[n-1], c) {
			w.changes = append(w.changes, c)
		}
	}
}

// watched is what watch saw.
type watched struct {
	changeAt float64
	changes  []Change
}

// routeView is the part of a route of /v1/routes that watch reads; the
// bulk path is there when the agent computes one.
type routeView struct {
	Dest string   `json:"dest"`
	Path []string `json:"path"`
	Bulk *struct {
		Path []string `json:"path"`
	} `json:"bulk"`
}

// sameView reports whether two polls saw the same paths and counters.
func sameView(a, b Change) bool {
	return strings.Join(a.Path, ",") == strings.Join(b.Path, ",") && strings.Join(a.Bulk, ",") == strings.Join(b.Bulk, ",") &&
		a.ClassChanges == b.ClassChanges && a.Repaths == b.Repaths && a.Moves == b.Moves
}

// counters reads every agent's counters (nil without agents).
func (x *run) counters() map[string]map[string]uint64 {
	if x.agents == nil {
		return nil
	}
	out := map[string]map[string]uint64{}
	for name, c := range x.agents {
		var s api.Status
		if err := c.Get("/v1/status", &s); err != nil {
			x.logf("status of %s: %v", name, err)
			continue
		}
		out[name] = s.Counters
	}
	return out
}

// totals records the counters of probes, trains and flow classes at the
// end, and West's and East's routes.
func (x *run) totals(r *OverlayResult) {
	r.Totals = map[string]map[string]uint64{}
	for site, cs := range x.counters() {
		m := map[string]uint64{}
		for k, v := range cs {
			if probeCounter(k) || classCounter(k) {
				m[k] = v
			}
		}
		r.Totals[site] = m
	}
	r.Routes = map[string]json.RawMessage{}
	for _, site := range []string{West, East} {
		var raw json.RawMessage
		if err := x.agents[site].Get("/v1/routes", &raw); err == nil {
			r.Routes[site] = raw
		}
	}
}

// probeCounter reports whether an agent's counter counts measurement
// traffic: probes and their replies, and packet trains.
func probeCounter(k string) bool {
	return strings.Contains(k, "probe") || strings.Contains(k, "train")
}

// classCounter reports whether a counter is one of the flow classes'.
func classCounter(k string) bool {
	switch k {
	case "latency_frames", "latency_bytes", "bulk_frames", "bulk_bytes", "class_changes", "flow_moves", "flow_holds",
		"flow_repaths", "flows_untracked", "flow_reordered", "reordered", "seq_gaps", "flows_latency", "flows_bulk":
		return true
	}
	return false
}

// delta returns, per site, the counters that grew from before to after,
// by how much.
func delta(before, after map[string]map[string]uint64) map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for site, a := range after {
		m := map[string]uint64{}
		for k, v := range a {
			if b := before[site][k]; v > b {
				m[k] = v - b
			}
		}
		out[site] = m
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func millis(s []Sample) []float64 {
	out := make([]float64, len(s))
	for i, x := range s {
		out[i] = ms(x.RTT)
	}
	return out
}
