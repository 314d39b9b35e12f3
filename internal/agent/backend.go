package agent

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/runstate"
)

// The agent implements api.Backend: each answer is built on the control
// loop (Agent.do) from the site core's views and the data path's counters;
// a request that comes after the loop stopped gets an empty answer.

var _ api.Backend = (*Agent)(nil)

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Status implements api.Backend.
func (a *Agent) Status() (s api.Status) {
	a.do(func() { s = a.status() })
	a.kvStatus(&s) // on the kv loop, not the control loop (kv_api.go)
	return s
}

func (a *Agent) status() api.Status {
	now := a.clock.Now()
	node := a.core.Control()
	s := api.Status{
		Site: a.cfg.Site, ID: node.ID().String(), Version: a.version,
		Listen: a.conn.LocalAddr().String(), UptimeSeconds: time.Since(a.started).Seconds(),
		Counters: a.engine.Stats().Snapshot(), Forbidden: []string{},
	}
	for k, v := range a.ownCounters() {
		s.Counters[k] = v
	}
	lat, bulk := a.engine.Stats().Flows()
	s.Counters["flows_latency"], s.Counters["flows_bulk"] = uint64(max(lat, 0)), uint64(max(bulk, 0))
	s.Encrypted = a.sec != nil
	probe, down := node.DetectionTimes()
	s.ProbeIntervalMS, s.DownAfterMS = ms(probe), ms(down)
	for _, m := range node.Members() {
		s.Members = append(s.Members, api.Member{Name: m.Name, ID: m.ID.String(), Address: m.Addr.String(),
			State: m.State, SinceSeconds: now.Sub(m.Since).Seconds()})
	}
	for _, n := range a.netCfg {
		s.Networks = append(s.Networks, api.Network{Name: n.Name, ID: n.ID, TAP: n.TAP, Bridge: n.Bridge, MTU: n.MTU,
			MaxRate: nonZero(n.MaxRate), MinRate: nonZero(n.MinRate)})
	}
	sort.Slice(s.Networks, func(i, j int) bool { return s.Networks[i].ID < s.Networks[j].ID })
	pins, forbidden := node.Overrides()
	for dst, path := range pins {
		s.Pins = append(s.Pins, api.Pin{Dest: dst, Via: path[:len(path)-1]})
	}
	sort.Slice(s.Pins, func(i, j int) bool { return s.Pins[i].Dest < s.Pins[j].Dest })
	s.Forbidden = append(s.Forbidden, forbidden...)
	s.FloodLoops = a.floodLoops()
	s.Waiting = a.pending()
	s.ProbeBytes, s.ProbeBudgetBytesPerSecond = node.Counters().ProbeBytes, node.ProbeBudget()
	return s
}

// controlCounters returns the control plane's counters by name.
func (a *Agent) controlCounters() (out map[string]uint64) {
	a.do(func() { out = a.ownCounters() })
	return out
}

// ownCounters returns the core's counters and the handshake path's (with
// the prefix "handshake_"). It runs on the control loop.
func (a *Agent) ownCounters() map[string]uint64 {
	out := a.core.Counters()
	if a.hs != nil {
		for k, v := range a.hs.counters() {
			out["handshake_"+k] = v
		}
	}
	return out
}

// Links implements api.Backend.
func (a *Agent) Links() (out []api.Link) {
	a.do(func() { out = a.links() })
	return out
}

func (a *Agent) links() []api.Link {
	var out []api.Link
	for _, l := range a.core.Control().Links(a.clock.Now()) {
		out = append(out, api.Link{From: l.From, To: l.To, Up: l.Up, ShiftedMs: ms(l.Delay), OneWayMs: ms(l.OneWayEstimate),
			RTTMs: ms(l.RTT), LossPct: 100 * l.Loss.Rate, LossLowPct: 100 * l.Loss.Low, LossHighPct: 100 * l.Loss.High,
			LossSamples: l.Loss.Samples, ReturnLossPct: 100 * l.ReturnLoss.Rate, ReturnLossSamples: l.ReturnLoss.Samples,
			JitterMs: ms(l.Jitter), AgeMs: ms(l.Age), MeanShiftedMs: ms(l.MeanDelay),
			RateMbps: l.Rate.Rate / 1e6, RateKind: rateKind(l.Rate), RateAgeS: l.Rate.Age.Seconds()})
	}
	return out
}

// Routes implements api.Backend.
func (a *Agent) Routes() []api.Route {
	out := []api.Route{}
	a.do(func() {
		for _, r := range a.core.Control().Table().Routes() {
			out = append(out, a.routeView(r))
		}
	})
	return out
}

func (a *Agent) routeView(r *routing.Route) api.Route {
	node := a.core.Control()
	v := api.Route{Dest: node.NameOf(r.Dest), Path: node.Names(r.Path), Relayed: r.Relayed(),
		LatencyMs: ms(r.OneWayEstimate), Pinned: r.Pinned, Changes: a.core.Changes(r.Dest)}
	if len(r.Backup) > 0 {
		v.Backup = node.Names(r.Backup)
	}
	if r.DirectUp {
		saving := r.DirectDelay - r.Delay
		v.DirectMs = ms(r.OneWayEstimate + saving)
		v.SavingMs = ms(saving)
	}
	a.bulkView(r, &v)
	return v
}

