// Package routing chooses, for every destination, the lowest-latency path of
// at most H hops from this site, and publishes the result as an immutable
// Table that the data path reads without locks.
//
// Latencies are offset-shifted one-way delays: every measured link delay is
// d(i,j) + o(i) − o(j) for unknown clock offsets o. Every path from s to t is
// shifted by the same o(s) − o(t), so comparing paths between the same two
// sites is exact, and so is any sum around a cycle (such as a path plus a
// return path, which gives a round trip). Edge weights may be negative, so
// paths are found with a hop-limited Bellman–Ford, never with Dijkstra.
// Thresholds are absolute durations or fractions of round-trip times, never
// percentages of offset-shifted values.
//
// The package is pure: it takes the current time as an argument and keeps
// no goroutines, timers or sockets.
package routing

import (
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Route is the path chosen to one destination.
type Route struct {
	Dest wire.SiteID
	// Path lists the receivers in order, excluding this site; the last
	// entry is Dest. len(Path) <= MaxHops <= wire.MaxPath.
	Path []wire.SiteID
	// FirstHop is the underlay address of Path[0].
	FirstHop netip.AddrPort
	// Delay is the path's offset-shifted one-way delay when the table was
	// built. It is comparable between routes to the same destination, so
	// that the difference of two Delays is an exact latency difference.
	Delay time.Duration
	// PrevPath and PrevDelay describe the path this route replaced, with
	// PrevDelay measured on the same link matrix as Delay at the moment of
	// the switch, plus Config.HoldMargin: PrevDelay − Delay is the hold
	// time that makes the switch reorder-free (the exact path difference
	// and a margin for estimation error). PrevPath is nil for a first route or after a
	// dead path.
	PrevPath  []wire.SiteID
	PrevDelay time.Duration
	// DirectDelay is the offset-shifted delay of the direct link, valid when
	// DirectUp is true. Delay − DirectDelay is the exact gain of the path
	// over the direct link (negative when the path is faster).
	DirectDelay time.Duration
	DirectUp    bool
	// OneWayEstimate estimates the absolute one-way latency of the path:
	// half the direct link's round trip plus the exact difference between
	// the path and the direct link (or half the path's round trip when the
	// direct link is down). It is an estimate because the asymmetry of the
	// direct link is unknowable without synchronised clocks.
	OneWayEstimate time.Duration
	// RTTEstimate is the round trip when the reply takes the path this site
	// computes for the destination's own route back here: the sum of two
	// offset-shifted path delays around a cycle, which is offset-free.
	RTTEstimate time.Duration
	// Backup, when not nil, is a second path (with its first hop) on which
	// the data path sends a copy of every frame, because Path is in doubt
	// (probes or replies on it are missing); the destination drops
	// whichever copy arrives second. It is cleared once Path is confirmed
	// or replaced.
	Backup         []wire.SiteID
	BackupFirstHop netip.AddrPort
	// Pinned is true when an operator pinned this path.
	Pinned bool
	// Since is when this path was installed (this site's clock).
	Since time.Time
	// Bulk is the path for bulk flows to Dest: among the paths whose
	// delay is within the bulk latency bound (Config.Bulk) of Path's, the
	// one whose bottleneck has the most available throughput. It is nil
	// when that is Path itself, when no throughput is known, or when bulk
	// routing is off; bulk flows then use Path.
	Bulk *BulkPath
}

// BulkPath is the path bulk flows take to one destination, with the
// throughput figures it was chosen on.
type BulkPath struct {
	// Path lists the receivers in order, excluding this site; the last
	// entry is the destination.
	Path []wire.SiteID
	// FirstHop is the underlay address of Path[0].
	FirstHop netip.AddrPort
	// Delay is the path's offset-shifted one-way delay, comparable with
	// Route.Delay.
	Delay time.Duration
	// Rate is the estimated available throughput of the path's
	// bottleneck link, and PathRate the same for Route.Path, in bits per
	// second.
	Rate, PathRate float64
}

// Relayed reports whether the route goes through at least one relay.
func (r *Route) Relayed() bool { return len(r.Path) > 1 }

// Table is an immutable routing snapshot. A new Table (with a higher
// Version) is built whenever a path, the member set or a member's address
// changes; readers load it through an atomic pointer and never see it
// change.
type Table struct {
	Version uint64
	Self    wire.SiteID
	routes  map[wire.SiteID]*Route
	addrs   map[wire.SiteID]netip.AddrPort
	sites   []wire.SiteID
}

// NewTable builds a table from the routes (to live destinations) and the
// addresses of the live members other than self. It copies its inputs.
func NewTable(version uint64, self wire.SiteID, routes []*Route, addrs map[wire.SiteID]netip.AddrPort) *Table {
	t := &Table{
		Version: version,
		Self:    self,
		routes:  make(map[wire.SiteID]*Route, len(routes)),
		addrs:   make(map[wire.SiteID]netip.AddrPort, len(addrs)),
	}
	for _, r := range routes {
		t.routes[r.Dest] = r
	}
	for id, a := range addrs {
		if id == self {
			continue
		}
		t.addrs[id] = a
		t.sites = append(t.sites, id)
	}
	slices.Sort(t.sites)
	return t
}

// Lookup returns the route to a live destination.
func (t *Table) Lookup(dst wire.SiteID) (*Route, bool) {
	if t == nil {
		return nil, false
	}
	r, ok := t.routes[dst]
	return r, ok
}

// Addr returns the underlay address of a live member other than self.
func (t *Table) Addr(site wire.SiteID) (netip.AddrPort, bool) {
	if t == nil {
		return netip.AddrPort{}, false
	}
	a, ok := t.addrs[site]
	return a, ok
}

// Sites lists the live members other than self, in ascending ID order. The
// slice is shared: callers must not modify it.
func (t *Table) Sites() []wire.SiteID {
	if t == nil {
		return nil
	}
	return t.sites
}

// Routes returns the routes sorted by destination.
func (t *Table) Routes() []*Route {
	if t == nil {
		return nil
	}
	out := make([]*Route, 0, len(t.routes))
	for _, id := range t.sites {
		if r, ok := t.routes[id]; ok {
			out = append(out, r)
		}
	}
	return out
}

// Path fills h.Path and h.PathLen with the route to dst and returns the
// underlay address of the first hop. It implements the data path's Routes
// interface and does not allocate.
func (t *Table) Path(dst wire.SiteID, h *wire.DataHeader) (netip.AddrPort, bool) {
	r, ok := t.Lookup(dst)
	if !ok || len(r.Path) == 0 || len(r.Path) > wire.MaxPath {
		return netip.AddrPort{}, false
	}
	h.PathLen = uint8(copy(h.Path[:], r.Path))
	return r.FirstHop, true
}
