package lanman

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/model"
	"github.com/detour-overlay/detour/internal/lab/experiment/results"
	"github.com/detour-overlay/detour/internal/lab/experiment/store"
	"github.com/detour-overlay/detour/internal/lab/testbed"
)

// The sites of the experiment: the client runs at Client; the servers at
// Servers, in the order the client visits them; Leader has the highest
// myid. The cross traffic fills LoadA<->LoadB.
const (
	Client = "LAN"
	Leader = "CLU"
	LoadA  = "CLU"
	LoadB  = "LAN"
	Relay  = "NEU"
	// Flow is the scenario's cross-traffic flow filling LoadA<->LoadB.
	Flow = "clu-lan"
)

// Servers are visited in this order in every phase.
var Servers = []string{"CLU", "BOR", "LAN"}

// myids: the intended leader has the highest.
var myid = map[string]int{"BOR": 1, "LAN": 2, "CLU": 3}

// Phases of the static runs.
var Phases = []string{"a", "b", "c"}

// Config is one run of the experiment.
type Config struct {
	// Bin is the detour-lab binary that drives the testbed.
	Bin string
	// Detour is the detour binary the testbed's agents run; empty means
	// the testbed's default (testbed.FindDetour).
	Detour string
	// Scenario is the testbed scenario (lanman2017 or a file with the
	// same sites).
	Scenario string
	Overlays []string
	// Ops is the number of timed operations of each kind per server and
	// phase; Warmup untimed ones precede them.
	Ops, Warmup int
	// Settle is how long the cross traffic runs before phase (b) is
	// measured, so that the queues have built up.
	Settle time.Duration
	// ContinuousIdle and ContinuousLoad are the two parts of the
	// continuous run; ContinuousOverlays lists the overlays it runs on.
	ContinuousIdle, ContinuousLoad time.Duration
	ContinuousOverlays             []string
	// TestbedState and TestbedPrefix give the experiment's testbed its own
	// state directory and namespace prefix.
	TestbedState, TestbedPrefix string
	// Store is the replicated store: ZooKeeper (default) or Etcd.
	Store string
	// LogDir, when set, receives per overlay the testbed's and the
	// servers' logs.
	LogDir string
	// WorkDir holds the ZooKeeper servers' data (a tmpfs is best: the
	// servers fsync their log on every write).
	WorkDir string
	// Log receives progress lines.
	Log io.Writer
}

// Result is everything the experiment measured.
type Result struct {
	Records []results.Record
	// Predicted holds the model's median per summary cell, from the
	// delays detour measured (detour) or the ground truth (the others);
	// PredictedTruth always from the ground truth.
	Predicted, PredictedTruth map[results.Key]float64
	// Delays holds, per overlay and phase, the median one-way delay of
	// every pair: PathDelays from detour's measurements for detour, the
	// ground truth otherwise; TruthDelays always the ground truth.
	Delays, TruthDelays map[[2]string]model.Matrix
	// Continuous runs, by overlay.
	Continuous map[string]*Continuous
	// StoreVersion is the version the running store reported.
	StoreVersion string
	// Reroute is, per overlay, how long detour took after being unpinned
	// in phase (c) to use a relay between LoadA and LoadB.
	Reroute map[string]time.Duration

	// dir is the results directory Write stored everything in.
	dir string
}

// Run performs the experiment on every overlay in turn. It always tears
// down what it started, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	res := &Result{
		Predicted:      map[results.Key]float64{},
		PredictedTruth: map[results.Key]float64{},
		Delays:         map[[2]string]model.Matrix{},
		TruthDelays:    map[[2]string]model.Matrix{},
		Continuous:     map[string]*Continuous{},
		Reroute:        map[string]time.Duration{},
	}
	if cfg.Store == "" {
		cfg.Store = ZooKeeper
	}
	for _, ov := range cfg.Overlays {
		x := &run{cfg: cfg, ov: ov, res: res}
		if err := x.all(ctx); err != nil {
			return res, fmt.Errorf("overlay %s: %w", ov, err)
		}
	}
	return res, nil
}

// run is the experiment on one overlay.
type run struct {
	cfg    Config
	ov     string
	res    *Result
	tb     *Testbed
	st     *testbed.Status
	store  replicated
	agents map[string]*Agent
	// loaded is true while the cross traffic runs.
	loaded bool
}

func (x *run) logf(format string, args ...any) {
	if x.cfg.Log != nil {
		fmt.Fprintf(x.cfg.Log, "[%s %s] %s\n", time.Now().Format("15:04:05"), x.ov, fmt.Sprintf(format, args...))
	}
}

