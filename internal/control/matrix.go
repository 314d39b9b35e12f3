package control

import (
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/linkstate"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// matrixState is the node's routing matrix, kept between route
// computations with what each row was built from. A site recomputes its
// routes several times a second, and between two computations only the
// origins whose reports arrived changed: their rows are built again, the
// others kept. Building all N rows of N links each time would be most of
// a route computation at hundreds of sites (docs/scaling.md).
type matrixState struct {
	m *routing.Matrix
	// rows says what each row of m (by position in m.Sites) was built
	// from.
	rows []rowSource
	// chargeZ is the loss quantile the rows' loss charges were computed
	// at (Node.chargeZ).
	chargeZ float64
	// rebuild, reported and origins are scratch: the rows to build,
	// those of them whose origin's report changed, and each row's report.
	rebuild, reported []bool
	origins           []*linkstate.Origin
}

// rowSource is what a row of the matrix was built from, and until when
// it holds.
type rowSource struct {
	built bool
	// version is the origin's report's linkstate.Origin.Version (0: the
	// DB held no report).
	version uint64
	// fresh is whether the report was fresh (linkstate.DB.Fresh).
	fresh bool
	// until is when the row must be built again though its report did
	// not change: a link stops settling, or the delay of a link that
	// drifts moved by driftTolerance (zero: never).
	until time.Time
	// volatile marks this site's own row, whose links turn suspect as
	// replies go missing: it is built at every computation.
	volatile bool
}

// holds reports whether a row built from r is still what the report now
// says at now.
func (r *rowSource) holds(now time.Time, version uint64, fresh bool) bool {
	return r.built && !r.volatile && r.version == version && r.fresh == fresh &&
		(r.until.IsZero() || now.Before(r.until))
}

// matrix returns the routing matrix over the live sites from their latest
// fresh reports at now, building again only the rows whose report
// changed, went stale or fresh, or holds links that change with time. A
// link's available throughput is what its receiver reports (the reverse
// link's RevRate, as DB.Rate reads it).
func (n *Node) matrix(now time.Time, live []wire.SiteID) *routing.Matrix {
	st := &n.mx
	z := n.chargeZ(len(live))
	if st.m == nil || !st.m.Covers(live) || z != st.chargeZ {
		st.m = routing.Reuse(st.m, live)
		st.rows = make([]rowSource, len(live))
		st.chargeZ = z
	}
	ids := st.m.Sites()
	st.rebuild = resize(st.rebuild, len(ids))
	st.reported = resize(st.reported, len(ids))
	st.origins = resize(st.origins, len(ids))
	for i, id := range ids {
		var version uint64
		if o, ok := n.db.Origin(id); ok {
			st.origins[i], version = o, o.Version
		}
		fresh := id == n.self || n.db.Fresh(now, id)
		st.rebuild[i] = !st.rows[i].holds(now, version, fresh)
		st.reported[i] = !st.rows[i].built || st.rows[i].version != version
		st.rows[i].version, st.rows[i].fresh = version, fresh
	}
	for i, id := range ids {
		if st.rebuild[i] {
			n.buildRow(now, i, id, st.origins[i])
		}
	}
	for j, to := range ids {
		if st.reported[j] {
			n.columnRates(to, st.origins[j])
		}
	}
	return st.m
}

// buildRow sets row i of the matrix, the links of origin from, anew from
// its report o (nil: none).
func (n *Node) buildRow(now time.Time, i int, from wire.SiteID, o *linkstate.Origin) {
	st := &n.mx
	r := &st.rows[i]
	r.built, r.until, r.volatile = true, time.Time{}, from == n.self
	st.m.ClearRow(from)
	if o == nil {
		return
	}
	settle := n.settleTime()
	row, _ := st.m.Row(from)
	var slots []lossSlot // taken at the first link that lost something
	for k := range o.Links {
		l := &o.Links[k]
		if slots == nil && l.Loss != 0 {
			slots = n.originSlots(from, len(o.Links), len(st.rows))
		}
		if !r.fresh || !l.Up {
			continue
		}
		e := routing.Edge{Delay: l.DelayAt(now), RTT: l.RTT, Loss: n.slotLoss(slots, k, l, st.chargeZ), Jitter: l.Jitter}
		e.Suspect = from == n.self && n.suspect(now, n.members[l.To])
		if end := l.UpSince.Add(settle); !l.Flapping && now.Before(end) {
			e.Settling = true
			if r.until.IsZero() || end.Before(r.until) {
				r.until = end
			}
		}
		if end, ok := driftEnd(now, l); ok && (r.until.IsZero() || end.Before(r.until)) {
			r.until = end
		}
		row.SetKeepRate(l.To, e)
	}
}

// columnRates sets the available throughput of every link towards to
// from to's report o (nil: none), whether or not the matrix holds the
// link now: a row built later keeps it (routing.Row.SetKeepRate).
func (n *Node) columnRates(to wire.SiteID, o *linkstate.Origin) {
	n.mx.m.ClearRates(to)
	if o == nil {
		return
	}
	for k := range o.Links {
		if l := &o.Links[k]; l.RateKnown() {
			n.mx.m.PutRate(l.To, to, l.RevRate, l.RevRateKind)
		}
	}
}

// driftTolerance is how far the delay of a link between clocks that run
// at different rates (linkstate.Link.DelayAt) may move before its row is
// built again: far below any difference routing acts on (half a
// millisecond at least), and clocks drift by a few ppm, 50 at worst, so
// a row with such links lasts a second or more rather than one
// computation.
const driftTolerance = 50 * time.Microsecond

// driftEnd returns when the delay of l, extrapolated from now, will have
// moved by driftTolerance; ok is false if it does not drift.
func driftEnd(now time.Time, l *linkstate.Link) (time.Time, bool) {
	ppm := l.DriftPPM
	if ppm == 0 || l.At.IsZero() {
		return time.Time{}, false
	}
	if ppm < 0 {
		ppm = -ppm
	}
	return now.Add(driftTolerance * 1e6 / time.Duration(ppm)), true
}

// resize returns b with length k, every element zero.
func resize[T any](b []T, k int) []T {
	b = slices.Grow(b[:0], k)[:k]
	clear(b)
	return b
}
