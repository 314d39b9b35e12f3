package sim

import (
	"time"

	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/lab/topo"
)

// ScaleOptions describes one scaling run (detour-lab sim).
type ScaleOptions struct {
	Topology *topo.Topology
	Seed     uint64
	// Scheme is "old" (every link probed alike, whole link-state rows
	// every second) or "new" (see control.Config.Economy).
	Scheme string
	// Warm is the time from the start of all sites to the measured
	// window; Steady the window's length.
	Warm, Steady time.Duration
	// Jitter on every link; clock offsets are drawn from ±Offset and
	// skews from ±Skew.
	Jitter time.Duration
	Offset time.Duration
	Skew   float64
	// Loss is the random loss on every link.
	Loss float64
	// Events, when set, slows some links and then kills the busiest
	// relay after the window, and measures the reroutes.
	Events bool
	// Progress, when not nil, is called with the simulated time every
	// simulated 10 s.
	Progress func(elapsed time.Duration)
	// Done, when not nil, is called at the end of the measured window,
	// while the whole overlay is still in memory (for a heap profile).
	Done func()
}

// ScaleReport is what a scaling run measured.
type ScaleReport struct {
	Topology       string  `json:"topology"`
	Scheme         string  `json:"scheme"`
	Sites          int     `json:"sites"`
	Seed           uint64  `json:"seed"`
	SimulatedS     float64 `json:"simulated_s"`
	WarmS          float64 `json:"warm_s"`
	WindowS        float64 `json:"window_s"`
	JitterMs       float64 `json:"jitter_ms"`
	LossPercent    float64 `json:"loss_percent"`
	TIVPairs       int     `json:"tiv_pairs"`
	ControlKbit    float64 `json:"control_kbit_per_site"`
	ControlKbitMax float64 `json:"control_kbit_per_site_max"`
	// ControlByType is the mean kbit/s per site by message type.
	ControlByType     map[string]float64 `json:"control_kbit_by_type"`
	DatagramsPerSite  float64            `json:"datagrams_per_site_s"`
	Pairs             int                `json:"pairs"`
	PairsRelayed      int                `json:"pairs_relayed"`
	PairsOutsideBound int                `json:"pairs_outside_bound"`
	// PairsOutsideAfterWarm is the same check at the start of the window.
	PairsOutsideAfterWarm int      `json:"pairs_outside_bound_after_warm"`
	Worst                 string   `json:"worst_pair"`
	Outside               []string `json:"outside,omitempty"`
	// RouteChanges counts the route changes in the window (the links do
	// not change in it, so every change is noise or an estimate
	// settling).
	RouteChanges int `json:"route_changes"`
	// RouteChangesNoise counts those of them not to a truly shorter path
	// (the others are estimates settling on a real gain).
	RouteChangesNoise int `json:"route_changes_noise"`
	// SlowedReroute is the time from a direct link getting 100 ms slower
	// to its route leaving it (5 links, limit 10 s), and
	// SlowedRerouteBeyondRTT the same less the slowed link's new round
	// trip, before which no measurement can tell its source.
	SlowedReroute          *Durations `json:"slowed_link_reroute,omitempty"`
	SlowedRerouteBeyondRTT *Durations `json:"slowed_link_reroute_beyond_rtt,omitempty"`
	// SlowedBusyReroute and SlowedBusyRerouteBeyondRTT are the same for
	// 5 other links, each carrying a flow of stamped data (in-band
	// samples) when it slows.
	SlowedBusyReroute          *Durations `json:"slowed_busy_link_reroute,omitempty"`
	SlowedBusyRerouteBeyondRTT *Durations `json:"slowed_busy_link_reroute_beyond_rtt,omitempty"`
	// KilledRelay is the relay killed and the time until each route it
	// relayed is carried on a path avoiding it (limit 5 s).
	KilledRelay      string     `json:"killed_relay,omitempty"`
	KilledRelayCover *Durations `json:"killed_relay_covered,omitempty"`
	ProbeIntervalMs  float64    `json:"probe_interval_ms"`
	// HotPerSite is the mean number of members a site probes at the full
	// rate (relays of its routes; new scheme).
	HotPerSite float64 `json:"hot_members_per_site"`
	// RefreshesPerSite is how often a site recomputed its routes in the
	// window, per second (the simulator's main CPU cost).
	RefreshesPerSite float64 `json:"route_computations_per_site_s"`
	WallS            float64 `json:"wall_s"`
	Events           int     `json:"events"`
}

