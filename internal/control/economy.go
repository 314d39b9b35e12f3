package control

import (
	"math"
	"time"

	"github.com/detour-overlay/detour/internal/linkstate"
	"github.com/detour-overlay/detour/internal/wire"
)

// The measurement economy (Config.Economy; figures in docs/scaling.md).
//
// Probing. A member that relays one of this site's routes (on its path
// or its backup) is hot: it is probed every economyHot × ProbeInterval
// and suspected and declared down after economyHot × SuspectAfter and
// DownAfter (200 ms, 500 ms and 1 s by default), whatever the size of the
// overlay, so that the routes of a dead relay are covered within a
// second. (Every site that relays through a popular relay probes it: at
// the full ProbeInterval its replies made it the busiest site by far.) Every other member is probed at a rate that costs at most
// coldProbeRate probes a second in all, and at least once every
// coldMaxInterval: its link matters only if it changes by more than the
// routing margin, and the estimator follows a lasting change within
// three probes.
//
// Link state. Reports carry only the links that changed (by
// economyDeltaDelay or more, or in state, round trip or loss), each
// repeated in the next economyRepeats reports, and a share of the other
// links so that every link is sent again at least every full refresh
// interval (economyFullRefreshPerMember per member, at least
// economyFullRefreshMin). A report goes out at least every
// economyRefresh, which keeps it fresh at the receivers (they expire it
// after economyExpire). A member that becomes alive is sent the whole row
// at once.
const (
	economyHot      = 2
	coldProbeRate   = 100
	coldMaxInterval = time.Second

	economyDeltaDelay           = 400 * time.Microsecond
	economyRepeats              = 1
	economyRefresh              = 2 * time.Second
	economyExpire               = 7 * time.Second
	economyFullRefreshMin       = 30 * time.Second
	economyFullRefreshPerMember = 400 * time.Millisecond
)

// economyGossipPerMember stretches the gossip interval with the overlay
// (Economy): the member list grows with it, and a join is announced by
// hellos, not by gossip, which only repairs what they missed.
const economyGossipPerMember = 50 * time.Millisecond

// gossipInterval is the time between two member lists sent.
func (n *Node) gossipInterval() time.Duration {
	if !n.cfg.Economy {
		return n.cfg.GossipInterval
	}
	return max(n.cfg.GossipInterval, time.Duration(n.timers.members)*economyGossipPerMember)
}

// economyMaxBatch bounds the batch interval between two route
// computations (1 ms per member) with the economy: a computation costs
// O(N²) and more, and what a batch delays is a remote change; a local
// link turning suspect or down is routed around at once.
const economyMaxBatch = 250 * time.Millisecond

// economize returns cfg with the link-state settings of the economy.
func economize(cfg Config) Config {
	cfg.LinkState.Delta = true
	cfg.LinkState.DeltaDelay = economyDeltaDelay
	cfg.LinkState.Repeats = economyRepeats
	cfg.LinkState.Refresh = max(cfg.LinkState.Refresh, economyRefresh)
	cfg.LinkState.FullRefresh = economyFullRefreshMin
	cfg.ExpireAfter = max(cfg.ExpireAfter, economyExpire)
	return cfg
}

// probeInterval is the time between two probes to m.
func (n *Node) probeInterval(m *member) time.Duration {
	switch {
	case m.state == StateDown:
		return n.cfg.DownProbeInterval
	case n.cfg.Economy && m.hot:
		return economyHot * n.cfg.ProbeInterval
	}
	return n.timers.probe
}

// suspectAfter is how long m's link may miss replies before it is
// suspect (zero: never).
func (n *Node) suspectAfter(m *member) time.Duration {
	if n.cfg.Economy && m.hot {
		return economyHot * n.cfg.SuspectAfter
	}
	return n.timers.suspect
}

// downAfter is how long m's link may miss replies, and m be silent,
// before it is down.
func (n *Node) downAfter(m *member) time.Duration {
	if n.cfg.Economy && m.hot {
		return economyHot * n.cfg.DownAfter
	}
	return n.timers.down
}

// markHot makes hot the members that relay a route of this site (on its
// path or backup) and cold the others.
func (n *Node) markHot(now time.Time) {
	relays := map[wire.SiteID]bool{}
	for _, r := range n.router.Table().Routes() {
		for _, p := range [][]wire.SiteID{r.Path, r.Backup} {
			for _, id := range p[:max(len(p)-1, 0)] {
				relays[id] = true
			}
		}
	}
	for _, m := range n.members {
		if m.hot == relays[m.id] {
			continue
		}
		m.hot = relays[m.id]
		m.link.SetDownAfter(n.downAfter(m))
		n.timersMoved()
		if iv := n.probeInterval(m); m.nextProbe.After(now.Add(iv)) {
			m.nextProbe = now.Add(iv)
		}
	}
}

