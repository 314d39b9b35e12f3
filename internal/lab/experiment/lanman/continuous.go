package lanman

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/results"
	"github.com/detour-overlay/detour/internal/lab/experiment/store"
	"github.com/detour-overlay/detour/internal/lab/wanem"
)

// Continuous is the run of the paper's Figure 7: alternating reads and
// writes from the client to the leader while the cross traffic starts and
// detour reacts on its own.
type Continuous struct {
	Overlay               string
	Start, LoadStart, End time.Time
	Samples               []store.Sample
	Routes                []RouteEvent
	Truth                 []TruthPoint
	// Changes are the path changes between the loaded sites that the
	// agents recorded, at the times they made them (the polled Routes
	// see them up to a poll interval late).
	Changes                []RouteEvent
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
	// Onset is when the latest load on the link began to queue, to the
	// packet (wanem's Link.Onset; zero if there was none).
	Onset time.Time
}

// onsetQueueMs is the queueing delay on a loaded link that marks the onset
// of the load when polled: the emulator's.
const onsetQueueMs = int(wanem.QueueOnset / time.Millisecond)

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
	cr.Changes = x.recordedChanges(cr.Start)
	x.res.Continuous[x.ov] = cr
	x.res.Records = append(x.res.Records, cr.records()...)
	x.logf("continuous run: %d operations, %d route events polled, %d recorded by the agents", len(cr.Samples), len(cr.Routes), len(cr.Changes))
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

// recordedChanges returns the path changes between the loaded sites that
// their agents recorded since start (nil without agents, or for an agent
// that could not be asked).
func (x *run) recordedChanges(start time.Time) []RouteEvent {
	var out []RouteEvent
	for _, p := range [][2]string{{LoadB, LoadA}, {LoadA, LoadB}} {
		a := x.agents[p[0]]
		if a == nil {
			continue
		}
		events, err := a.Changes()
		if err != nil {
			x.logf("route changes of %s: %v", p[0], err)
			continue
		}
		for _, e := range events {
			if e.Dest == p[1] && !e.At.Before(start) {
				out = append(out, RouteEvent{Time: e.At, From: p[0], To: p[1], Path: e.To})
			}
		}
	}
	return out
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
				p := TruthPoint{Time: now, From: l.From, To: l.To, ExpectedMS: l.ExpectedMS, Queue: l.QueueMS}
				if l.QueueOnset != nil {
					p.Onset = *l.QueueOnset
				}
				cr.Truth = append(cr.Truth, p)
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
	// Onset is when the load began to queue on a loaded link (zero if
	// never); AfterOnset is the time from it to the last of the two
	// directions' changes. OnsetDir and AfterOnsetDir are the same per
	// direction: from the onset on that direction's link to that
	// direction's change, the overlay's own reaction time. Onsets are
	// the emulator's, to the packet (TruthPoint.Onset: the first packet
	// of the run that waited 5 ms or more and reached 20 ms), else the
	// first poll that saw onsetQueueMs of queue; changes are the agents'
	// own times when they were fetched (Continuous.Changes), else the
	// first poll that saw the new path.
	Onset         time.Time
	AfterOnset    time.Duration
	OnsetDir      map[string]time.Time
	AfterOnsetDir map[string]time.Duration
	// Exact says that every onset and change was known to the packet and
	// the agent's clock, not by polling.
	Exact bool
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
	r := Reaction{After: map[string]time.Duration{}, IdleMedian: map[string]float64{}, SettledMedian: map[string]float64{},
		AfterOnsetDir: map[string]time.Duration{}}
	change := cr.LoadStart
	changes, exactChanges := cr.firstRelayed()
	for dir, at := range changes {
		r.After[dir] = at.Sub(cr.LoadStart)
		r.Rerouted = true
		if at.After(change) {
			change = at
		}
	}
	var exactOnsets bool
	r.OnsetDir, exactOnsets = cr.onsets()
	for dir, at := range r.OnsetDir {
		if r.Onset.IsZero() || at.Before(r.Onset) {
			r.Onset = at
		}
		if c, ok := changes[dir]; ok {
			r.AfterOnsetDir[dir] = c.Sub(at)
		}
	}
	if r.Rerouted && !r.Onset.IsZero() {
		r.AfterOnset = change.Sub(r.Onset)
	}
	r.Exact = r.Rerouted && exactChanges && exactOnsets
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

// firstRelayed returns, per direction "A->B" between the loaded sites,
// when its path first became relayed after the load started: from the
// agents' own records when there are any, else from the polls; exact
// says the former.
func (cr *Continuous) firstRelayed() (at map[string]time.Time, exact bool) {
	first := func(events []RouteEvent) map[string]time.Time {
		out := map[string]time.Time{}
		for _, e := range events {
			dir := e.From + "->" + e.To
			if prev, done := out[dir]; e.Time.Before(cr.LoadStart) || !e.Relayed() || (done && !e.Time.Before(prev)) {
				continue
			}
			out[dir] = e.Time
		}
		return out
	}
	polled, recorded := first(cr.Routes), first(cr.Changes)
	exact = len(polled) > 0
	for dir := range polled {
		if t, ok := recorded[dir]; ok {
			polled[dir] = t
		} else {
			exact = false
		}
	}
	return polled, exact
}

// onsets returns, per loaded direction "A->B", when the load began to
// queue on its link: to the packet when the emulator said, else the
// first poll that saw onsetQueueMs of queue; exact says the former for
// every direction.
func (cr *Continuous) onsets() (at map[string]time.Time, exact bool) {
	at = map[string]time.Time{}
	exact = true
	polled := map[string]bool{}
	for _, p := range cr.Truth {
		dir := p.From + "->" + p.To
		if p.Time.Before(cr.LoadStart) || p.From == Relay || p.To == Relay {
			continue
		}
		prev, seen := at[dir]
		switch {
		case !p.Onset.IsZero() && !p.Onset.Before(cr.LoadStart) && (!seen || polled[dir] || p.Onset.Before(prev)):
			at[dir], polled[dir] = p.Onset, false
		case !seen && p.Queue >= float64(onsetQueueMs):
			at[dir], polled[dir] = p.Time, true
		}
	}
	for _, p := range polled {
		exact = exact && !p
	}
	return at, exact && len(at) > 0
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
