package routing

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// The bulk path (Route.Bulk). Among the paths of at most MaxHops links
// whose delay exceeds the latency path's (Route.Path) by at most the bulk
// bound (Config.Bulk), the bulk path is the one whose bottleneck, the
// link with the least available throughput (Edge.Rate), is widest. It is
// only used when it offers MinGain times the latency path's bottleneck.
//
// Rates are noisy (a train's dispersion, a window of delivered bytes), so
// the choice has hysteresis in three ways: a bulk path stays while it
// offers MinGain/bulkKeep times the latency path's rate (it appears at
// MinGain); another path replaces it only when wider by bulkSwitch; and
// an unforced change waits MinSwitchInterval after the last one. A bulk
// path that dies or whose rate becomes unknown is replaced at once, and
// comes back if it is usable again within bulkLostWindow
// (backToLostBulk). The bound is checked when a path is chosen, not while
// it is kept (nor when the bulk path comes back): a bulk
// transfer fills the queue of its path's bottleneck (TCP does), which on
// the testbed put the path in use 11 ms beyond the bound within seconds;
// leaving it then sent the transfer back onto the narrow latency path,
// where it filled that queue instead. Flows already on a path keep it in
// the data path as long as the table offers it; the hysteresis is for new
// flows.
const (
	bulkKeep   = 1.25
	bulkSwitch = 1.25
	// bulkEnumSites bounds the overlays in which paths of three links
	// are searched (O(N²) per destination, pruned); larger ones consider
	// the direct path and every path through one relay (O(N)). Paths of
	// more than three links are never considered.
	bulkEnumSites = 32
	// bulkLostWindow is how long a bulk path that died or lost its rate
	// may come back without meeting the bound.
	bulkLostWindow = 10 * time.Second
)

// PathRate returns the bottleneck rate of path p from src: the least
// Edge.Rate of its links, in bits per second; ok is false when a link is
// missing or its rate unknown.
func (m *Matrix) PathRate(src wire.SiteID, p []wire.SiteID) (float64, bool) {
	rate := 0.0
	prev := src
	for i, hop := range p {
		e, ok := m.Edge(prev, hop)
		if !ok || e.Rate <= 0 {
			return 0, false
		}
		if i == 0 || e.Rate < rate {
			rate = e.Rate
		}
		prev = hop
	}
	return rate, len(p) > 0
}

// HasRates reports whether any link of the matrix has a known rate.
func (m *Matrix) HasRates() bool { return m.rated > 0 }

// bulkBound is how much longer than the latency path (metrics pm) a bulk
// path may be.
func (r *Router) bulkBound(pm Metrics) time.Duration {
	return max(r.cfg.Bulk.Bound, time.Duration(r.cfg.Bulk.BoundFraction*float64(pm.RTT)))
}

// bulkCandidate is a path considered for bulk flows.
type bulkCandidate struct {
	path  []wire.SiteID
	delay time.Duration
	rate  float64
}

// widestWithin returns the path to dst of at most MaxHops links (three
// at most; see bulkEnumSites) whose bottleneck is widest among those with
// a known rate on every link and a delay of at most limit, avoiding
// forbidden relays and sites in doubt; ties go to the lower delay, then to
// fewer links. It works on the matrix's arrays and prunes a first hop
// narrower than the best path found, so that the O(N²) search per
// destination costs little.
func (r *Router) widestWithin(m *Matrix, dst wire.SiteID, limit time.Duration) (bulkCandidate, bool) {
	n := len(m.ids)
	s, ok1 := m.index[r.self]
	t, ok2 := m.index[dst]
	if !ok1 || !ok2 || s == t {
		return bulkCandidate{}, false
	}
	edge := func(i, j int) (Edge, bool) {
		k := i*n + j
		if !m.has[k] || m.edges[k].Rate <= 0 || !r.cfg.Weights.usable(m.edges[k]) {
			return Edge{}, false
		}
		return m.edges[k], true
	}
	relay := func(i int) bool { id := m.ids[i]; return !r.forbidden[id] && !r.doubt[id] }
	var best [3]int
	bestLen, bestRate, bestDelay := 0, 0.0, time.Duration(0)
	consider := func(rate float64, delay time.Duration, p ...int) {
		if delay > limit {
			return
		}
		if bestLen > 0 && (rate < bestRate || rate == bestRate && (delay > bestDelay || delay == bestDelay && len(p) >= bestLen)) {
			return
		}
		bestLen, bestRate, bestDelay = copy(best[:], p), rate, delay
	}
	if e, ok := edge(s, t); ok {
		consider(e.Rate, e.Delay, t)
	}
	three := r.cfg.MaxHops >= 3 && n <= bulkEnumSites
	for u := 0; u < n && r.cfg.MaxHops >= 2; u++ {
		if u == s || u == t || !relay(u) {
			continue
		}
		su, ok := edge(s, u)
		if !ok || (bestLen > 0 && su.Rate < bestRate) {
			continue // no path through u can be wider
		}
		if ut, ok := edge(u, t); ok {
			consider(min(su.Rate, ut.Rate), su.Delay+ut.Delay, u, t)
		}
		for v := 0; three && v < n; v++ {
			if v == s || v == t || v == u || !relay(v) {
				continue
			}
			uv, ok := edge(u, v)
			if !ok || uv.Rate < bestRate || su.Delay+uv.Delay > limit {
				continue
			}
			if vt, ok := edge(v, t); ok {
				consider(min(su.Rate, uv.Rate, vt.Rate), su.Delay+uv.Delay+vt.Delay, u, v, t)
			}
		}
	}
	if bestLen == 0 {
		return bulkCandidate{}, false
	}
	p := make([]wire.SiteID, bestLen)
	for i := range p {
		p[i] = m.ids[best[i]]
	}
	return bulkCandidate{path: p, delay: bestDelay, rate: bestRate}, true
}

