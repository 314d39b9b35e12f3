package routing

import (
	"math"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Edge is one usable directed link.
type Edge struct {
	// Delay is the offset-shifted one-way delay.
	Delay time.Duration
	// RTT is the round trip of the link (offset-free).
	RTT time.Duration
	// Loss is the link's loss (its origin's outgoing direction) with its
	// confidence interval.
	Loss Loss
	// Suspect marks a link that is still up but whose latest probe
	// replies are missing: it may be dying. Routes over it (or through the
	// site it leads to) are in doubt and get a backup path that avoids it.
	Suspect bool
	// Settling marks a link that came up so recently (for the first time,
	// or after a long while down) that its estimates are still filling
	// their window: a route over it is not damped, since its changes
	// follow the estimates settling, not a link that flaps.
	Settling bool
	// Rate is the link's available throughput in bits per second (zero:
	// unknown), as its receiver estimates it, and RateKind what that rests
	// on (wire.RateKind*). Only the bulk path (Route.Bulk) uses them.
	Rate     float64
	RateKind uint8
	// Jitter is the mean difference between the link's consecutive delay
	// samples (measure.Filter.Jitter): the noise of its delay estimate
	// scales with it (estimateNoise).
	Jitter time.Duration
}

// Loss is a link's loss rate with its confidence interval.
type Loss struct {
	Rate      float64
	Low, High float64
	// Samples is the number of probes the rate is over.
	Samples int
	// ChargeLow is the lower bound at the overlay-wide confidence
	// (measure.ChargeZ): the part of the loss that is significant among
	// all the overlay's links at once, which is what LossCost charges.
	ChargeLow float64
}

// Matrix is the graph routes are computed on: the live members (self
// included) and the links that are up between them. Build it with
// NewMatrix (or Reuse) and Set; it is not modified by the router. An
// entry of edges means something only where has is set.
type Matrix struct {
	ids   []wire.SiteID
	index map[wire.SiteID]int
	edges []Edge // n × n
	has   []bool
	// costs caches every link's cost under costW (noCost where there is
	// no usable link), for the shortest-path computations. It is valid
	// where costOK is set, except for the rows marked in stale, which
	// changed since (Set, ClearRow).
	costs  []time.Duration
	costW  Weights
	costOK bool
	stale  []bool
	// suspects and rated count the links of the matrix that are Suspect
	// and that have a Rate, so that HasSuspects and HasRates need not look
	// at N² links at every route computation.
	suspects, rated int
}

// noCost marks a missing or unusable link in Matrix.costs.
const noCost = time.Duration(math.MaxInt64)

// NewMatrix returns a matrix over the given sites with no links.
func NewMatrix(ids []wire.SiteID) *Matrix {
	return Reuse(nil, ids)
}

// Reuse returns a matrix over the given sites with no links, built in the
// memory of spare (nil: new memory), which must no longer be used: a
// site that recomputes its routes several times a second builds each
// matrix in the one its router let go of, instead of allocating N² links
// each time.
func Reuse(spare *Matrix, ids []wire.SiteID) *Matrix {
	m := spare
	if m == nil {
		m = &Matrix{index: make(map[wire.SiteID]int, len(ids))}
	}
	m.ids = append(m.ids[:0], ids...)
	slices.Sort(m.ids)
	m.ids = slices.Compact(m.ids)
	clear(m.index)
	for i, id := range m.ids {
		m.index[id] = i
	}
	n2 := len(m.ids) * len(m.ids)
	if cap(m.edges) < n2 {
		m.edges, m.has = make([]Edge, n2), make([]bool, n2)
	}
	m.edges, m.has = m.edges[:n2], m.has[:n2]
	clear(m.has)
	m.suspects, m.rated = 0, 0
	m.costOK = false
	m.stale = slices.Grow(m.stale[:0], len(m.ids))[:len(m.ids)]
	clear(m.stale)
	return m
}

// Covers reports whether the matrix is over exactly the given sites
// (in any order, each once).
func (m *Matrix) Covers(ids []wire.SiteID) bool {
	if len(ids) != len(m.ids) {
		return false
	}
	for _, id := range ids {
		if _, ok := m.index[id]; !ok {
			return false
		}
	}
	return true
}

// ClearRow removes every link from from, so that the row can be set
// anew while the rest of the matrix stays as it is.
func (m *Matrix) ClearRow(from wire.SiteID) {
	i, ok := m.index[from]
	if !ok {
		return
	}
	n := len(m.ids)
	for k := i * n; k < (i+1)*n; k++ {
		m.forget(k)
	}
	m.stale[i] = true
}

// forget removes link k, if the matrix holds it.
func (m *Matrix) forget(k int) {
	m.count(k, -1)
	m.has[k] = false
}

// count adds d to the counts of suspect and rated links for link k, if
// the matrix holds it.
func (m *Matrix) count(k, d int) {
	if !m.has[k] {
		return
	}
	if m.edges[k].Suspect {
		m.suspects += d
	}
	if m.edges[k].Rate > 0 {
		m.rated += d
	}
}

// ClearRates forgets the available throughput of every link towards to
// (PutRate): its receiver's report says it.
func (m *Matrix) ClearRates(to wire.SiteID) {
	j, ok := m.index[to]
	if !ok {
		return
	}
	n := len(m.ids)
	for k := j; k < len(m.edges); k += n {
		m.count(k, -1)
		m.edges[k].Rate, m.edges[k].RateKind = 0, 0
		m.count(k, 1)
	}
}

// Set adds the usable link from → to. Unknown sites and self-links are
// ignored.
func (m *Matrix) Set(from, to wire.SiteID, e Edge) {
	i, ok1 := m.index[from]
	j, ok2 := m.index[to]
	if !ok1 || !ok2 || i == j {
		return
	}
	m.set(i, j, e)
}

func (m *Matrix) set(i, j int, e Edge) {
	k := i*len(m.ids) + j
	m.forget(k)
	m.edges[k], m.has[k] = e, true
	m.count(k, 1)
	m.stale[i] = true
}

// Row sets the links of one origin. Set them in ascending order of
// destination and each costs a step along the sorted sites instead of a
// look-up; out of order they are looked up.
type Row struct {
	m    *Matrix
	i, j int
}

// Row returns the writer of the links from from; ok is false if from is
// not in the matrix.
func (m *Matrix) Row(from wire.SiteID) (r Row, ok bool) {
	i, ok := m.index[from]
	return Row{m: m, i: i}, ok
}

// Set adds the usable link from the row's origin to to. Unknown sites and
// the self-link are ignored.
func (r *Row) Set(to wire.SiteID, e Edge) {
	if r.seek(to) {
		r.m.set(r.i, r.j, e)
		r.j++
	}
}

// SetKeepRate is Set with the available throughput the matrix holds for
// the link (PutRate) in place of e's: the link's receiver reports it, not
// the row's origin.
func (r *Row) SetKeepRate(to wire.SiteID, e Edge) {
	if r.seek(to) {
		c := &r.m.edges[r.i*len(r.m.ids)+r.j]
		e.Rate, e.RateKind = c.Rate, c.RateKind
		r.m.set(r.i, r.j, e)
		r.j++
	}
}

// seek moves the row's cursor to the column of to, and reports whether
// it is a link the row may hold.
func (r *Row) seek(to wire.SiteID) bool {
	ids := r.m.ids
	if r.j > 0 && ids[r.j-1] >= to {
		r.j = 0 // out of order: start over
	}
	for r.j < len(ids) && ids[r.j] < to {
		r.j++
	}
	return r.j < len(ids) && ids[r.j] == to && r.j != r.i
}

// PutRate sets the available throughput of the link from → to whether or
// not the matrix holds the link now: Row.SetKeepRate takes it when the
// link is set. ClearRates clears it.
func (m *Matrix) PutRate(from, to wire.SiteID, rate float64, kind uint8) {
	i, ok1 := m.index[from]
	j, ok2 := m.index[to]
	if !ok1 || !ok2 {
		return
	}
	k := i*len(m.ids) + j
	m.count(k, -1)
	m.edges[k].Rate, m.edges[k].RateKind = rate, kind
	m.count(k, 1)
}

// Edge returns the link from → to if it is usable.
func (m *Matrix) Edge(from, to wire.SiteID) (Edge, bool) {
	i, ok1 := m.index[from]
	j, ok2 := m.index[to]
	if !ok1 || !ok2 || !m.has[i*len(m.ids)+j] {
		return Edge{}, false
	}
	return m.edges[i*len(m.ids)+j], true
}

// WithoutSuspects returns a copy of the matrix without its suspect links,
// and the set of sites that a suspect link leaves src towards (sites that
// may be dead, so not to be relayed through).
func (m *Matrix) WithoutSuspects(src wire.SiteID) (*Matrix, map[wire.SiteID]bool) {
	c := &Matrix{ids: m.ids, index: m.index, edges: m.edges, has: slices.Clone(m.has), stale: make([]bool, len(m.ids))}
	doubt := map[wire.SiteID]bool{}
	n := len(m.ids)
	for i := range m.ids {
		for j := range m.ids {
			k := i*n + j
			if m.has[k] && m.edges[k].Suspect {
				c.has[k] = false
				if m.ids[i] == src {
					doubt[m.ids[j]] = true
				}
			} else if m.has[k] && m.edges[k].Rate > 0 {
				c.rated++
			}
		}
	}
	return c, doubt
}

// HasSuspects reports whether any link of the matrix is suspect.
func (m *Matrix) HasSuspects() bool { return m.suspects > 0 }

// Sites returns the sites of the matrix, sorted. The slice is shared.
func (m *Matrix) Sites() []wire.SiteID { return m.ids }

// Has reports whether a site is in the matrix.
func (m *Matrix) Has(id wire.SiteID) bool { _, ok := m.index[id]; return ok }

// pathSettling reports whether a link of path p from src is Settling.
func (m *Matrix) pathSettling(src wire.SiteID, p []wire.SiteID) bool {
	prev := src
	for _, hop := range p {
		if e, ok := m.Edge(prev, hop); ok && e.Settling {
			return true
		}
		prev = hop
	}
	return false
}

// Metrics are the sums along a path.
type Metrics struct {
	// Delay is the sum of offset-shifted delays; comparable between paths
	// with the same endpoints.
	Delay time.Duration
	// Cost is Delay plus the loss penalty: what routing minimises.
	Cost time.Duration
	// RTT is the sum of the links' round trips.
	RTT time.Duration
	// OneWay is the path's one-way latency as well as it can be told
	// without synchronised clocks: the smaller of half its links' round
	// trips and, for a relayed path, half the direct link's round trip
	// plus the path's offset-free difference to it. On asymmetric links
	// half the round trips of a relayed path can exceed its one-way
	// latency by more than a tenth.
	OneWay time.Duration
	// Delivery is the probability that a packet crosses every link.
	Delivery float64
	// noiseVar is the variance of the path's delay estimate: the sum of
	// the squared standard errors of its links' estimates, which are
	// independent.
	noiseVar float64
}

// estimateNoise is the standard error of a link's delay estimate per unit
// of its jitter: the mean of the middle half of 48 samples
// (measure.DefaultFilterConfig) varies by 0.17 times the mean difference
// between consecutive samples under uniform jitter, 0.14 times under
// normal jitter.
const estimateNoise = 0.17

// Weights turn link loss into a cost, by the model of docs/loss.md: a
// packet lost on a link costs the flow that sent it the time its
// transport takes to notice and send it again (Recovery), so a link that
// loses a fraction p of its packets adds p × Recovery to the expected
// delay of the packets sent over it. The cost is an absolute duration, so
// adding it keeps path comparisons offset-free, and it is additive over a
// path's links (exact to first order in p). What is charged is the part
// of the loss that is significant: the lower bound of the loss's
// confidence interval above LossFloor, the interval taken at a confidence
// that holds for all the overlay's links at once (Loss.ChargeLow).
type Weights struct {
	// Recovery is what one lost packet costs a flow.
	Recovery time.Duration
	// LossFloor is the loss that costs nothing: the background loss of
	// ordinary Internet paths, which every path has, and which cannot be
	// told apart between paths in any window short enough to follow the
	// network.
	LossFloor float64
	// MaxLoss excludes links whose loss is surely (its interval's lower
	// bound) at least this fraction.
	MaxLoss float64
}

func (w Weights) usable(e Edge) bool { return w.MaxLoss <= 0 || e.Loss.Low < w.MaxLoss }

func (w Weights) cost(e Edge) time.Duration { return e.Delay + w.LossCost(e.Loss) }

// LossCost is what a link's loss adds to its cost.
func (w Weights) LossCost(l Loss) time.Duration {
	return time.Duration(max(l.ChargeLow-w.LossFloor, 0) * float64(w.Recovery))
}

// Measure sums a path from src; ok is false if a link is missing or
// unusable, or the path repeats a site.
func (m *Matrix) Measure(w Weights, src wire.SiteID, path []wire.SiteID) (Metrics, bool) {
	mt := Metrics{Delivery: 1}
	prev := src
	for i, hop := range path {
		if hop == src || slices.Contains(path[:i], hop) {
			return Metrics{}, false
		}
		e, ok := m.Edge(prev, hop)
		if !ok || !w.usable(e) {
			return Metrics{}, false
		}
		mt.Delay += e.Delay
		mt.Cost += w.cost(e)
		mt.RTT += e.RTT
		mt.Delivery *= 1 - e.Loss.Rate
		se := estimateNoise * float64(e.Jitter)
		mt.noiseVar += se * se
		prev = hop
	}
	mt.OneWay = mt.RTT / 2
	if d, ok := m.Edge(src, prev); ok && len(path) > 1 && d.RTT > 0 {
		if via := d.RTT/2 + mt.Delay - d.Delay; via > 0 {
			mt.OneWay = min(mt.OneWay, via)
		}
	}
	return mt, len(path) > 0
}

// ShortestPaths computes from src the lowest-cost path of at most maxHops
// links to every site, with a hop-limited Bellman–Ford that accepts
// negative link weights. Sites in noRelay are never used as intermediate
// hops. The result maps each reachable destination to its path (receivers
// in order, excluding src). Ties go to fewer hops, then to lower site IDs.
func (m *Matrix) ShortestPaths(w Weights, src wire.SiteID, maxHops int, noRelay func(wire.SiteID) bool) map[wire.SiteID][]wire.SiteID {
	return m.shortestPaths(w, src, maxHops, noRelay, false)
}

// ShortestPathsTo returns, for every site that reaches dst in at most
// maxHops links, its best path to dst (the hops after it, ending with
// dst): the return paths of ShortestPaths, all from one computation on the
// transposed matrix rather than one per source.
func (m *Matrix) ShortestPathsTo(w Weights, dst wire.SiteID, maxHops int, noRelay func(wire.SiteID) bool) map[wire.SiteID][]wire.SiteID {
	rev := m.shortestPaths(w, dst, maxHops, noRelay, true)
	out := make(map[wire.SiteID][]wire.SiteID, len(rev))
	for src, p := range rev {
		// p is dst → p[0] → … → src in the transpose, so src → … → p[0]
		// → dst here.
		back := make([]wire.SiteID, 0, len(p))
		for i := len(p) - 2; i >= 0; i-- {
			back = append(back, p[i])
		}
		out[src] = append(back, dst)
	}
	return out
}

// costTable returns every link's cost under w, row-major, noCost where
// there is no usable link. It is computed once per matrix and weights,
// and then again only for the rows that changed.
func (m *Matrix) costTable(w Weights) []time.Duration {
	n := len(m.ids)
	if !m.costOK || m.costW != w || len(m.stale) != n {
		if cap(m.costs) < len(m.edges) {
			m.costs = make([]time.Duration, len(m.edges))
		}
		m.costs = m.costs[:len(m.edges)]
		m.costRows(w, 0, len(m.edges))
		m.costW, m.costOK = w, true
		m.stale = slices.Grow(m.stale[:0], n)[:n]
		clear(m.stale)
		return m.costs
	}
	for i, st := range m.stale {
		if st {
			m.costRows(w, i*n, (i+1)*n)
			m.stale[i] = false
		}
	}
	return m.costs
}

// costRows computes the costs of the links from index lo to hi.
func (m *Matrix) costRows(w Weights, lo, hi int) {
	for k := lo; k < hi; k++ {
		m.costs[k] = noCost
		if m.has[k] && w.usable(m.edges[k]) {
			m.costs[k] = w.cost(m.edges[k])
		}
	}
}

// shortestPaths is ShortestPaths from src, on the transposed matrix (every
// link u → v read as v → u) when reverse is set.
func (m *Matrix) shortestPaths(w Weights, src wire.SiteID, maxHops int, noRelay func(wire.SiteID) bool, reverse bool) map[wire.SiteID][]wire.SiteID {
	s, ok := m.index[src]
	if !ok {
		return nil
	}
	n := len(m.ids)
	costs := m.costTable(w)
	const none = -1
	dist := make([][]time.Duration, maxHops+1)
	pred := make([][]int, maxHops+1)
	reach := make([][]bool, maxHops+1)
	for k := range dist {
		dist[k] = make([]time.Duration, n)
		pred[k] = make([]int, n)
		reach[k] = make([]bool, n)
	}
	for v := range pred[0] {
		pred[0][v] = none
	}
	reach[0][s] = true
	from := make([]bool, n) // the sites a path of k-1 links may go on from
	for k := 1; k <= maxHops; k++ {
		for u := range from {
			from[u] = reach[k-1][u] && (u == s || noRelay == nil || !noRelay(m.ids[u]))
		}
		l := hopLayer{n: n, s: s, costs: costs, from: from, prev: dist[k-1], dist: dist[k], reach: reach[k], pred: pred[k]}
		copy(l.dist, dist[k-1])
		copy(l.reach, reach[k-1])
		if reverse {
			l.pull()
		} else {
			l.push()
		}
	}
	out := make(map[wire.SiteID][]wire.SiteID, n)
	for v := 0; v < n; v++ {
		if v == s || !reach[maxHops][v] {
			continue
		}
		if p := m.walk(pred, maxHops, v, s); p != nil {
			out[m.ids[v]] = p
		}
	}
	return out
}

// hopLayer computes layer k of shortestPaths, the best paths of at most
// k links, from layer k-1 (prev, and from: the sites a path may go on
// from). dist and reach start as copies of layer k-1, and a site keeps
// its path of fewer links (pred inherit) unless a path one link longer
// is strictly cheaper; among equally cheap ones the lowest last hop wins.
type hopLayer struct {
	n, s       int
	costs      []time.Duration // row-major, noCost where there is no link
	from       []bool
	prev, dist []time.Duration
	reach      []bool
	pred       []int
}

// inherit marks a site of a layer whose path is that of the layer before.
const inherit = -2

// push relaxes every link u → v, a row of costs at a time.
func (l *hopLayer) push() {
	for v := range l.pred {
		l.pred[v] = inherit
	}
	for u := 0; u < l.n; u++ {
		if !l.from[u] {
			continue
		}
		du := l.prev[u]
		for v, c := range l.costs[u*l.n : (u+1)*l.n] {
			if c == noCost || v == l.s || v == u {
				continue
			}
			if d := du + c; !l.reach[v] || d < l.dist[v] {
				l.dist[v], l.reach[v], l.pred[v] = d, true, u
			}
		}
	}
}

// pull relaxes every link of the transposed matrix, u → v read from row
// v of costs, so that the reverse computation walks the table in the
// order it is laid out; it considers each site's candidates in the same
// order as push, so ties fall the same way.
func (l *hopLayer) pull() {
	for v := 0; v < l.n; v++ {
		l.pred[v] = inherit
		if v == l.s {
			continue
		}
		d0, r0, p0 := l.dist[v], l.reach[v], inherit
		for u, c := range l.costs[v*l.n : (v+1)*l.n] {
			if c == noCost || u == v || !l.from[u] {
				continue
			}
			if d := l.prev[u] + c; !r0 || d < d0 {
				d0, r0, p0 = d, true, u
			}
		}
		l.dist[v], l.reach[v], l.pred[v] = d0, r0, p0
	}
}

// walk rebuilds the path to v from the predecessor layers, removing any
// cycle (which can only appear through estimation noise on near-zero
// round trips).
func (m *Matrix) walk(pred [][]int, k, v, s int) []wire.SiteID {
	var rev []int
	for v != s && k > 0 {
		switch p := pred[k][v]; p {
		case inherit:
			k--
		case -1:
			return nil
		default:
			rev = append(rev, v)
			v, k = p, k-1
		}
	}
	if v != s {
		return nil
	}
	path := make([]wire.SiteID, 0, len(rev))
	for i := len(rev) - 1; i >= 0; i-- {
		id := m.ids[rev[i]]
		if j := slices.Index(path, id); j >= 0 {
			path = path[:j] // cut the loop back to the first visit
		}
		path = append(path, id)
	}
	return path
}
