package control

import "time"

// timers are the probe interval and the failure-detection times in force.
// They are the configured ones until the members outnumber what
// MaxProbeRate allows at ProbeInterval; then all three grow by the same
// factor, so a link is still suspected and declared down after the same
// number of missed probes.
//
// batch is the shortest time between two recomputations of the routes
// (refresh): 1 ms per member, between 5 and 50 ms. A refresh costs O(N²)
// and more with N sites, and without a batch interval it would run on
// every probe reply and report, hundreds of times a second at 50 sites.
// A node with a Stopwatch also keeps its refreshes within a share of the
// wall clock (Node.batch), so that a large overlay, or a machine too
// busy to give the agent the CPU it asks for, spaces them further.
//
// lsMin is the shortest time between two of this site's link-state
// reports: the configured one, or 10 ms per member if longer. Every site
// receives every report, so this bounds what each site receives to about
// 100 reports a second however many sites there are, even when a loaded
// network makes every measurement move.
type timers struct {
	probe, suspect, down time.Duration
	batch, lsMin         time.Duration
	members              int // the member count they were computed for
}

// scaleTimers recomputes the timers for the current number of members and
// hands the new down time to every link's estimator.
func (n *Node) scaleTimers() {
	count := 0
	for _, m := range n.members {
		if m.state != StateLeft {
			count++
		}
	}
	if count == n.timers.members && n.timers.probe != 0 {
		return
	}
	n.timers = scaledTimers(&n.cfg, count)
	for _, m := range n.members {
		m.link.SetDownAfter(n.downAfter(m))
	}
	n.orig.SetMinInterval(n.timers.lsMin)
}

// The bounds of the batch interval between two refreshes, and the
// link-state interval per member.
const (
	lsMinPerMember = 10 * time.Millisecond
	minBatch       = 5 * time.Millisecond
	maxBatch       = 50 * time.Millisecond
)

// scaledTimers returns the timers for members other sites under cfg.
func scaledTimers(cfg *Config, members int) timers {
	mb := maxBatch
	if cfg.Economy {
		mb = economyMaxBatch
	}
	t := timers{probe: cfg.ProbeInterval, suspect: cfg.SuspectAfter, down: cfg.DownAfter, members: members,
		batch: min(mb, max(minBatch, time.Duration(members)*time.Millisecond)),
		lsMin: max(cfg.LinkState.MinInterval, time.Duration(members)*lsMinPerMember)}
	rate := cfg.MaxProbeRate
	if cfg.Economy {
		rate = coldProbeRate
	}
	if rate <= 0 {
		return t
	}
	need := time.Duration(members) * time.Second / time.Duration(rate)
	if cfg.Economy {
		need = min(need, coldMaxInterval)
	}
	if need <= cfg.ProbeInterval {
		return t
	}
	need = need.Round(time.Millisecond)
	scale := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) * float64(need) / float64(cfg.ProbeInterval)).Round(time.Millisecond)
	}
	t.probe, t.suspect, t.down = need, scale(cfg.SuspectAfter), scale(cfg.DownAfter)
	return t
}

// refreshShare is the most of the wall clock route computations may take
// when the node has a Stopwatch: 1/20, 5 %. maxPacedBatch bounds the
// interval this spacing may ask for.
const (
	refreshShare  = 20
	maxPacedBatch = time.Second
)

// batch returns the shortest time between two refreshes in force: the
// member count's (timers.batch), or longer when the measured cost of a
// refresh calls for it (paced).
func (n *Node) batch() time.Duration {
	return max(n.timers.batch, min(maxPacedBatch, refreshShare*n.refreshCost))
}

// paced reports whether refreshes are spaced by their measured cost
// beyond the member count's interval. Route changes that wait for the
// next refresh then wait longer, so a link turning suspect or down
// refreshes at once instead.
func (n *Node) paced() bool { return n.batch() > n.timers.batch }

// timeRefresh folds the wall time of one refresh into the smoothed cost
// (an exponentially weighted mean over about eight refreshes).
func (n *Node) timeRefresh(d time.Duration) {
	d = max(d, 0)
	n.counters.RefreshMicros += uint64(d.Microseconds())
	if n.refreshCost == 0 {
		n.refreshCost = d
		return
	}
	n.refreshCost += (d - n.refreshCost) / 8
}

// DetectionTimes returns the probe interval and the link down time in
// force.
func (n *Node) DetectionTimes() (probe, down time.Duration) { return n.timers.probe, n.timers.down }