// bulkPathNow measures path p for bulk flows: its delay and bottleneck
// rate, if it is usable, every rate is known, and no relay is forbidden
// or in doubt.
func (r *Router) bulkPathNow(m *Matrix, p []wire.SiteID) (bulkCandidate, bool) {
	for _, id := range p[:len(p)-1] {
		if r.forbidden[id] || r.doubt[id] {
			return bulkCandidate{}, false
		}
	}
	mt, ok := m.Measure(r.cfg.Weights, r.self, p)
	if !ok {
		return bulkCandidate{}, false
	}
	rate, ok := m.PathRate(r.self, p)
	return bulkCandidate{path: p, delay: mt.Delay, rate: rate}, ok
}

// selectBulk chooses the bulk path of d (destination dst) at now, after its
// latency path was chosen.
func (r *Router) selectBulk(now time.Time, m *Matrix, dst wire.SiteID, d *dest) {
	// Every change starts the damping interval; only unforced ones wait
	// for it to end.
	set := func(p []wire.SiteID, reason string) {
		if !slices.Equal(p, d.bulk) {
			d.bulk = slices.Clone(p)
			d.bulkSwitch = now
			r.dirty = true
		}
		d.bulkReason = reason
	}
	if !r.cfg.Bulk.Enabled || d.pinned {
		d.bulkRate, d.bulkPathRate = 0, 0
		set(nil, "bulk routing is off or the path is pinned: bulk flows take the latency path")
		return
	}
	pm, ok := m.Measure(r.cfg.Weights, r.self, d.path)
	if !ok {
		set(nil, "the latency path is not usable")
		return
	}
	limit := pm.Delay + r.bulkBound(pm)
	pathRate, pathKnown := m.PathRate(r.self, d.path)
	d.bulkPathRate = pathRate
	var cur *bulkCandidate
	if d.bulk != nil {
		if c, ok := r.bulkPathNow(m, d.bulk); ok {
			cur = &c
		}
	}
	gain := r.cfg.Bulk.MinGain
	if r.keepLeftForBulk(now, m, d, pathRate, pathKnown, gain) || r.backToLostBulk(now, m, d, pathRate, pathKnown, gain) {
		return
	}
	best, found := r.widestWithin(m, dst, limit)
	damped := r.cfg.MinSwitchInterval > 0 && !d.bulkSwitch.IsZero() && now.Sub(d.bulkSwitch) < r.cfg.MinSwitchInterval
	switch {
	case d.bulk != nil && slices.Equal(d.bulk, d.path):
		// The bulk flows stay on the path they were on, so this is no
		// change for them and starts no damping: when the latency path
		// leaves it again (as it does once a queue that a flow filled
		// before it became bulk has drained), the bulk path is set back
		// at once and the bulk flows do not follow the latency path.
		d.bulk, r.dirty = nil, true
		d.bulkReason = "the latency path became the bulk path"
	case d.bulk != nil && cur == nil:
		d.bulkRate = 0
		d.lostBulk, d.lostBulkAt = d.bulk, now
		if found && pathKnown && best.rate >= gain*pathRate && !slices.Equal(best.path, d.path) {
			d.bulkRate = best.rate
			set(best.path, fmt.Sprintf("the bulk path died or lost its rate; %s", widerBy(best.rate, pathRate)))
			return
		}
		set(nil, "the bulk path died or lost its rate")
	case d.bulk != nil:
		d.bulkRate = cur.rate
		if !pathKnown {
			set(d.bulk, "kept: the latency path's rate is unknown")
			return
		}
		if damped {
			set(d.bulk, fmt.Sprintf("kept: changed less than %v ago (flap damping)", r.cfg.MinSwitchInterval))
			return
		}
		if cur.rate < gain/bulkKeep*pathRate {
			if found && best.rate >= gain*pathRate && !slices.Equal(best.path, d.path) {
				d.bulkRate = best.rate
				set(best.path, widerBy(best.rate, pathRate))
				return
			}
			set(nil, fmt.Sprintf("the bulk path's gain fell below %.2g×: bulk flows take the latency path", gain/bulkKeep))
			return
		}
		if found && best.rate >= bulkSwitch*cur.rate && !slices.Equal(best.path, d.bulk) && !slices.Equal(best.path, d.path) {
			d.bulkRate = best.rate
			set(best.path, fmt.Sprintf("%s (and %.2g× the previous bulk path)", widerBy(best.rate, pathRate), best.rate/cur.rate))
			return
		}
		set(d.bulk, fmt.Sprintf("kept: %.3g Mbit/s, %.2g× the latency path's %.3g Mbit/s; no path within the bound is %.2g× wider",
			cur.rate/1e6, cur.rate/pathRate, pathRate/1e6, bulkSwitch))
	default:
		d.bulkRate = 0
		switch {
		case !pathKnown:
			set(nil, "the latency path's rate is unknown: bulk flows take it")
		case !found || slices.Equal(best.path, d.path):
			set(nil, "the latency path is the widest within the bound")
		case best.rate < gain*pathRate:
			set(nil, fmt.Sprintf("the widest path within the bound offers %.2g× the latency path's rate, below the %.2g× required", best.rate/pathRate, gain))
		case damped:
			set(nil, fmt.Sprintf("%s, but the bulk path changed less than %v ago (flap damping)", widerBy(best.rate, pathRate), r.cfg.MinSwitchInterval))
		default:
			d.bulkRate = best.rate
			set(best.path, widerBy(best.rate, pathRate))
		}
	}
}

