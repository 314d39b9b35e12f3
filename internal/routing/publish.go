package routing

import (
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// tableDrift is how far a route's delay may drift before the table is
// rebuilt even though no path changed.
const tableDrift = 250 * time.Microsecond

// publish builds a new Table when a path, the member set or an address
// changed, or a route's delay drifted by more than tableDrift.
func (r *Router) publish(now time.Time, m *Matrix) {
	key := make(map[wire.SiteID]tableEntry, len(r.dests))
	for id, d := range r.dests {
		mt, _ := m.Measure(r.cfg.Weights, r.self, d.path)
		dt, up := m.Measure(r.cfg.Weights, r.self, []wire.SiteID{id})
		key[id] = tableEntry{path: slices.Clone(d.path), backup: slices.Clone(d.backup), bulk: slices.Clone(d.bulk), delay: mt.Delay, direct: dt.Delay, directUp: up}
	}
	if !r.dirty && !drifted(r.tableKey, key) {
		return
	}
	r.tableKey = key
	r.dirty = false
	r.version++
	routes := make([]*Route, 0, len(r.dests))
	back := m.ShortestPathsTo(r.cfg.Weights, r.self, r.cfg.MaxHops, r.noRelay)
	for id, d := range r.dests {
		if rt := r.route(m, id, d, back[id]); rt != nil {
			routes = append(routes, rt)
		}
	}
	r.table = NewTable(r.version, r.self, routes, r.addrs)
}

func drifted(old, cur map[wire.SiteID]tableEntry) bool {
	if len(old) != len(cur) {
		return true
	}
	for id, c := range cur {
		o, ok := old[id]
		if !ok || !slices.Equal(o.path, c.path) || !slices.Equal(o.backup, c.backup) || !slices.Equal(o.bulk, c.bulk) || abs(o.delay-c.delay) > tableDrift ||
			o.directUp != c.directUp || abs(o.direct-c.direct) > tableDrift {
			return true
		}
	}
	return false
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// route builds the Route of one destination, or nil if its first hop or
// the destination has no address. back is the best return path from the
// destination to this site.
func (r *Router) route(m *Matrix, id wire.SiteID, d *dest, back []wire.SiteID) *Route {
	first, ok := r.addrs[d.path[0]]
	if _, ok2 := r.addrs[id]; !ok || !ok2 {
		return nil
	}
	mt, _ := m.Measure(r.cfg.Weights, r.self, d.path)
	rt := &Route{Dest: id, Path: d.path, FirstHop: first, Delay: mt.Delay, Pinned: d.pinned, Since: d.since,
		PrevPath: d.prevPath, PrevDelay: d.prevDelay}
	rt.OneWayEstimate = mt.RTT / 2
	if e, ok := m.Edge(r.self, id); ok {
		rt.DirectDelay, rt.DirectUp = e.Delay, true
		rt.OneWayEstimate = e.RTT/2 + (mt.Delay - e.Delay)
	}
	if len(d.backup) > 0 {
		if bf, ok := r.addrs[d.backup[0]]; ok {
			rt.Backup, rt.BackupFirstHop = d.backup, bf
		}
	}
	rt.Bulk = r.bulkRoute(m, d)
	rt.RTTEstimate = mt.RTT
	if back != nil {
		if bm, ok := m.Measure(r.cfg.Weights, id, back); ok {
			rt.RTTEstimate = mt.Delay + bm.Delay // a cycle: offsets cancel
		}
	}
	return rt
}