// TIVs implements api.Backend.
func (a *Agent) TIVs() []api.TIV {
	out := []api.TIV{}
	a.do(func() {
		node := a.core.Control()
		for _, t := range node.TIVs() {
			out = append(out, api.TIV{From: node.NameOf(t.From), To: node.NameOf(t.To), Via: node.Names(t.Path[:len(t.Path)-1]),
				DirectMs: ms(t.DirectOneWay), BestMs: ms(t.PathOneWay), SavingMs: ms(t.Saving)})
		}
	})
	return out
}

// Why implements api.Backend.
func (a *Agent) Why(site string) (w api.Why, err error) {
	if !a.do(func() { w, err = a.why(site) }) {
		err = errStopped
	}
	return w, err
}

func (a *Agent) why(site string) (api.Why, error) {
	node := a.core.Control()
	e, err := node.Why(a.clock.Now(), site)
	if err != nil {
		return api.Why{}, apiErr(err)
	}
	w := api.Why{Dest: site, Chosen: node.Names(e.Chosen), Reason: e.Reason}
	for _, c := range e.Candidates {
		note := fmt.Sprintf("gain over direct %+.2f ms", ms(c.GainOverDirect))
		if c.Loss > 0 {
			note += fmt.Sprintf(", loss %.1f %%", 100*c.Loss)
		}
		if c.Chosen {
			note += ", in use"
		}
		if c.Best {
			note += ", best"
		}
		ac := api.Candidate{Path: node.Names(c.Path), LatencyMs: ms(c.OneWayEstimate), Note: note}
		for _, l := range c.Links {
			ac.LossCostMs += ms(l.LossCost)
			ac.Links = append(ac.Links, api.CandidateLink{From: node.NameOf(l.From), To: node.NameOf(l.To),
				LossPct: 100 * l.Loss.Rate, LossLowPct: 100 * l.Loss.Low, LossHighPct: 100 * l.Loss.High,
				LossSamples: l.Loss.Samples, LossCostMs: ms(l.LossCost)})
		}
		w.Candidates = append(w.Candidates, ac)
	}
	w.Bulk = a.whyBulk(e.Bulk)
	return w, nil
}

// FDB implements api.Backend.
func (a *Agent) FDB() []api.FDBEntry {
	now := a.clock.Mono()
	out := []api.FDBEntry{}
	a.do(func() {
		for _, p := range a.engine.Ports() {
			for _, e := range p.FDB.Snapshot(now) {
				site := a.cfg.Site + " (local)"
				if e.Site != 0 {
					site = a.core.Control().NameOf(e.Site)
				}
				out = append(out, api.FDBEntry{Network: p.Network, MAC: e.MAC.String(), Site: site, AgeSeconds: e.Age.Seconds()})
			}
		}
	})
	return out
}

// Pin implements api.Backend.
func (a *Agent) Pin(p api.Pin) error {
	path := append(append([]string{}, p.Via...), p.Dest)
	return a.override(func(now time.Time) error {
		return a.core.Pin(now, p.Dest, path)
	}, func(d *runstate.Doc) { d.Pin(p.Dest, path) })
}

// Unpin implements api.Backend. A pin of the state file whose site has
// not joined yet is simply forgotten.
func (a *Agent) Unpin(site string) error {
	return a.override(func(now time.Time) error {
		if _, ok := a.pendPins[site]; ok {
			delete(a.pendPins, site)
			return nil
		}
		return a.core.Unpin(now, site)
	}, func(d *runstate.Doc) { d.Unpin(site) })
}

// Forbid implements api.Backend.
func (a *Agent) Forbid(site string) error {
	return a.override(func(now time.Time) error { return a.core.ForbidRelay(now, site) },
		func(d *runstate.Doc) { d.Forbid(site) })
}

// Allow implements api.Backend.
func (a *Agent) Allow(site string) error {
	return a.override(func(now time.Time) error {
		if i := slices.Index(a.pendForbid, site); i >= 0 {
			a.pendForbid = slices.Delete(a.pendForbid, i, i+1)
			return nil
		}
		return a.core.AllowRelay(now, site)
	}, func(d *runstate.Doc) { d.Allow(site) })
}

// override applies an operator change on the control loop, records it in
// the run-time state (durably, before the answer) and publishes the
// resulting table at once.
func (a *Agent) override(f func(now time.Time) error, rec func(d *runstate.Doc)) error {
	var err error
	if !a.do(func() {
		if err = f(a.clock.Now()); err == nil {
			a.flush()
			err = a.record(rec)
		}
	}) {
		return errStopped
	}
	if err != nil {
		return apiErr(err)
	}
	return nil
}

// errStopped answers requests that come after the control loop stopped.
var errStopped = errors.New("agent: stopping")

// apiErr maps control errors to the API's error kinds.
func apiErr(err error) error {
	switch {
	case errors.Is(err, control.ErrUnknownSite), errors.Is(err, control.ErrNotMemberArg):
		return fmt.Errorf("%w: %v", api.ErrNotFound, err)
	default:
		return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
}

func nonZero(r config.Rate) string {
	if r == 0 {
		return ""
	}
	return r.String()
}
