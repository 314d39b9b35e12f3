package routing

import (
	"slices"

	"github.com/detour-overlay/detour/internal/wire"
)

// Fast failover.
//
// A link is declared down only after DownAfter without a probe reply
// (500 ms by default), but the caller marks it Suspect as soon as a few
// replies are missing (250 ms). A route whose path uses a suspect link, or
// relays through a site that a suspect link of this site leads to, is in
// doubt: while it is, its Route carries as Backup the best path on the
// matrix without suspect links and without those sites as relays, and the
// data path sends every frame on both. The doubt settles by itself: when a
// reply arrives the link is no longer suspect and Backup is cleared; when
// the link is declared down the path dies and the route switches at once
// (to the path the backup already carried, since both are computed on the
// same matrix minus the same link). Either way no frame waits for the
// verdict, so a dying relay black-holes nothing for longer than the time
// to suspect it.

// spareRoutes computes, for this Update, the sites in doubt and the best
// paths that avoid every suspect link and relay no site in doubt.
func (r *Router) spareRoutes(m *Matrix) {
	r.doubt, r.spare = nil, nil
	if !m.HasSuspects() {
		return
	}
	clean, doubt := m.WithoutSuspects(r.self)
	r.doubt = doubt
	r.spare = clean.ShortestPaths(r.cfg.Weights, r.self, r.cfg.MaxHops, func(id wire.SiteID) bool {
		return r.forbidden[id] || doubt[id]
	})
}

// inDoubt reports whether path p from this site uses a suspect link or
// relays through a site in doubt.
func (r *Router) inDoubt(m *Matrix, p []wire.SiteID) bool {
	if r.spare == nil {
		return false
	}
	prev := r.self
	for i, hop := range p {
		if e, ok := m.Edge(prev, hop); ok && e.Suspect {
			return true
		}
		if i < len(p)-1 && r.doubt[hop] {
			return true
		}
		prev = hop
	}
	return false
}

// setBackup gives destination id a backup path while its path is in
// doubt and clears it otherwise.
func (r *Router) setBackup(m *Matrix, id wire.SiteID) {
	d := r.dests[id]
	if d == nil {
		return
	}
	var b []wire.SiteID
	if alt := r.spare[id]; alt != nil && r.inDoubt(m, d.path) && !slices.Equal(alt, d.path) {
		b = alt
	}
	if !slices.Equal(b, d.backup) {
		d.backup = slices.Clone(b)
		r.dirty = true
	}
}
