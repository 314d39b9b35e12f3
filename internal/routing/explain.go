package routing

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Candidate is one path considered for a destination.
type Candidate struct {
	Path []wire.SiteID
	// Delay is the offset-shifted path delay; Cost adds the loss penalty.
	Delay time.Duration
	Cost  time.Duration
	// GainOverDirect is DirectDelay − Delay: exact, positive when the path
	// beats the direct link.
	GainOverDirect time.Duration
	// OneWayEstimate is the estimated absolute one-way latency (see
	// Route.OneWayEstimate).
	OneWayEstimate time.Duration
	Loss           float64
	// Links are the path's links with their loss and what it costs.
	Links  []LinkCost
	Chosen bool
	Best   bool
}

// LinkCost is one link of a candidate path: its loss with the interval,
// and what the loss adds to the path's cost.
type LinkCost struct {
	From, To wire.SiteID
	Loss     Loss
	LossCost time.Duration
}

// Explanation says why a destination has its route.
type Explanation struct {
	Dest      wire.SiteID
	Reachable bool
	Chosen    []wire.SiteID
	Since     time.Time
	// Pinned is the operator's pin for this destination (nil if none) and
	// PinActive whether it is in use.
	Pinned    []wire.SiteID
	PinActive bool
	// Forbidden lists the sites the operator forbade as relays.
	Forbidden []wire.SiteID
	// Candidates are sorted by cost: the direct path, every path through
	// one relay, the best of at most MaxHops, and the chosen one.
	Candidates []Candidate
	// Threshold is the gain the best path needs over the chosen one (any
	// gain for the path the route left and that has recovered:
	// Router.restores), of which NoiseMargin is for the noise of the two
	// paths' estimates (a near tie's, once settled: Router.switchGain),
	// and PendingSince when the gain started to exceed it (zero if it
	// does not).
	Threshold    time.Duration
	NoiseMargin  time.Duration
	PendingSince time.Time
	// Hold is how long that gain must last: Hold, NearTieHold for a
	// near tie, or the return hold for a path left because it got worse
	// (Returning).
	Hold      time.Duration
	Returning bool
	// DirectSince is when the chosen relayed path began to gain less than
	// half the threshold over the direct path (zero if it does not): the
	// route goes direct after DirectHold.
	DirectSince time.Time
	Settling    bool
	Switches    int
	LastSwitch  Switch
	Reason      string
	// Bulk explains the bulk path (Route.Bulk).
	Bulk BulkExplanation
}

// LastSwitch returns the last change of the route to dst; ok is false if
// there is no route to it. It is the LastSwitch of Why, without the rest
// of the explanation.
func (r *Router) LastSwitch(dst wire.SiteID) (s Switch, ok bool) {
	d := r.dests[dst]
	if d == nil {
		return Switch{}, false
	}
	return d.last, true
}

// Why explains the route to dst on the matrix of the last Update.
func (r *Router) Why(now time.Time, dst wire.SiteID) Explanation {
	ex := Explanation{Dest: dst, Pinned: slices.Clone(r.pins[dst]), Forbidden: r.Forbidden(), Hold: r.cfg.Hold}
	m := r.matrix
	d := r.dests[dst]
	if m == nil || d == nil {
		ex.Reason = "no route: the destination is not a live member or no path of at most MaxHops links is up"
		return ex
	}
	ex.Reachable, ex.Chosen, ex.Since, ex.PinActive = true, d.path, d.since, d.pinned
	ex.PendingSince, ex.Switches, ex.LastSwitch = d.pendingSince, d.switches, d.last
	ex.DirectSince = d.directSince
	best := m.ShortestPaths(r.cfg.Weights, r.self, r.cfg.MaxHops, r.noRelay)[dst]
	ex.Settling = r.settling(now, m, d, best)
	if !d.pendingSince.IsZero() && d.pendingHold > 0 {
		ex.Hold = d.pendingHold
	}
	ex.Returning = r.returning(now, d, best)
	ex.Candidates = r.candidates(m, dst, d.path, best)
	if len(ex.Candidates) > 0 {
		bm := r.metricsOf(m, ex.Candidates[0].Path)
		ex.Threshold = r.threshold(bm)
		if cm, ok := m.Measure(r.cfg.Weights, r.self, d.path); ok && !ex.Settling {
			g := r.gainNeeded(now, d, best, cm, bm)
			ex.Threshold, ex.NoiseMargin = g, max(0, g-ex.Threshold)
		}
	}
	ex.Reason = r.reason(now, ex, best)
	ex.Bulk = r.whyBulk(m, dst, d)
	return ex
}

func (r *Router) metricsOf(m *Matrix, p []wire.SiteID) Metrics {
	mt, _ := m.Measure(r.cfg.Weights, r.self, p)
	return mt
}