// originateDelta sends this site's link-state changes to every member
// when due, and the whole row to each member that became alive since it
// was last sent.
func (n *Node) originateDelta(now time.Time, links []linkstate.Link) {
	n.orig.SetFullRefresh(max(economyFullRefreshMin, time.Duration(n.timers.members)*economyFullRefreshPerMember))
	if n.orig.Due(now, links) {
		n.sendOwn(n.orig.BuildDelta(now, links))
	}
	var full [][]byte
	for _, m := range n.sortedMembers() {
		if m.state != StateAlive {
			m.rowSent = false
			continue
		}
		if m.rowSent {
			continue
		}
		if full == nil {
			for _, ls := range n.orig.Full(links) {
				b, err := buildLinkState(&ls)
				if err != nil {
					panic("control: own link state does not encode: " + err.Error())
				}
				full = append(full, b)
			}
		}
		for _, b := range full {
			n.emit(m.addr, b)
		}
		m.rowSent = true
	}
}

// drift estimates how fast the offset-shifted delay of a link moves with
// the two clocks' skew, from its offset part: the delay less half the
// round trip, o(self) − o(peer) plus a constant asymmetry, which a change
// of the link's delay in both directions leaves alone. It is the slope of
// a least-squares line through the offset part, sampled at most once a
// second, with weights that decay with age (time constant driftTau), so
// that the noise of single estimates averages out over minutes. A sample
// more than driftJump off the line (a one-way change of the delay, not
// skew) starts the line afresh; the slope found so far is kept until the
// new line spans driftMinSpan.
type drift struct {
	origin, last time.Time
	// Exponentially weighted sums of 1, x, x², y and x·y, with x the
	// seconds since origin and y the offset part in ns.
	s0, s1, s2, sy, sxy float64
	ppm                 float64
}

const (
	driftTau     = 120 * time.Second
	driftMinSpan = 20 * time.Second
	driftJump    = time.Millisecond
)

// update feeds the offset part measured now and returns the drift in
// whole ppm.
func (d *drift) update(now time.Time, off time.Duration) int {
	if !d.last.IsZero() && now.Sub(d.last) < time.Second {
		return int(math.Round(d.ppm))
	}
	if d.origin.IsZero() {
		d.origin = now
	}
	x, y := now.Sub(d.origin).Seconds(), float64(off)
	if d.s0 > 0 {
		if pred, ok := d.line(x); ok && math.Abs(y-pred) > float64(driftJump) {
			*d = drift{origin: now, ppm: d.ppm}
			x = 0
		}
	}
	if !d.last.IsZero() {
		k := math.Exp(-now.Sub(d.last).Seconds() / driftTau.Seconds())
		d.s0, d.s1, d.s2, d.sy, d.sxy = k*d.s0, k*d.s1, k*d.s2, k*d.sy, k*d.sxy
	}
	d.last = now
	d.s0, d.s1, d.s2, d.sy, d.sxy = d.s0+1, d.s1+x, d.s2+x*x, d.sy+y, d.sxy+x*y
	if v := d.s0*d.s2 - d.s1*d.s1; v > 0 && v/(d.s0*d.s0) >= driftMinSpan.Seconds()*driftMinSpan.Seconds()/12 {
		d.ppm = (d.s0*d.sxy - d.s1*d.sy) / v / 1e3 // ns a second; 1000 of them are 1 ppm
	}
	return int(math.Round(d.ppm))
}

// line returns the fitted offset part at x, once the line spans
// driftMinSpan.
func (d *drift) line(x float64) (float64, bool) {
	v := d.s0*d.s2 - d.s1*d.s1
	if v <= 0 || v/(d.s0*d.s0) < driftMinSpan.Seconds()*driftMinSpan.Seconds()/12 {
		return 0, false
	}
	b := (d.s0*d.sxy - d.s1*d.sy) / v
	a := (d.sy - b*d.s1) / d.s0
	return a + b*x, true
}

// smoothed averages a link's delay estimates over smoothTau, moved along
// by the drift between two estimates, so that a link probed once a second
// (five samples in the estimator's window) is reported and routed on with
// the noise of about four windows less: its reports then move past the
// delta threshold far less often, and near ties between a direct and a
// relayed path flap less. An estimate more than smoothJump from the
// average (a real change: the estimator follows one within three probes)
// is taken at once.
type smoothed struct {
	at time.Time
	v  time.Duration
}

const (
	smoothTau  = 10 * time.Second
	smoothJump = time.Millisecond
)

// update feeds the estimate est at now with the link's drift (ppm) and
// returns the average.
func (s *smoothed) update(now time.Time, est time.Duration, ppm int) time.Duration {
	if s.at.IsZero() || now.Before(s.at) {
		s.at, s.v = now, est
		return est
	}
	dt := now.Sub(s.at)
	pred := s.v + time.Duration(float64(dt)*float64(ppm)/1e6)
	if d := est - pred; d > smoothJump || d < -smoothJump {
		s.at, s.v = now, est
		return est
	}
	a := 1 - math.Exp(-dt.Seconds()/smoothTau.Seconds())
	s.at, s.v = now, pred+time.Duration(a*float64(est-pred))
	return s.v
}

// HotMembers returns how many members are probed at the full rate
// because they relay a route of this site (Economy; zero otherwise).
func (n *Node) HotMembers() int {
	k := 0
	for _, m := range n.members {
		if n.cfg.Economy && m.hot && m.state == StateAlive {
			k++
		}
	}
	return k
}