// keepLeftForBulk makes the path the latency path has just left because
// it collapsed the bulk path, when the bulk flows were on it (it was the
// latency path and the bulk path in one) and it is still gain times
// wider than the new latency path; it reports whether it did. The bound
// a new bulk path must meet is not checked: the path met it until a
// moment ago, and its delay now is the queue the bulk flows built on it.
// It starts no damping: for the flows on it nothing changes.
func (r *Router) keepLeftForBulk(now time.Time, m *Matrix, d *dest, pathRate float64, pathKnown bool, gain float64) bool {
	if d.bulk != nil || !pathKnown || !d.leftCollapsed || d.leftPath == nil || !d.leftAt.Equal(now) {
		return false
	}
	c, ok := r.bulkPathNow(m, d.leftPath)
	if !ok || c.rate < gain*pathRate {
		return false
	}
	d.bulk, d.bulkRate, r.dirty = slices.Clone(c.path), c.rate, true
	d.bulkReason = fmt.Sprintf("kept: the latency path left it as it collapsed, with the bulk flows on it; %.3g Mbit/s, %.2g× the latency path's %.3g Mbit/s",
		c.rate/1e6, c.rate/pathRate, pathRate/1e6)
	return true
}

// backToLostBulk makes the bulk path that died or lost its rate less
// than bulkLostWindow ago the bulk path again once it is usable and gain
// times wider than the latency path, when no other bulk path replaced it;
// it reports whether it did. The bound is not checked, as in
// keepLeftForBulk: the bulk flows were on the path a moment ago, and its
// delay is the queue they built there. On a loaded machine a relay is in
// doubt for a moment (its replies late), and the bulk path chosen again
// from nothing would then be the narrow latency path.
func (r *Router) backToLostBulk(now time.Time, m *Matrix, d *dest, pathRate float64, pathKnown bool, gain float64) bool {
	lost := d.lostBulk
	if lost == nil || d.bulk != nil || now.Sub(d.lostBulkAt) >= bulkLostWindow {
		d.lostBulk = nil
		return false
	}
	c, ok := r.bulkPathNow(m, lost)
	if !ok || !pathKnown || c.rate < gain*pathRate || slices.Equal(lost, d.path) {
		return false
	}
	d.bulk, d.bulkRate, d.lostBulk, r.dirty = lost, c.rate, nil, true
	d.bulkReason = fmt.Sprintf("back: the bulk path lost %v ago is usable again; %.3g Mbit/s, %.2g× the latency path's %.3g Mbit/s",
		now.Sub(d.lostBulkAt).Round(time.Millisecond), c.rate/1e6, c.rate/pathRate, pathRate/1e6)
	return true
}

