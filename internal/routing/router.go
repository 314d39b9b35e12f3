package routing

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Config tunes route selection.
type Config struct {
	// MaxHops is H, the most links a path may have (1 = direct only).
	MaxHops int
	// MinGain and GainFraction: a path replaces the current one only if it
	// is better by at least max(MinGain, GainFraction × its one-way
	// latency) (Metrics.OneWay: half the round trips, or less where the
	// direct link's round trip and the offset-free path difference say
	// so). It sits below the oracle check's bound of max(0.5 ms, 2 %),
	// so that a kept path stays inside that bound although the estimates
	// of a path of several links err by a few tenths of a millisecond
	// (docs/routing.md).
	MinGain      time.Duration
	GainFraction float64
	// Hold is how long a better path must stay better before the switch.
	Hold time.Duration
	// CollapseHold replaces Hold, when shorter, while the current path
	// has collapsed (see collapsed): its estimate already followed a
	// lasting rise (the filters take a step only once several samples
	// agree, and the prober sends the samples that decide a rise as soon
	// as it sees one), and every moment on it costs the traffic the rise.
	// The default is none.
	CollapseHold time.Duration
	// NearTieHold is how long a near tie (see holdFor) must last
	// instead: such a gain is within the noise of two nearly equal paths
	// of several links each, and the noise of a link's estimate lasts as
	// long as the estimator's window (a burst of delay stays in the
	// window for up to 5 s). Holding for two and a half windows means
	// neither one noisy window nor two overlapping ones can move a
	// route; real changes of several milliseconds are still followed
	// after Hold.
	NearTieHold time.Duration
	// NoiseMargin is how many standard errors of the difference between
	// two paths' estimates (from the links' jitter) a near tie must gain
	// beyond the threshold (see switchGain).
	NoiseMargin float64
	// DirectHold is how long a relayed path must gain less than half
	// the threshold over the direct path before the route goes direct
	// (directTie). Nothing is urgent about it: the relay is no worse
	// than the direct path. So it waits for several of the estimator's
	// windows, and a noisy estimate of a relay that truly gains a few
	// tenths of a millisecond does not move the route to a slower path.
	DirectHold time.Duration
	// Settle is how long after a destination first becomes reachable its
	// route follows the best path without damping, while the link matrix
	// fills in. The same holds, for as long as they are settling, for the
	// routes whose current or best path has a link marked Settling (a
	// link that just came up, as when a site joins).
	Settle time.Duration
	// MinSwitchInterval damps flapping: after a switch, the next one that
	// is not forced (by a dead path, a forbidden relay or an operator's
	// pin) waits at least this long (0 disables). First routes and the
	// switches of the settling period do not start it, so the first real
	// change of a stable route is followed after Hold alone.
	MinSwitchInterval time.Duration
	// ReturnHold is how long a path that was left because it got worse
	// (or died) less than ReturnWindow ago must stay better before a
	// switch back to it (instead of Hold). A link whose load pauses now
	// and then (a TCP flow backing off after losses) looks idle for a few
	// seconds at a time; without it the route would go back at every
	// pause and then sit on the loaded link for MinSwitchInterval when
	// the load resumes. A path left because another got better is not
	// affected. 0 disables.
	ReturnHold   time.Duration
	ReturnWindow time.Duration
	// HoldMargin is added to the exact path difference that a switch to
	// a shorter path holds packets for (Route.PrevDelay − Route.Delay),
	// to cover the error of the delay estimates and of timers: a held
	// packet then arrives at most HoldMargin later than it would have on
	// the old path, and never before its predecessors.
	HoldMargin time.Duration
	Weights    Weights
	// Bulk configures the second path per destination that bulk flows
	// take.
	Bulk BulkConfig
}

// BulkConfig bounds the path chosen for bulk flows.
type BulkConfig struct {
	// Enabled turns on the computation of Route.Bulk.
	Enabled bool
	// Bound and BoundFraction give how much longer than the lowest-latency
	// path a bulk path may be: the larger of Bound and BoundFraction of
	// the lowest-latency path's round trip.
	Bound         time.Duration
	BoundFraction float64
	// MinGain is the factor by which the bulk path's available throughput
	// must exceed the lowest-latency path's for the bulk path to differ
	// from it.
	MinGain float64
}