func (x *run) all(ctx context.Context) (err error) {
	x.tb = &Testbed{Bin: x.cfg.Bin, Detour: x.cfg.Detour, StateDir: x.cfg.TestbedState, Prefix: x.cfg.TestbedPrefix}
	x.logf("testbed up %s --overlay %s", x.cfg.Scenario, x.ov)
	start := time.Now()
	if err := x.tb.Up(ctx, x.cfg.Scenario, x.ov); err != nil {
		_ = x.tb.Down()
		return err
	}
	defer func() {
		if derr := x.tb.Down(); derr != nil && err == nil {
			err = derr
		}
		x.logf("testbed down")
		x.collectLogs()
	}()
	x.logf("testbed up in %.1f s", time.Since(start).Seconds())
	x.st = x.tb.Status()
	if err := x.startStore(ctx); err != nil {
		return err
	}
	defer x.stopStore()
	defer x.stopLoad()
	if x.ov == "detour" {
		if err := x.connectAgents(ctx); err != nil {
			return err
		}
	}
	if err := x.phases(ctx); err != nil {
		return err
	}
	if contains(x.cfg.ContinuousOverlays, x.ov) {
		return x.continuous(ctx)
	}
	return nil
}

// site returns the named site, one newStore checked exists and has a
// host.
func (x *run) site(name string) testbed.SiteState {
	s, _ := site(x.st, name)
	return s
}

// startStore deploys one server per site in the site's first host and
// waits until CLU leads.
func (x *run) startStore(ctx context.Context) error {
	st, err := x.newStore(x.cfg.Store)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(x.cfg.WorkDir, x.cfg.Store+"-"+x.ov)); err != nil {
		return err
	}
	if err := st.start(ctx); err != nil {
		st.stop()
		return err
	}
	x.store = st
	return nil
}

func (x *run) stopStore() {
	if x.store != nil {
		x.store.stop()
		x.store = nil
	}
}

// stopLoad stops the cross traffic if it runs; it works also after ctx
// was cancelled.
func (x *run) stopLoad() {
	if x.loaded {
		if err := x.tb.Traffic(context.Background(), "stop", Flow); err != nil {
			x.logf("stopping cross traffic: %v", err)
		}
		x.loaded = false
	}
}

