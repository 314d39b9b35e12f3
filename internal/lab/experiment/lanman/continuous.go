package lanman

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/results"
	"github.com/detour-overlay/detour/internal/lab/experiment/store"
)

// Continuous is the run of the paper's Figure 7: alternating reads and
// writes from the client to the leader while the cross traffic starts and
// detour reacts on its own.
type Continuous struct {
	Overlay                string
	Start, LoadStart, End  time.Time
	Samples                []store.Sample
	Routes                 []RouteEvent
	Truth                  []TruthPoint
	routeMu, truthMu       sync.Mutex
	lastPath               map[[2]string]string
	routeErrs, truthErrors int
}

// RouteEvent is a path change seen by polling an agent (the first poll of
// each pair is recorded too).
type RouteEvent struct {
	Time     time.Time
	From, To string
	Path     []string
}

// Relayed reports whether the path goes through another site.
func (e RouteEvent) Relayed() bool { return len(fullPath(e.From, e.To, e.Path)) > 2 }

// TruthPoint is the emulator's delay of one directed link at one time:
// the delay a packet entering it then gets, and the part of it that is
// queueing.
type TruthPoint struct {
	Time              time.Time
	From, To          string
	ExpectedMS, Queue float64
}

// onsetQueueMs is the queueing delay on a loaded link that marks the onset
// of the load.
const onsetQueueMs = 5

// continuous runs the continuous experiment on the current overlay.
func (x *run) continuous(ctx context.Context) error {
	if err := x.waitQuiet(ctx); err != nil {
		return err
	}
	c, err := x.store.connect(ctx, Leader, "continuous")
	if err != nil {
		return err
	}
	defer c.Close()
	// Warm-up, not recorded.
	store.Alternate(ctx, c, 2*time.Second, func(store.Sample) {})

	cr := &Continuous{Overlay: x.ov, lastPath: map[[2]string]string{}}
	pctx, stopPolls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); x.pollRoutes(pctx, cr) }()
	go func() { defer wg.Done(); x.pollTruth(pctx, cr) }()

	cr.Start = time.Now()
	total := x.cfg.ContinuousIdle + x.cfg.ContinuousLoad
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		store.Alternate(ctx, c, total, func(s store.Sample) { cr.Samples = append(cr.Samples, s) })
	}()
	x.logf("continuous run: %v idle, then %v with cross traffic", x.cfg.ContinuousIdle, x.cfg.ContinuousLoad)
	err = sleep(ctx, x.cfg.ContinuousIdle)
	if err == nil {
		cr.LoadStart = time.Now()
		if err = x.tb.Traffic(ctx, "start", Flow); err == nil {
			x.loaded = true
		}
	}
	<-clientDone
	cr.End = time.Now()
	x.stopLoad()
	stopPolls()
	wg.Wait()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	x.res.Continuous[x.ov] = cr
	x.res.Records = append(x.res.Records, cr.records()...)
	x.logf("continuous run: %d operations, %d route events", len(cr.Samples), len(cr.Routes))
	return nil
}