// DefaultBulkConfig allows bulk paths up to max(10 ms, 25 % of the best
// path's round trip) longer, when they offer 1.5 times the throughput.
func DefaultBulkConfig() BulkConfig {
	return BulkConfig{Enabled: true, Bound: 10 * time.Millisecond, BoundFraction: 0.25, MinGain: 1.5}
}

// DefaultConfig returns H = 3, max(0.375 ms, 1.5 %) held for 300 ms (6 s
// for a gain below twice that, 10 s to go back to a path left within the
// last minute because it got worse, 30 s before leaving a relay that gains
// less than half the threshold for the direct path),
// 3 s of settling, at most one unforced switch per destination every 10 s,
// 1 ms of cost per 1 % of loss, and links losing half their probes
// excluded.
func DefaultConfig() Config {
	return Config{
		MaxHops: 3,
		// Both parts sit at three quarters of the oracle bound's,
		// max(0.5 ms, 2 %) (docs/routing.md).
		MinGain:      375 * time.Microsecond,
		GainFraction: 0.015,
		Hold:         300 * time.Millisecond,
		CollapseHold: 0,
		NearTieHold:  12 * time.Second,
		NoiseMargin:  2,
		DirectHold:   30 * time.Second,
		Settle:       3 * time.Second,
		// A link oscillating around the switching threshold would
		// otherwise move a route at every swing; ZeroTier waits 15 s.
		MinSwitchInterval: 10 * time.Second,
		ReturnHold:        10 * time.Second,
		ReturnWindow:      time.Minute,
		HoldMargin:        500 * time.Microsecond,
		Weights:           DefaultWeights(),
		Bulk:              DefaultBulkConfig(),
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.MaxHops < 1 || c.MaxHops > wire.MaxPath:
		return fmt.Errorf("routing: max hops %d not in 1..%d", c.MaxHops, wire.MaxPath)
	case c.MinGain < 0 || c.GainFraction < 0 || c.GainFraction >= 1 || c.NoiseMargin < 0:
		return errors.New("routing: switching gain and noise margin must be non-negative and the fraction below 1")
	case c.Hold < 0 || c.CollapseHold < 0 || c.NearTieHold < 0 || c.DirectHold < 0 || c.Settle < 0 || c.MinSwitchInterval < 0 || c.ReturnHold < 0 || c.ReturnWindow < 0 || c.HoldMargin < 0 || c.HoldMargin > time.Millisecond:
		return errors.New("routing: negative hold, settle, damping or return time, or a hold margin outside 0..1 ms")
	case c.Weights.Recovery < 0 || c.Weights.LossFloor < 0 || c.Weights.LossFloor > 1 || c.Weights.MaxLoss < 0 || c.Weights.MaxLoss > 1:
		return errors.New("routing: loss recovery time must be non-negative, and loss floor and max loss in 0..1")
	case c.Bulk.Bound < 0 || c.Bulk.BoundFraction < 0 || c.Bulk.BoundFraction > 10:
		return errors.New("routing: bulk latency bound must be non-negative and its fraction in 0..10")
	case c.Bulk.Enabled && c.Bulk.MinGain < 1:
		return errors.New("routing: bulk minimum throughput gain must be at least 1")
	}
	return nil
}

// DefaultWeights charges loss at 200 ms per lost packet (Linux's minimum
// TCP retransmission timeout: what a lost request of a request-response
// flow waits), above a floor of 2 %, and excludes links surely losing a
// quarter of their packets.
func DefaultWeights() Weights {
	return Weights{Recovery: 200 * time.Millisecond, LossFloor: 0.02, MaxLoss: 0.25}
}

// Errors returned by operator overrides.
var (
	ErrBadPath = errors.New("routing: pinned path must be non-empty, end at the destination, not contain this site and not repeat a site")
)

