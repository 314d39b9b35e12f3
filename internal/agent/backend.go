package agent

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// The agent implements api.Backend: each answer is built under the control
// lock from the control node's views and the data path's counters.

var _ api.Backend = (*Agent)(nil)

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Status implements api.Backend.
func (a *Agent) Status() api.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	s := api.Status{
		Site: a.cfg.Site, ID: a.node.ID().String(), Version: a.version,
		Listen: a.conn.LocalAddr().String(), UptimeSeconds: time.Since(a.started).Seconds(),
		Counters: a.engine.Stats().Snapshot(), Forbidden: []string{},
	}
	for k, v := range a.controlCountersLocked() {
		s.Counters[k] = v
	}
	s.Encrypted = a.sec != nil
	probe, down := a.node.DetectionTimes()
	s.ProbeIntervalMS, s.DownAfterMS = ms(probe), ms(down)
	for _, m := range a.node.Members() {
		s.Members = append(s.Members, api.Member{Name: m.Name, ID: m.ID.String(), Address: m.Addr.String(),
			State: m.State, SinceSeconds: now.Sub(m.Since).Seconds()})
	}
	for _, n := range a.netCfg {
		s.Networks = append(s.Networks, api.Network{Name: n.Name, ID: n.ID, TAP: n.TAP, Bridge: n.Bridge, MTU: n.MTU,
			MaxRate: nonZero(n.MaxRate), MinRate: nonZero(n.MinRate)})
	}
	sort.Slice(s.Networks, func(i, j int) bool { return s.Networks[i].ID < s.Networks[j].ID })
	pins, forbidden := a.node.Overrides()
	for dst, path := range pins {
		s.Pins = append(s.Pins, api.Pin{Dest: dst, Via: path[:len(path)-1]})
	}
	sort.Slice(s.Pins, func(i, j int) bool { return s.Pins[i].Dest < s.Pins[j].Dest })
	s.Forbidden = append(s.Forbidden, forbidden...)
	return s
}

// controlCounters returns the control plane's counters by name.
func (a *Agent) controlCounters() map[string]uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.controlCountersLocked()
}

func (a *Agent) controlCountersLocked() map[string]uint64 {
	c := a.node.Counters()
	out := map[string]uint64{"route_switches": c.Switches, "route_computations": c.Refreshes}
	for t := range c.In {
		name := wire.Type(t).String()
		if c.In[t].Packets > 0 || c.Out[t].Packets > 0 {
			out["control_in_packets_"+name] = c.In[t].Packets
			out["control_in_bytes_"+name] = c.In[t].Bytes
			out["control_out_packets_"+name] = c.Out[t].Packets
			out["control_out_bytes_"+name] = c.Out[t].Bytes
		}
	}
	for kind, v := range c.DroppedByKind() {
		out["control_drop_"+kind] = v
	}
	if a.sec != nil {
		for k, v := range a.sec.counters() {
			out[k] = v
		}
	}
	return out
}

// Links implements api.Backend.
func (a *Agent) Links() []api.Link {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []api.Link
	for _, l := range a.node.Links(a.clock.Now()) {
		out = append(out, api.Link{From: l.From, To: l.To, Up: l.Up, ShiftedMs: ms(l.Delay), OneWayMs: ms(l.OneWayEstimate),
			RTTMs: ms(l.RTT), LossPct: 100 * l.Loss.Rate, LossLowPct: 100 * l.Loss.Low, LossHighPct: 100 * l.Loss.High,
			LossSamples: l.Loss.Samples, ReturnLossPct: 100 * l.ReturnLoss.Rate, ReturnLossSamples: l.ReturnLoss.Samples,
			JitterMs: ms(l.Jitter), AgeMs: ms(l.Age), MeanShiftedMs: ms(l.MeanDelay)})
	}
	return out
}

