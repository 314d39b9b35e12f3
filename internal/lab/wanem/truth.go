package wanem

import (
	"time"

	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// LinkTruth is the ground truth of one directed link: what is configured
// and what packets actually experience.
type LinkTruth struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Configured properties.
	DelayMS  float64 `json:"delay_ms"`
	JitterMS float64 `json:"jitter_ms"`
	LossPct  float64 `json:"loss_pct"`
	Rate     string  `json:"rate"`
	RateBPS  uint64  `json:"rate_bps"`
	// QueueMS is the link's queueing delay right now.
	QueueMS float64 `json:"queue_ms"`
	// QueueOnset is when the latest load on the link began to queue
	// (Link.Onset; omitted if there was none).
	QueueOnset *time.Time `json:"queue_onset,omitempty"`
	// ExpectedMS is the one-way delay a small packet entering the link now
	// would get without jitter: configured delay + current queueing.
	ExpectedMS float64 `json:"expected_ms"`
	// MeasuredMS is the one-way delay packets actually got (write time
	// minus read time in the emulator, including queueing and access
	// links), averaged with a 200 ms time constant; LastMS is the last
	// packet's. Both are zero until a packet has crossed the link.
	MeasuredMS float64 `json:"measured_ms"`
	LastMS     float64 `json:"last_ms"`
	// SampleAgeMS is how long ago the last packet crossed the link.
	SampleAgeMS float64 `json:"sample_age_ms"`
	Delivered   uint64  `json:"delivered"`
	Lost        uint64  `json:"lost"`
	QueueDrops  uint64  `json:"queue_drops"`
	// Late counts packets the emulator wrote more than 1 ms after they
	// were due (its own stalls).
	Late uint64 `json:"late"`
}

// Truth is the ground truth of every directed link.
type Truth struct {
	UptimeS    float64     `json:"uptime_s"`
	Links      []LinkTruth `json:"links"`
	Unroutable uint64      `json:"unroutable"`
	// WriteErrors counts the packets the emulator could not write to
	// their destination's port.
	WriteErrors uint64 `json:"write_errors"`
	// WakeLateUS is how late, on average over the sites, the kernel wakes
	// the emulator's schedulers after a timed sleep; the schedulers sleep
	// that much less, so it does not add to the emulated delays.
	WakeLateUS float64 `json:"wake_late_us"`
}

func nsToMS(d float64) float64 { return float64(int64(d/1e3)) / 1e3 }

// Truth reports every directed link, in site order.
func (e *Emulator) Truth() Truth {
	now := e.clock()
	t := Truth{UptimeS: e.Uptime().Seconds(), Unroutable: e.unroutable.Load(), WriteErrors: e.writeErrs.Load()}
	for _, s := range e.sched {
		t.WakeLateUS += float64(s.lateNS.Load()) / 1e3 / float64(len(e.sched))
	}
	for a, row := range e.links {
		for b, ls := range row {
			if ls != nil {
				t.Links = append(t.Links, e.linkTruth(a, b, ls, now))
			}
		}
	}
	return t
}

func (e *Emulator) linkTruth(a, b int, ls *linkState, now int64) LinkTruth {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	p := ls.link.Props()
	lt := LinkTruth{
		From: e.sc.Sites[a].Name, To: e.sc.Sites[b].Name,
		DelayMS: durMS(p.Delay), JitterMS: durMS(p.Jitter), LossPct: p.Loss * 100,
		Rate: p.Rate.String(), RateBPS: uint64(p.Rate),
		QueueMS:    durMS(ls.link.Backlog(now)),
		ExpectedMS: durMS(ls.link.Backlog(now) + p.Delay),
		Delivered:  ls.delivered, Lost: ls.link.Lost, QueueDrops: ls.link.QueueDrops + ls.downDrops, Late: ls.late,
	}
	if at, ok := ls.link.Onset(); ok {
		t := monoTime(e.start, at)
		lt.QueueOnset = &t
	}
	if ls.delivered > 0 {
		lt.MeasuredMS, lt.LastMS = nsToMS(ls.ewma), nsToMS(ls.lastDelay)
		lt.SampleAgeMS = durMS(time.Duration(now - ls.lastAt))
	}
	return lt
}

func durMS(d time.Duration) float64 { return nsToMS(float64(d)) }

// Props returns the current properties of the link a->b.
func (e *Emulator) Props(a, b int) scenario.LinkProps {
	ls := e.links[a][b]
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.link.Props()
}