func widerBy(rate, pathRate float64) string {
	return fmt.Sprintf("widest path within the bound: %.3g Mbit/s, %.2g× the latency path's %.3g Mbit/s", rate/1e6, rate/pathRate, pathRate/1e6)
}

// noBulk clears the bulk path of d when no link has a known rate (or bulk
// routing is off): nothing can be chosen on.
func (r *Router) noBulk(d *dest) {
	if d.bulk != nil {
		d.bulk = nil
		r.dirty = true
	}
	d.bulkRate, d.bulkPathRate = 0, 0
	d.bulkReason = "no link has a known rate (or bulk routing is off): bulk flows take the latency path"
}

// bulkRoute returns the BulkPath of d for the table, nil if none.
func (r *Router) bulkRoute(m *Matrix, d *dest) *BulkPath {
	if d.bulk == nil {
		return nil
	}
	first, ok := r.addrs[d.bulk[0]]
	if !ok {
		return nil
	}
	mt, _ := m.Measure(r.cfg.Weights, r.self, d.bulk)
	return &BulkPath{Path: d.bulk, FirstHop: first, Delay: mt.Delay, Rate: d.bulkRate, PathRate: d.bulkPathRate}
}

// BulkExplanation says why a destination has its bulk path.
type BulkExplanation struct {
	Enabled bool
	// Chosen is the bulk path, nil when bulk flows take the latency path.
	Chosen []wire.SiteID
	// Rate is the chosen path's bottleneck rate and PathRate the latency
	// path's (bits per second, zero if unknown).
	Rate, PathRate float64
	// Bound is how much longer than the latency path a bulk path may be.
	Bound   time.Duration
	MinGain float64
	// Candidates are the direct path, the paths through one relay, the
	// latency path and the bulk path, widest first.
	Candidates []BulkCandidate
	Reason     string
}

// BulkCandidate is one path considered for bulk flows.
type BulkCandidate struct {
	Path []wire.SiteID
	// Extra is the path's delay less the latency path's (exact).
	Extra time.Duration
	// Rate is the bottleneck rate, zero when a link's rate is unknown.
	Rate        float64
	WithinBound bool
	Links       []LinkRate
	Chosen      bool // the bulk path
	Latency     bool // the latency path
}

// LinkRate is a link's available throughput (bits per second, zero if
// unknown) and what it rests on (wire.RateKind*).
type LinkRate struct {
	From, To wire.SiteID
	Rate     float64
	Kind     uint8
}

// whyBulk explains the bulk path of d.
func (r *Router) whyBulk(m *Matrix, dst wire.SiteID, d *dest) BulkExplanation {
	ex := BulkExplanation{Enabled: r.cfg.Bulk.Enabled, Chosen: d.bulk, Rate: d.bulkRate, PathRate: d.bulkPathRate,
		MinGain: r.cfg.Bulk.MinGain, Reason: d.bulkReason}
	pm, ok := m.Measure(r.cfg.Weights, r.self, d.path)
	if !ok {
		return ex
	}
	ex.Bound = r.bulkBound(pm)
	paths := [][]wire.SiteID{{dst}}
	if r.cfg.MaxHops >= 2 {
		for _, v := range m.Sites() {
			if v != r.self && v != dst && !r.forbidden[v] {
				paths = append(paths, []wire.SiteID{v, dst})
			}
		}
	}
	for _, p := range [][]wire.SiteID{d.path, d.bulk} {
		if p != nil && !slices.ContainsFunc(paths, func(q []wire.SiteID) bool { return slices.Equal(p, q) }) {
			paths = append(paths, p)
		}
	}
	for _, p := range paths {
		mt, ok := m.Measure(r.cfg.Weights, r.self, p)
		if !ok {
			continue
		}
		c := BulkCandidate{Path: p, Extra: mt.Delay - pm.Delay, WithinBound: mt.Delay-pm.Delay <= ex.Bound,
			Chosen: slices.Equal(p, d.bulk), Latency: slices.Equal(p, d.path)}
		c.Rate, _ = m.PathRate(r.self, p)
		prev := r.self
		for _, hop := range p {
			e, _ := m.Edge(prev, hop)
			c.Links = append(c.Links, LinkRate{From: prev, To: hop, Rate: e.Rate, Kind: e.RateKind})
			prev = hop
		}
		ex.Candidates = append(ex.Candidates, c)
	}
	slices.SortStableFunc(ex.Candidates, func(a, b BulkCandidate) int { return cmp.Compare(b.Rate, a.Rate) })
	return ex
}