// Scheme returns the configure function of a scheme name, and whether
// the name is known.
func Scheme(name string) (func(*control.Config), bool) {
	switch name {
	case "old":
		return func(c *control.Config) { c.Economy = false }, true
	case "new":
		return func(c *control.Config) { c.Economy = true }, true
	}
	return nil, false
}

// RunScale runs one scaling run: every site started at once, Warm to
// settle, then the window in which control traffic and route changes are
// counted, the oracle check at its end, and the events if asked for.
func RunScale(o ScaleOptions) ScaleReport {
	wall := time.Now()
	configure, ok := Scheme(o.Scheme)
	if !ok {
		configure, o.Scheme = func(*control.Config) {}, "default"
	}
	n := FromTopology(o.Topology, o.Seed, o.Offset, o.Skew, o.Jitter, configure)
	for k, l := range n.links {
		l.Loss = o.Loss
		n.links[k] = l
	}
	rep := ScaleReport{Topology: o.Topology.Name, Scheme: o.Scheme, Sites: len(o.Topology.Sites), Seed: o.Seed,
		WarmS: o.Warm.Seconds(), WindowS: o.Steady.Seconds(), JitterMs: float64(o.Jitter.Microseconds()) / 1000, LossPercent: 100 * o.Loss}
	rep.TIVPairs, _ = o.Topology.TIVs()
	if err := n.StartAll(); err != nil {
		panic("sim: " + err.Error()) // the default configuration is valid
	}
	n.runProgress(o.Warm, o.Progress)
	early := n.CheckOracle(3)
	rep.PairsOutsideAfterWarm = early.Outside
	before := len(n.Changes)
	first := n.snapTraffic()
	refreshes := n.refreshes()
	n.runProgress(o.Steady, o.Progress)
	if o.Done != nil {
		o.Done()
	}
	tr := n.trafficSince(first, o.Steady)
	rep.ControlKbit, rep.ControlKbitMax, rep.ControlByType, rep.DatagramsPerSite = tr.MeanKbit, tr.MaxKbit, tr.ByType, tr.Datagrams
	rep.RouteChanges = len(n.Changes) - before
	for _, c := range n.Changes[before:] {
		from, ok1 := n.TrueDelay(c.Site, c.From)
		to, ok2 := n.TrueDelay(c.Site, c.To)
		if !ok1 || !ok2 || to >= from {
			rep.RouteChangesNoise++
		}
	}
	rep.RefreshesPerSite = float64(n.refreshes()-refreshes) / float64(len(n.sites)) / o.Steady.Seconds()
	late := n.CheckOracle(3)
	rep.Pairs, rep.PairsRelayed, rep.PairsOutsideBound, rep.Worst, rep.Outside = late.Pairs, late.Relayed, late.Outside, late.Worst, late.Details
	for _, s := range n.sites {
		rep.HotPerSite += float64(s.Node.HotMembers()) / float64(len(n.sites))
	}
	p, _ := n.sites[0].Node.DetectionTimes()
	rep.ProbeIntervalMs = float64(p.Microseconds()) / 1000
	if o.Events {
		s, sb := n.SlowLinks(5, 100*time.Millisecond, 10*time.Second, o.Seed, false)
		rep.SlowedReroute, rep.SlowedRerouteBeyondRTT = &s, &sb
		n.RunFor(2 * time.Second)
		b, bb := n.SlowLinks(5, 100*time.Millisecond, 10*time.Second, o.Seed+1, true)
		rep.SlowedBusyReroute, rep.SlowedBusyRerouteBeyondRTT = &b, &bb
		n.RunFor(2 * time.Second)
		name, k := n.KillRelay(5 * time.Second)
		rep.KilledRelay, rep.KilledRelayCover = name, &k
	}
	rep.SimulatedS = n.Elapsed().Seconds()
	rep.Events = n.Events
	rep.WallS = time.Since(wall).Seconds()
	return rep
}

// runProgress runs for d, calling progress every simulated 10 s.
func (n *Net) runProgress(d time.Duration, progress func(time.Duration)) {
	end := n.now.Add(d)
	for n.now.Before(end) {
		n.RunUntil(minTime(n.now.Add(10*time.Second), end), nil)
		if progress != nil {
			progress(n.Elapsed())
		}
	}
}

// refreshes is the route computations of all sites so far.
func (n *Net) refreshes() uint64 {
	var k uint64
	for _, s := range n.sites {
		if s.Node != nil {
			k += s.Node.Counters().Refreshes
		}
	}
	return k
}