// waitQuiet waits for the queues of the previous phase to drain and, with
// detour, for the paths between the loaded sites to be direct again.
func (x *run) waitQuiet(ctx context.Context) error {
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	if x.agents == nil {
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if !x.relayed(LoadA, LoadB) && !x.relayed(LoadB, LoadA) {
			return nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	x.logf("warning: detour still relays %s<->%s 30 s after the load stopped", LoadA, LoadB)
	return nil
}

// pollRoutes records every change of the paths LoadB->LoadA and
// LoadA->LoadB, polling both agents every 100 ms.
func (x *run) pollRoutes(ctx context.Context, cr *Continuous) {
	if x.agents == nil {
		return
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		for _, p := range [][2]string{{LoadB, LoadA}, {LoadA, LoadB}} {
			routes, err := x.agents[p[0]].Routes()
			now := time.Now()
			if err != nil {
				cr.routeErrs++
				continue
			}
			path := Path(routes, p[1])
			key := strings.Join(path, ">")
			cr.routeMu.Lock()
			if prev, seen := cr.lastPath[p]; !seen || prev != key {
				cr.lastPath[p] = key
				cr.Routes = append(cr.Routes, RouteEvent{Time: now, From: p[0], To: p[1], Path: path})
			}
			cr.routeMu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// pollTruth records the emulator's delay of the loaded links every 200 ms.
func (x *run) pollTruth(ctx context.Context, cr *Continuous) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		links, err := x.tb.Truth(ctx)
		now := time.Now()
		if err != nil {
			cr.truthErrors++
		}
		for _, l := range links {
			if (l.From == LoadA && l.To == LoadB) || (l.From == LoadB && l.To == LoadA) ||
				(l.From == LoadA && l.To == Relay) || (l.From == Relay && l.To == LoadB) {
				cr.truthMu.Lock()
				cr.Truth = append(cr.Truth, TruthPoint{Time: now, From: l.From, To: l.To, ExpectedMS: l.ExpectedMS, Queue: l.QueueMS})
				cr.truthMu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// Reaction summarises how the overlay reacted to the load in a
// continuous run.
type Reaction struct {
	// Rerouted is false when no path between the loaded sites became
	// relayed after the load started.
	Rerouted bool
	// After is, per direction "A->B", the time from the start of the load
	// (the command that starts it) to the first relayed path.
	After map[string]time.Duration
	// Onset is when the emulator first saw a queue of onsetQueueMs on a
	// loaded link (zero if never); AfterOnset is the time from it to the
	// last of the two directions' changes.
	Onset      time.Time
	AfterOnset time.Duration
	// MaxMs is the largest single-operation latency from 2 s before the
	// (last) change to 2 s after it, or over the whole loaded period when
	// there was no change; ExcessMs is the largest amount by which an
	// operation exceeded the idle median of its kind in that window.
	MaxMs, ExcessMs float64
	// BeforeMaxMs is the largest latency of the operations started
	// between the start of the load and the change: the damage done
	// before detour reacted. SwitchMaxMs and SwitchExcessMs are those of
	// the operations in flight at the change or started within 2 s after
	// it: the cost of the switch itself (the paper's 300 ms spike).
	BeforeMaxMs, SwitchMaxMs, SwitchExcessMs float64
	// Changes counts the path changes between LoadA and LoadB (both
	// directions) while the load ran.
	Changes int
	// IdleMedian and SettledMedian are per operation kind: before the
	// load, and from 3 s after the change (or the load start) to the end.
	IdleMedian, SettledMedian map[string]float64
}

// React computes the Reaction of a continuous run.
func (cr *Continuous) React() Reaction {
	r := Reaction{After: map[string]time.Duration{}, IdleMedian: map[string]float64{}, SettledMedian: map[string]float64{}}
	change := cr.LoadStart
	for _, e := range cr.Routes {
		dir := e.From + "->" + e.To
		if _, done := r.After[dir]; done || e.Time.Before(cr.LoadStart) || !e.Relayed() {
			continue
		}
		r.After[dir] = e.Time.Sub(cr.LoadStart)
		r.Rerouted = true
		if e.Time.After(change) {
			change = e.Time
		}
	}
	for _, p := range cr.Truth {
		if !p.Time.Before(cr.LoadStart) && p.Queue >= onsetQueueMs && p.From != Relay && p.To != Relay {
			r.Onset = p.Time
			break
		}
	}
	if r.Rerouted && !r.Onset.IsZero() {
		r.AfterOnset = change.Sub(r.Onset)
	}
	lo, hi := cr.LoadStart, cr.End
	if r.Rerouted {
		lo, hi = change.Add(-2*time.Second), change.Add(2*time.Second)
	}
	idle := map[string][]float64{}
	settled := map[string][]float64{}
	for _, s := range cr.Samples {
		ms := float64(s.Latency) / 1e6
		switch {
		case s.Start.Before(cr.LoadStart):
			idle[string(s.Op)] = append(idle[string(s.Op)], ms)
		case s.Start.After(change.Add(3 * time.Second)):
			settled[string(s.Op)] = append(settled[string(s.Op)], ms)
		}
	}
	for op, v := range idle {
		r.IdleMedian[op] = medianOf(v)
	}
	for op, v := range settled {
		r.SettledMedian[op] = medianOf(v)
	}
	for _, s := range cr.Samples {
		ms := float64(s.Latency) / 1e6
		excess := ms - r.IdleMedian[string(s.Op)]
		if !s.Start.Before(lo) && !s.Start.After(hi) {
			r.MaxMs = max(r.MaxMs, ms)
			r.ExcessMs = max(r.ExcessMs, excess)
		}
		if !r.Rerouted {
			continue
		}
		if !s.Start.Before(cr.LoadStart) && s.Start.Before(change) {
			r.BeforeMaxMs = max(r.BeforeMaxMs, ms)
		}
		if s.Start.Add(s.Latency).After(change) && s.Start.Before(change.Add(2*time.Second)) {
			r.SwitchMaxMs = max(r.SwitchMaxMs, ms)
			r.SwitchExcessMs = max(r.SwitchExcessMs, excess)
		}
	}
	for _, e := range cr.Routes {
		if e.Time.After(cr.LoadStart) {
			r.Changes++
		}
	}
	return r
}

// records converts the run's samples.
func (cr *Continuous) records() []results.Record {
	var out []results.Record
	for _, s := range cr.Samples {
		out = append(out, results.Record{Overlay: cr.Overlay, Phase: "continuous", Server: s.Server,
			Op: string(s.Op), Seq: s.Seq, Start: s.Start, Latency: s.Latency, Err: s.Err})
	}
	return out
}