// Switch records a route change.
type Switch struct {
	At       time.Time
	From, To []wire.SiteID
	Reason   string
}

// dest is the per-destination selection state.
type dest struct {
	path         []wire.SiteID
	pinned       bool
	since        time.Time
	firstSeen    time.Time
	pendingHold  time.Duration // how long the pending gain must last
	pendingSince time.Time     // a better path has been better since then
	collapsed    bool          // the current path had collapsed at the last selection (collapsed)
	directSince  time.Time     // the relayed path has not earned its relays since then
	lastSwitch   time.Time
	switches     int
	prevPath     []wire.SiteID
	prevDelay    time.Duration
	bestCost     time.Duration // the lowest cost of path since it was installed
	leftPath     []wire.SiteID // the path before the last switch, if it died or got worse
	leftAt       time.Time     // when it was left
	leftBest     time.Duration // the bestCost leftPath had then
	// leftCollapsed says that leftPath was left because it collapsed,
	// bulkMovedAt when this site's data path last moved a flow to bulk
	// (BulkMoved), and excused that the pending switch is a return that
	// excuse allows undamped.
	leftCollapsed bool
	bulkMovedAt   time.Time
	excused       bool
	last          Switch
	// backup is the best path avoiding the suspect links and sites while
	// path is in doubt, nil otherwise.
	backup []wire.SiteID
	// bulk is the bulk path (nil: bulk flows take path), chosen at
	// bulkSwitch for bulkReason, on the bottleneck
	// rates bulkRate and, for path, bulkPathRate (bulk.go).
	bulk                   []wire.SiteID
	bulkSwitch             time.Time
	bulkReason             string
	bulkRate, bulkPathRate float64
	// lostBulk is the bulk path that died or lost its rate at lostBulkAt,
	// with the bulk flows on it; nil when there is none to go back to.
	lostBulk   []wire.SiteID
	lostBulkAt time.Time
}

// Router selects the routes of one site and keeps the hysteresis state.
type Router struct {
	cfg       Config
	self      wire.SiteID
	dests     map[wire.SiteID]*dest
	pins      map[wire.SiteID][]wire.SiteID
	forbidden map[wire.SiteID]bool
	version   uint64
	table     *Table
	tableKey  map[wire.SiteID]tableEntry
	addrs     map[wire.SiteID]netip.AddrPort
	dirty     bool
	matrix    *Matrix
	// deadline is NextDeadline's answer, good while deadlineOK (until
	// the next Update).
	deadline   time.Time
	deadlineOK bool
	// doubt holds, during an Update, the sites that a suspect link leads
	// to from this site (maybe dead: never relay through them), and
	// spare the best paths on the matrix without suspect links.
	doubt map[wire.SiteID]bool
	spare map[wire.SiteID][]wire.SiteID
}

type tableEntry struct {
	path     []wire.SiteID // copies, so that a path changed in place still differs
	backup   []wire.SiteID
	bulk     []wire.SiteID
	delay    time.Duration
	direct   time.Duration // the direct link's delay, shown beside the path
	directUp bool
}

// NewRouter returns a router for site self. cfg must be valid.
func NewRouter(cfg Config, self wire.SiteID) *Router {
	r := &Router{cfg: cfg, self: self, dests: map[wire.SiteID]*dest{}, pins: map[wire.SiteID][]wire.SiteID{},
		forbidden: map[wire.SiteID]bool{}, addrs: map[wire.SiteID]netip.AddrPort{}}
	r.table = NewTable(0, self, nil, nil)
	return r
}

// Table returns the current snapshot.
func (r *Router) Table() *Table { return r.table }

// Config returns the router's configuration.
func (r *Router) Config() Config { return r.cfg }