// connectAgents reaches the agents of the server sites and waits until
// each has a route to every other server site.
func (x *run) connectAgents(ctx context.Context) error {
	x.agents = map[string]*Agent{}
	for _, name := range Servers {
		x.agents[name] = NewAgent(name, x.site(name).Gateway)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := x.missingRoutes()
		if missing == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("detour agents: %w", missing)
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

func (x *run) missingRoutes() error {
	for _, a := range Servers {
		routes, err := x.agents[a].Routes()
		if err != nil {
			return err
		}
		for _, b := range Servers {
			if a != b && Path(routes, b) == nil {
				return fmt.Errorf("%s has no route to %s", a, b)
			}
		}
	}
	return nil
}

// phases runs the static phases (a), (b) and (c).
func (x *run) phases(ctx context.Context) error {
	if err := x.measure(ctx, "a"); err != nil {
		return err
	}
	if x.agents != nil {
		// Phase (b) is the paper's loaded WAN without indirect routing:
		// the operator pins the direct paths, as the paper's SDN
		// controller kept them.
		if err := x.pinDirect(true); err != nil {
			return err
		}
	}
	if err := x.startLoad(ctx); err != nil {
		return err
	}
	if err := x.measure(ctx, "b"); err != nil {
		return err
	}
	if x.agents != nil {
		if err := x.pinDirect(false); err != nil {
			return err
		}
		d, err := x.waitRelayed(ctx, 15*time.Second)
		if err != nil {
			return err
		}
		x.res.Reroute[x.ov] = d
		x.logf("unpinned: detour relayed %s<->%s after %v", LoadA, LoadB, d.Round(time.Millisecond))
	}
	if err := x.measure(ctx, "c"); err != nil {
		return err
	}
	x.stopLoad()
	return nil
}

func (x *run) startLoad(ctx context.Context) error {
	if err := x.tb.Traffic(ctx, "start", Flow); err != nil {
		return err
	}
	x.loaded = true
	x.logf("cross traffic %s<->%s started; settling %v", LoadA, LoadB, x.cfg.Settle)
	return sleep(ctx, x.cfg.Settle)
}

func (x *run) pinDirect(pin bool) error {
	for _, p := range [][2]string{{LoadA, LoadB}, {LoadB, LoadA}} {
		var err error
		if pin {
			err = x.agents[p[0]].PinDirect(p[1])
		} else {
			err = x.agents[p[0]].Unpin(p[1])
		}
		if err != nil {
			return fmt.Errorf("pin %s->%s: %w", p[0], p[1], err)
		}
	}
	return nil
}

// waitRelayed waits until both LoadA->LoadB and LoadB->LoadA go through a
// relay and returns how long that took.
func (x *run) waitRelayed(ctx context.Context, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < limit {
		if x.relayed(LoadA, LoadB) && x.relayed(LoadB, LoadA) {
			return time.Since(start), nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("detour did not relay %s<->%s within %v", LoadA, LoadB, limit)
}

func (x *run) relayed(from, to string) bool {
	routes, err := x.agents[from].Routes()
	return err == nil && len(fullPath(from, to, Path(routes, to))) > 2
}

// measure runs one static phase: for every server in turn, warm-up and
// then the timed reads and writes, while the path delays are sampled.
func (x *run) measure(ctx context.Context, phase string) error {
	sctx, stop := context.WithCancel(ctx)
	smp := NewSampler(x.tb, x.agents, Servers)
	done := make(chan struct{})
	go func() { smp.Run(sctx, 250*time.Millisecond); close(done) }()
	first := len(x.res.Records)
	err := x.measureServers(ctx, phase)
	stop()
	<-done
	if err != nil {
		return err
	}
	if x.loaded {
		if on, err := x.tb.TrafficRunning(ctx, Flow); err != nil || !on {
			return fmt.Errorf("the cross traffic stopped during phase %s (%v)", phase, err)
		}
	}
	if n, serr := smp.Errors(); n > 0 {
		x.logf("phase %s: %d delay samples failed (last: %v)", phase, n, serr)
	}
	x.predict(phase, smp, x.res.Records[first:])
	return nil
}

func (x *run) measureServers(ctx context.Context, phase string) error {
	for _, name := range Servers {
		c, err := x.store.connect(ctx, name, "bench-"+name)
		if err != nil {
			return err
		}
		samples := store.Run(ctx, c, []store.Op{store.Read, store.Write}, x.cfg.Ops, x.cfg.Warmup)
		c.Close()
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, s := range samples {
			x.res.Records = append(x.res.Records, x.record(phase, s))
		}
		x.logf("phase %s via %s: %s", phase, name, brief(samples))
	}
	return nil
}

func (x *run) record(phase string, s store.Sample) results.Record {
	return results.Record{Overlay: x.ov, Phase: phase, Server: s.Server, Op: string(s.Op),
		Seq: s.Seq, Start: s.Start, Latency: s.Latency, Err: s.Err}
}

// predict stores the model's median for every operation and server of
// the phase, from the delays sampled while that operation was being
// measured (widened to at least a second when the operations were
// faster), and the phase's median delays for the report.
func (x *run) predict(phase string, smp *Sampler, recs []results.Record) {
	_, x.res.Delays[[2]string{x.ov, phase}] = smp.Net(time.Time{}, time.Time{})
	x.res.TruthDelays[[2]string{x.ov, phase}] = smp.TruthMedians(time.Time{}, time.Time{})
	q := model.Quorum{Leader: Leader}
	for _, s := range Servers {
		if s != Leader {
			q.Followers = append(q.Followers, s)
		}
	}
	for k, w := range windows(recs) {
		key := results.Key{Overlay: x.ov, Phase: phase, Op: k.Op, Server: k.Server}
		d, _ := smp.Net(w[0], w[1])
		if v, err := predictOp(d, q, k); err == nil {
			x.res.Predicted[key] = v
		}
		if v, err := predictOp(smp.TruthNet(w[0], w[1]), q, k); err == nil {
			x.res.PredictedTruth[key] = v
		}
	}
}

func predictOp(n model.Net, q model.Quorum, k opKey) (float64, error) {
	if k.Op == string(store.Read) {
		return model.Read(n, Client, k.Server)
	}
	return model.Write(n, q, Client, k.Server)
}

// opKey is an operation kind through one server.
type opKey struct{ Op, Server string }

// windows returns, per operation kind and server, the time span of its
// records, at least one second long.
func windows(recs []results.Record) map[opKey][2]time.Time {
	w := map[opKey][2]time.Time{}
	for _, r := range recs {
		k := opKey{r.Op, r.Server}
		end := r.Start.Add(r.Latency)
		cur, ok := w[k]
		if !ok {
			cur = [2]time.Time{r.Start, end}
		}
		if r.Start.Before(cur[0]) {
			cur[0] = r.Start
		}
		if end.After(cur[1]) {
			cur[1] = end
		}
		w[k] = cur
	}
	for k, cur := range w {
		if short := time.Second - cur[1].Sub(cur[0]); short > 0 {
			w[k] = [2]time.Time{cur[0].Add(-short / 2), cur[1].Add(short / 2)}
		}
	}
	return w
}

// brief is a one-line progress summary of a server's samples.
func brief(samples []store.Sample) string {
	var r, w []float64
	fails := 0
	for _, s := range samples {
		if s.Err != "" {
			fails++
			continue
		}
		ms := float64(s.Latency) / 1e6
		if s.Op == store.Read {
			r = append(r, ms)
		} else {
			w = append(w, ms)
		}
	}
	return fmt.Sprintf("read median %.1f ms, write median %.1f ms, %d failed", medianOf(r), medianOf(w), fails)
}

func medianOf(v []float64) float64 {
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	return results.Quantile(c, 0.5)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