// candidates lists the paths worth showing.
func (r *Router) candidates(m *Matrix, dst wire.SiteID, chosen, best []wire.SiteID) []Candidate {
	paths := [][]wire.SiteID{{dst}}
	if r.cfg.MaxHops >= 2 {
		for _, v := range m.Sites() {
			if v != r.self && v != dst && !r.forbidden[v] {
				paths = append(paths, []wire.SiteID{v, dst})
			}
		}
	}
	for _, p := range [][]wire.SiteID{best, chosen} {
		if p != nil && !slices.ContainsFunc(paths, func(q []wire.SiteID) bool { return slices.Equal(p, q) }) {
			paths = append(paths, p)
		}
	}
	direct, hasDirect := m.Edge(r.self, dst)
	var out []Candidate
	for _, p := range paths {
		mt, ok := m.Measure(r.cfg.Weights, r.self, p)
		if !ok {
			continue
		}
		c := Candidate{Path: p, Delay: mt.Delay, Cost: mt.Cost, Loss: 1 - mt.Delivery, OneWayEstimate: mt.RTT / 2,
			Links: r.linkCosts(m, p), Chosen: slices.Equal(p, chosen), Best: slices.Equal(p, best)}
		if hasDirect {
			c.GainOverDirect = direct.Delay - mt.Delay
			c.OneWayEstimate = direct.RTT/2 - c.GainOverDirect
		}
		out = append(out, c)
	}
	slices.SortStableFunc(out, func(a, b Candidate) int { return cmp.Compare(a.Cost, b.Cost) })
	return out
}

// linkCosts returns the links of path p from this site with their loss
// and its cost.
func (r *Router) linkCosts(m *Matrix, p []wire.SiteID) []LinkCost {
	out := make([]LinkCost, 0, len(p))
	prev := r.self
	for _, hop := range p {
		e, _ := m.Edge(prev, hop)
		out = append(out, LinkCost{From: prev, To: hop, Loss: e.Loss, LossCost: r.cfg.Weights.LossCost(e.Loss)})
		prev = hop
	}
	return out
}

// reason phrases the decision.
func (r *Router) reason(now time.Time, ex Explanation, best []wire.SiteID) string {
	if ex.PinActive {
		return "pinned by the operator"
	}
	if ex.Pinned != nil {
		return "pinned path is down: normal selection applies"
	}
	if !ex.DirectSince.IsZero() && ex.PendingSince.IsZero() {
		return fmt.Sprintf("switch to the direct path pending: the relay has gained less than half the threshold for %v of the %v hold", now.Sub(ex.DirectSince).Round(time.Millisecond), r.cfg.DirectHold)
	}
	if slices.Equal(ex.Chosen, best) {
		return "lowest latency path of at most MaxHops links"
	}
	var gain time.Duration
	for _, c := range ex.Candidates {
		if c.Chosen {
			gain = c.Cost
		}
	}
	gain -= ex.Candidates[0].Cost
	if gain < ex.Threshold {
		noise := ""
		if ex.NoiseMargin > 0 {
			noise = fmt.Sprintf(" (%v of it for the noise of the two paths' estimates)", ex.NoiseMargin.Round(time.Microsecond))
		}
		return fmt.Sprintf("kept by hysteresis: the best path is only %v better, below the %v threshold%s", gain.Round(time.Microsecond), ex.Threshold.Round(time.Microsecond), noise)
	}
	if !ex.PendingSince.IsZero() && now.Sub(ex.PendingSince) < ex.Hold {
		hold := "hold"
		if ex.Hold == r.cfg.NearTieHold && ex.Hold > r.cfg.Hold {
			hold = "hold for a gain within twice the threshold (a near tie)"
		}
		if ex.Returning {
			hold = "return hold (this site left that path because it got worse)"
		}
		return fmt.Sprintf("switch pending: the best path has been %v better for %v of the %v %s", gain.Round(time.Microsecond), now.Sub(ex.PendingSince).Round(time.Millisecond), ex.Hold, hold)
	}
	return "switch delayed by flap damping"
}

// TIV is a pair whose best path beats the direct link: a triangle
// inequality violation.
type TIV struct {
	From, To wire.SiteID
	Path     []wire.SiteID
	// Saving is the direct link's delay minus the path's, exact because
	// both have the same endpoints.
	Saving time.Duration
	// DirectOneWay is the direct link's estimated one-way latency (half its
	// RTT) and PathOneWay that minus Saving.
	DirectOneWay time.Duration
	PathOneWay   time.Duration
	// SavingOfRTT is Saving as a fraction of the direct round trip.
	SavingOfRTT float64
}

// TIVs lists, for every ordered pair of sites with a direct link, the best
// path of at most maxHops links when it beats the direct link, sorted by
// decreasing saving. Relay restrictions are not applied: this is a
// property of the network.
func TIVs(m *Matrix, w Weights, maxHops int) []TIV {
	var out []TIV
	for _, s := range m.Sites() {
		for t, p := range m.ShortestPaths(w, s, maxHops, nil) {
			direct, ok := m.Edge(s, t)
			if !ok || len(p) < 2 {
				continue
			}
			mt, _ := m.Measure(w, s, p)
			saving := direct.Delay - mt.Delay
			if saving <= 0 {
				continue
			}
			tv := TIV{From: s, To: t, Path: p, Saving: saving, DirectOneWay: direct.RTT / 2, PathOneWay: direct.RTT/2 - saving}
			if direct.RTT > 0 {
				tv.SavingOfRTT = float64(saving) / float64(direct.RTT)
			}
			out = append(out, tv)
		}
	}
	slices.SortFunc(out, func(a, b TIV) int {
		if c := cmp.Compare(b.Saving, a.Saving); c != 0 {
			return c
		}
		if c := cmp.Compare(a.From, b.From); c != 0 {
			return c
		}
		return cmp.Compare(a.To, b.To)
	})
	return out
}

// Matrix returns the matrix of the last Update (nil before the first).
func (r *Router) Matrix() *Matrix { return r.matrix }