// Pin forces the path to dst (receivers in order, ending at dst). A pinned
// path is used while all its links are up; when one is down, normal
// selection applies until it is back.
func (r *Router) Pin(dst wire.SiteID, path []wire.SiteID) error {
	if len(path) == 0 || len(path) > wire.MaxPath || path[len(path)-1] != dst || slices.Contains(path, r.self) {
		return ErrBadPath
	}
	for i, id := range path {
		if id == 0 || slices.Contains(path[:i], id) {
			return ErrBadPath
		}
	}
	r.pins[dst] = slices.Clone(path)
	r.dirty = true
	return nil
}

// Unpin removes the pin of dst.
func (r *Router) Unpin(dst wire.SiteID) { delete(r.pins, dst); r.dirty = true }

// Pins returns a copy of the pinned paths.
func (r *Router) Pins() map[wire.SiteID][]wire.SiteID {
	out := make(map[wire.SiteID][]wire.SiteID, len(r.pins))
	for k, v := range r.pins {
		out[k] = slices.Clone(v)
	}
	return out
}

// ForbidRelay stops using site as a relay (routes through it switch at
// once); AllowRelay lifts that.
func (r *Router) ForbidRelay(site wire.SiteID) { r.forbidden[site] = true; r.dirty = true }

// AllowRelay lifts ForbidRelay.
func (r *Router) AllowRelay(site wire.SiteID) { delete(r.forbidden, site); r.dirty = true }