// Routes implements api.Backend.
func (a *Agent) Routes() []api.Route {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []api.Route{}
	for _, r := range a.node.Table().Routes() {
		out = append(out, a.routeView(r))
	}
	return out
}

func (a *Agent) routeView(r *routing.Route) api.Route {
	v := api.Route{Dest: a.node.NameOf(r.Dest), Path: a.node.Names(r.Path), Relayed: r.Relayed(),
		LatencyMs: ms(r.OneWayEstimate), Pinned: r.Pinned, Changes: a.changes[r.Dest]}
	if len(r.Backup) > 0 {
		v.Backup = a.node.Names(r.Backup)
	}
	if r.DirectUp {
		saving := r.DirectDelay - r.Delay
		v.DirectMs = ms(r.OneWayEstimate + saving)
		v.SavingMs = ms(saving)
	}
	return v
}

// TIVs implements api.Backend.
func (a *Agent) TIVs() []api.TIV {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []api.TIV{}
	for _, t := range a.node.TIVs() {
		out = append(out, api.TIV{From: a.node.NameOf(t.From), To: a.node.NameOf(t.To), Via: a.node.Names(t.Path[:len(t.Path)-1]),
			DirectMs: ms(t.DirectOneWay), BestMs: ms(t.PathOneWay), SavingMs: ms(t.Saving)})
	}
	return out
}

// Why implements api.Backend.
func (a *Agent) Why(site string) (api.Why, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, err := a.node.Why(a.clock.Now(), site)
	if err != nil {
		return api.Why{}, apiErr(err)
	}
	w := api.Why{Dest: site, Chosen: a.node.Names(e.Chosen), Reason: e.Reason}
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
		ac := api.Candidate{Path: a.node.Names(c.Path), LatencyMs: ms(c.OneWayEstimate), Note: note}
		for _, l := range c.Links {
			ac.LossCostMs += ms(l.LossCost)
			ac.Links = append(ac.Links, api.CandidateLink{From: a.node.NameOf(l.From), To: a.node.NameOf(l.To),
				LossPct: 100 * l.Loss.Rate, LossLowPct: 100 * l.Loss.Low, LossHighPct: 100 * l.Loss.High,
				LossSamples: l.Loss.Samples, LossCostMs: ms(l.LossCost)})
		}
		w.Candidates = append(w.Candidates, ac)
	}
	return w, nil
}

// FDB implements api.Backend.
func (a *Agent) FDB() []api.FDBEntry {
	now := a.clock.Mono()
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []api.FDBEntry{}
	for _, p := range a.engine.Ports() {
		for _, e := range p.FDB.Snapshot(now) {
			site := a.cfg.Site + " (local)"
			if e.Site != 0 {
				site = a.node.NameOf(e.Site)
			}
			out = append(out, api.FDBEntry{Network: p.Network, MAC: e.MAC.String(), Site: site, AgeSeconds: e.Age.Seconds()})
		}
	}
	return out
}

// Pin implements api.Backend.
func (a *Agent) Pin(p api.Pin) error {
	return a.override(func(now time.Time) error {
		return a.node.Pin(now, p.Dest, append(append([]string{}, p.Via...), p.Dest))
	})
}

// Unpin implements api.Backend.
func (a *Agent) Unpin(site string) error {
	return a.override(func(now time.Time) error { return a.node.Unpin(now, site) })
}

// Forbid implements api.Backend.
func (a *Agent) Forbid(site string) error {
	return a.override(func(now time.Time) error { return a.node.ForbidRelay(now, site) })
}

// Allow implements api.Backend.
func (a *Agent) Allow(site string) error {
	return a.override(func(now time.Time) error { return a.node.AllowRelay(now, site) })
}

// override applies an operator change and publishes the resulting table
// at once.
func (a *Agent) override(f func(now time.Time) error) error {
	a.mu.Lock()
	err := f(a.clock.Now())
	a.mu.Unlock()
	if err != nil {
		return apiErr(err)
	}
	a.flush()
	return nil
}

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