// Forbidden returns the sites forbidden as relays, sorted.
func (r *Router) Forbidden() []wire.SiteID {
	out := make([]wire.SiteID, 0, len(r.forbidden))
	for id := range r.forbidden {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (r *Router) noRelay(id wire.SiteID) bool { return r.forbidden[id] }

// threshold is the gain a path p needs over the current path: a fraction
// of p's one-way latency, at least MinGain.
func (r *Router) threshold(p Metrics) time.Duration {
	return max(r.cfg.MinGain, time.Duration(r.cfg.GainFraction*float64(p.OneWay)))
}

// switchGain is the gain the best path (metrics bm) needs over the
// current one (cm) once the estimates have settled: the threshold, and
// for a near tie NoiseMargin standard errors of the difference between
// the two paths' estimates beyond it, but never more than a near tie, so
// a clear gain is never held back. A near tie is taken only after
// NearTieHold, yet where the two paths' true difference lies within the
// noise of the threshold, jitter makes it read above the threshold for a
// whole hold sooner or later: the route would then change on noise,
// after minutes of stability. The margin asks the gain to stand out of
// that noise. The links' errors are taken as independent, so a link the
// two paths share adds to the margin what it cancels from the gain.
func (r *Router) switchGain(cm, bm Metrics) time.Duration {
	th := r.threshold(bm)
	return max(th, min(th+r.noise(cm, bm), r.nearTie(bm)))
}

// noise is NoiseMargin standard errors of the difference between the
// estimates of two paths of metrics a and b.
func (r *Router) noise(a, b Metrics) time.Duration {
	return time.Duration(r.cfg.NoiseMargin * math.Sqrt(a.noiseVar+b.noiseVar))
}

// nearTie is the gain below which a switch to the path of metrics best is
// a near tie: twice the threshold, capped at nearTieFraction of the
// path's one-way latency, and at least nearTieFloor.
func (r *Router) nearTie(best Metrics) time.Duration {
	return max(nearTieFloor, min(2*r.threshold(best), time.Duration(nearTieFraction*float64(best.OneWay))))
}

// usable checks that a path still works and obeys the relay policy.
func (r *Router) usable(m *Matrix, p []wire.SiteID) (Metrics, bool) {
	for _, id := range p[:len(p)-1] {
		if r.forbidden[id] {
			return Metrics{}, false
		}
	}
	return m.Measure(r.cfg.Weights, r.self, p)
}

// Update recomputes the routes on matrix m (live members and usable links)
// at now, with addrs the underlay addresses of the live members. It returns
// the switches made and publishes a new Table if anything changed.
func (r *Router) Update(now time.Time, m *Matrix, addrs map[wire.SiteID]netip.AddrPort) []Switch {
	r.matrix, r.deadlineOK = m, false
	best := m.ShortestPaths(r.cfg.Weights, r.self, r.cfg.MaxHops, r.noRelay)
	r.spareRoutes(m)
	rates := r.cfg.Bulk.Enabled && m.HasRates()
	var switches []Switch
	for id := range r.dests {
		if _, ok := best[id]; !ok {
			delete(r.dests, id) // unreachable: forget, including settling
			r.dirty = true
		}
	}
	for _, id := range m.Sites() {
		bp, ok := best[id]
		if id == r.self || !ok {
			continue
		}
		if s, ok := r.selectRoute(now, m, id, bp); ok {
			switches = append(switches, s)
		}
		r.setBackup(m, id)
		if rates {
			r.selectBulk(now, m, id, r.dests[id])
		} else {
			r.noBulk(r.dests[id])
		}
	}
	if !maps.Equal(r.addrs, addrs) {
		r.addrs = maps.Clone(addrs)
		r.dirty = true
	}
	r.publish(now, m)
	return switches
}

// selectRoute runs the selection for one destination with best path bp.
func (r *Router) selectRoute(now time.Time, m *Matrix, id wire.SiteID, bp []wire.SiteID) (Switch, bool) {
	d := r.dests[id]
	if d == nil {
		d = &dest{firstSeen: now}
		r.dests[id] = d
	}
	if d.path != nil {
		if cm, ok := m.Measure(r.cfg.Weights, r.self, d.path); ok {
			d.bestCost = min(d.bestCost, cm.Cost)
		}
	}
	if pin, ok := r.pins[id]; ok {
		if _, ok := m.Measure(r.cfg.Weights, r.self, pin); ok {
			if !d.pinned || !slices.Equal(d.path, pin) {
				return r.install(now, d, pin, installPin, "pinned by operator"), true
			}
			return Switch{}, false
		}
	}
	bm, _ := m.Measure(r.cfg.Weights, r.self, bp)
	if d.path == nil {
		if _, ok := r.directTie(m, id, bp, bm, false); ok {
			return r.install(now, d, []wire.SiteID{id}, installUndamped, "first route (the best relay gains less than half the threshold)"), true
		}
		return r.install(now, d, bp, installUndamped, "first route"), true
	}
	cm, ok := r.usable(m, d.path)
	if !ok || d.pinned {
		// An operator's pin coming or going is not a flap: it starts
		// no damping interval, so the best path is followed at once
		// after an unpin even if the estimates are still catching up.
		reason, kind := "current path died", installDamped
		if d.pinned {
			reason, kind = "pin removed or pinned path down", installUndamped
		}
		return r.install(now, d, bp, kind, reason), true
	}
	if slices.Equal(d.path, bp) {
		d.pendingSince = time.Time{}
		return r.preferDirect(now, m, d, id, cm)
	}
	gain := cm.Cost - bm.Cost
	if r.settling(now, m, d, bp) {
		// While the estimates fill in, a clear gain is taken at once, but
		// not a tie: changing between paths a few microseconds apart
		// gains nothing and may reorder packets.
		if gain >= r.threshold(bm) {
			return r.install(now, d, bp, installUndamped, fmt.Sprintf("settling: better by %v", gain)), true
		}
		return r.preferDirect(now, m, d, id, cm)
	}
	if gain < r.gainNeeded(now, d, bp, cm, bm) || r.inDoubt(m, bp) {
		d.pendingSince = time.Time{}
		return r.preferDirect(now, m, d, id, cm)
	}
	d.directSince = time.Time{}
	if d.pendingSince.IsZero() {
		d.pendingSince = now
	}
	d.pendingHold = r.holdFor(gain, bm)
	d.collapsed = r.collapsed(d, cm)
	d.excused = r.excuse(d, bp)
	if d.collapsed && d.pendingHold <= r.cfg.Hold {
		// Not for a near tie, which holds NearTieHold: a collapsed
		// path that only just lost has not lost much.
		d.pendingHold = min(d.pendingHold, r.cfg.CollapseHold)
	}
	if r.returning(now, d, bp) {
		d.pendingHold = max(d.pendingHold, r.cfg.ReturnHold)
	}
	if now.Sub(d.pendingSince) < d.pendingHold {
		return Switch{}, false
	}
	if r.damped(now, d) && !d.collapsed && !d.excused {
		return Switch{}, false
	}
	reason := fmt.Sprintf("better by %v for %v", gain.Round(time.Microsecond), now.Sub(d.pendingSince))
	if d.collapsed {
		reason = fmt.Sprintf("%s %v above its best: %s", CollapseReason, (cm.Cost - d.bestCost).Round(time.Microsecond), reason)
	}
	if d.excused {
		reason = fmt.Sprintf("back to the path its own bulk flows had filled (they left it %v from its collapse): %s", d.bulkMovedAt.Sub(d.leftAt).Round(time.Millisecond), reason)
	}
	return r.install(now, d, bp, installDamped, reason), true
}

// directTie reports whether the relayed path p (metrics pm) to dst gains
// less than half the switching threshold over the direct path, and returns
// by how much it does (negative when the direct path is better). Such a
// relay does not earn its keep: it costs a relay's CPU and bandwidth and
// one more site to fail for a gain within the noise of the estimates, so
// the direct path is preferred. Taking half the threshold leaves a band
// (half the threshold to the threshold) where neither path replaces the
// other, so a route does not flap between the two. Once settled, the
// band widens by the noise margin on this side too (see switchGain): a
// relay whose true gain is near half the threshold would otherwise be
// read below it for a whole DirectHold sooner or later.
func (r *Router) directTie(m *Matrix, dst wire.SiteID, p []wire.SiteID, pm Metrics, settled bool) (time.Duration, bool) {
	if len(p) < 2 {
		return 0, false
	}
	direct := []wire.SiteID{dst}
	dm, ok := r.usable(m, direct)
	if !ok || r.inDoubt(m, direct) {
		return 0, false
	}
	adv := dm.Cost - pm.Cost
	lim := r.threshold(pm) / 2
	if settled {
		lim -= r.noise(dm, pm)
	}
	return adv, adv < lim
}

// preferDirect moves d from its relayed path (metrics cm) to the direct
// path to dst when the relay has gained less than half the threshold for
// DirectHold (at once while settling), as directTie explains. It is
// called when no clearly better path is pending.
func (r *Router) preferDirect(now time.Time, m *Matrix, d *dest, dst wire.SiteID, cm Metrics) (Switch, bool) {
	settling := r.settling(now, m, d, []wire.SiteID{dst})
	adv, tie := r.directTie(m, dst, d.path, cm, !settling)
	if !tie {
		d.directSince = time.Time{}
		return Switch{}, false
	}
	if settling {
		return r.install(now, d, []wire.SiteID{dst}, installUndamped, fmt.Sprintf("settling: the relay gains only %v over the direct path", adv.Round(time.Microsecond))), true
	}
	if d.directSince.IsZero() {
		d.directSince = now
	}
	if now.Sub(d.directSince) < r.cfg.DirectHold || r.damped(now, d) {
		return Switch{}, false
	}
	reason := fmt.Sprintf("the relay gained only %v over the direct path for %v", adv.Round(time.Microsecond), now.Sub(d.directSince).Round(time.Millisecond))
	return r.install(now, d, []wire.SiteID{dst}, installDamped, reason), true
}

// settling reports whether the route of d is still settling at now: its
// destination became reachable less than Settle ago, or a link of its
// current path or of the candidate path p is Settling. While it is, a
// clear gain is taken at once and starts no damping.
func (r *Router) settling(now time.Time, m *Matrix, d *dest, p []wire.SiteID) bool {
	return now.Sub(d.firstSeen) < r.cfg.Settle || m.pathSettling(r.self, d.path) || m.pathSettling(r.self, p)
}

// holdFor is how long a gain must last before a switch: Hold for a clear
// gain, NearTieHold for a near tie, one that measurement noise between two
// nearly equal paths could produce: below twice the threshold and below
// the 2 % that would make the current path one a user calls worse (the
// oracle bound), but never below nearTieFloor.
func (r *Router) holdFor(gain time.Duration, best Metrics) time.Duration {
	if gain < r.nearTie(best) {
		return max(r.cfg.NearTieHold, r.cfg.Hold)
	}
	return r.cfg.Hold
}

// collapsed reports whether the current path of d, of metrics cm, got
// worse than its best since it was installed by far more than estimates
// move by noise: by CollapseFloor or four switching thresholds, whichever
// is more. That is an event on the path (a queue filling under a flow,
// the underlay rerouted), not a flap around a tie, and flap damping does
// not keep the route on it: the better path is taken after
// CollapseHold. Going back is what ReturnHold governs, so a load that
// comes and goes moves the route at most once each way per ReturnHold.
func (r *Router) collapsed(d *dest, cm Metrics) bool {
	return cm.Cost-d.bestCost >= max(CollapseFloor, 4*r.threshold(cm))
}

// CollapseReason starts the reason of a switch away from a collapsed
// path.
const CollapseReason = "current path collapsed,"

// CollapseFloor is the least rise of a path's cost that collapsed takes
// for an event: well above the noise of a settled estimate (tenths of a
// millisecond under 1 ms of jitter, docs/routing.md).
const CollapseFloor = 2 * time.Millisecond

// gainNeeded is the gain over the current path, of metrics cm, that a
// switch to bp, of metrics bm, needs: switchGain, or any gain at all for
// a path that restores.
func (r *Router) gainNeeded(now time.Time, d *dest, bp []wire.SiteID, cm, bm Metrics) time.Duration {
	if r.restores(now, d, bp, bm) {
		return time.Nanosecond
	}
	return r.switchGain(cm, bm)
}

// restores reports whether bp, of metrics bm, is the path d left because
// it died or got worse (returning), now back within twice the switching
// threshold of its best cost before that (the rise that install took for
// a change). The switch away was an escape from an event on bp, not a
// choice between two good paths; once the event is over, hysteresis does
// not keep the route on the path it escaped to, which may be a little
// slower than bp although the estimates put them within the threshold.
// ReturnHold still applies.
func (r *Router) restores(now time.Time, d *dest, bp []wire.SiteID, bm Metrics) bool {
	return r.returning(now, d, bp) && bm.Cost-d.leftBest < 2*r.threshold(bm)
}

// returning reports whether p is a path that d left because it got worse,
// less than ReturnWindow ago.
func (r *Router) returning(now time.Time, d *dest, p []wire.SiteID) bool {
	return d.leftPath != nil && now.Sub(d.leftAt) < r.cfg.ReturnWindow && slices.Equal(p, d.leftPath) && !r.excuse(d, p)
}

// BulkMoved tells the router that the data path has just (at now) moved
// a flow to dst into the bulk class (datapath.Stats.BulkMoves): its
// packets leave the route's path for the bulk path, if there is one.
func (r *Router) BulkMoved(now time.Time, dst wire.SiteID) {
	if d := r.dests[dst]; d != nil {
		d.bulkMovedAt = now
		r.deadlineOK = false
	}
}

// BulkExcuseWindow is how close to the collapse of a path a flow moving
// to bulk must be for excuse.
const BulkExcuseWindow = 2 * time.Second

// excuse reports whether a switch of d to p is a return to the path d left
// because it collapsed, within BulkExcuseWindow of a flow of this site
// moving to bulk. A flow becomes bulk by sending much, so the queue it
// filled on the fastest path is often what collapsed that path, and the
// flow has now left it: the path is expected back as soon as its queue
// drains. Neither the return hold (meant for external loads that pause
// and resume) nor flap damping holds such a return; a path that stays
// loaded is not better and is not returned to, and a later collapse, far
// from a class change, is held as usual.
func (r *Router) excuse(d *dest, p []wire.SiteID) bool {
	if !d.leftCollapsed || d.bulkMovedAt.IsZero() || !slices.Equal(p, d.leftPath) {
		return false
	}
	gap := d.bulkMovedAt.Sub(d.leftAt)
	return gap <= BulkExcuseWindow && gap >= -BulkExcuseWindow
}

// damped reports whether flap damping still forbids an unforced switch of
// d at now.
func (r *Router) damped(now time.Time, d *dest) bool {
	return r.cfg.MinSwitchInterval > 0 && !d.lastSwitch.IsZero() && now.Sub(d.lastSwitch) < r.cfg.MinSwitchInterval
}

// nearTieFraction caps a near tie at 2 % of the path's one-way latency,
// the bound within which a path counts as the best (docs/routing.md).
const nearTieFraction = 0.02

// nearTieFloor is the smallest gain that is not a near tie: the noise of
// the estimates of two paths of several links each reaches a few tenths
// of a millisecond per link (docs/routing.md).
const nearTieFloor = time.Millisecond

// installKind says how a path is installed.
type installKind int

const (
	// installDamped starts the flap-damping interval: an unforced
	// switch, or one away from a path that died.
	installDamped installKind = iota
	// installUndamped starts none: first routes, settling, and an
	// operator's pin going away, none of which is a flap.
	installUndamped
	// installPin installs an operator's pin, undamped.
	installPin
)

// install makes p the path of d, as kind says.
func (r *Router) install(now time.Time, d *dest, p []wire.SiteID, kind installKind, reason string) Switch {
	s := Switch{At: now, From: d.path, To: slices.Clone(p), Reason: reason}
	d.prevPath, d.prevDelay = nil, 0
	if d.path != nil {
		d.switches++
		d.leftPath, d.leftAt, d.leftCollapsed = nil, now, d.collapsed
		pm, ok := r.matrix.Measure(r.cfg.Weights, r.self, d.path)
		if ok {
			d.prevPath, d.prevDelay = d.path, pm.Delay+r.cfg.HoldMargin
		}
		// It died, or got worse than its best since it was installed by
		// twice the switching threshold (the best of noisy estimates is
		// biased low, so a smaller rise is not taken as a change). The
		// switches of the settling period only sort out first estimates.
		if settled := !r.settling(now, r.matrix, d, p); settled && (!ok || pm.Cost-d.bestCost >= 2*r.threshold(pm)) {
			d.leftPath, d.leftBest = d.path, d.bestCost
		}
	}
	d.path, d.pinned, d.since = s.To, kind == installPin, now
	d.bestCost = time.Duration(math.MaxInt64)
	if nm, ok := r.matrix.Measure(r.cfg.Weights, r.self, d.path); ok {
		d.bestCost = nm.Cost
	}
	if kind == installDamped {
		d.lastSwitch = now
	}
	d.pendingSince, d.directSince, d.collapsed, d.excused = time.Time{}, time.Time{}, false, false
	d.last = s
	r.dirty = true
	return s
}

// NextDeadline returns the earliest time a pending switch may happen (zero
// if none is pending), so that the caller can tick then.
func (r *Router) NextDeadline() time.Time {
	if !r.deadlineOK {
		r.deadline, r.deadlineOK = r.computeDeadline(), true
	}
	return r.deadline
}

// computeDeadline is NextDeadline, looking at every destination; only
// Update changes what it depends on.
func (r *Router) computeDeadline() time.Time {
	var t time.Time
	for _, d := range r.dests {
		var at time.Time
		switch {
		case !d.pendingSince.IsZero():
			hold := d.pendingHold
			if hold == 0 {
				hold = r.cfg.Hold
			}
			at = d.pendingSince.Add(hold)
		case !d.directSince.IsZero():
			at = d.directSince.Add(r.cfg.DirectHold)
		default:
			continue
		}
		if r.cfg.MinSwitchInterval > 0 && !d.lastSwitch.IsZero() && !d.collapsed && !d.excused {
			at = maxTime(at, d.lastSwitch.Add(r.cfg.MinSwitchInterval))
		}
		if t.IsZero() || at.Before(t) {
			t = at
		}
	}
	return t
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
