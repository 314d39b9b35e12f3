// Package history keeps a bounded record of what an agent saw: each link's
// one-way delay, loss and state over the last hour, and the last route
// changes with their reasons. The API serves it (the map page's charts and
// timeline, `detour links --history`).
//
// A link's record is two rings of 4-byte points: one point a second for
// the last ten minutes, and one point per ten seconds (the mean delay of
// the seconds the link was up, the largest loss) for the fifty minutes
// before: 900 points, 3.6 KB a link, 10.4 MB for the 2,862 directed links
// of 54 sites. The recorder takes the time as an argument; a ticker outside
// calls Record once a second.
package history

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Sizes of the two rings and the width of a coarse point.
const (
	FineSpan    = 10 * time.Minute
	CoarseSpan  = time.Hour
	CoarseWidth = 10 * time.Second
	finePoints  = int(FineSpan / time.Second)
	coarseEvery = int(CoarseWidth / time.Second)
	coarsePts   = int((CoarseSpan - FineSpan) / CoarseWidth)
	// MaxEvents is how many route changes are kept.
	MaxEvents = 1000
)

// A point's delay is kept in units of 10 µs, plus one: zero marks a second
// the link was down or not measured (so a new record starts unknown), and
// maxDelay saturates (655 ms).
const (
	delayUnit = 10 * time.Microsecond
	maxDelay  = math.MaxUint16
	lossUnit  = 0.01 // per cent
)

// point is one second (or ten) of one link.
type point struct {
	delay uint16 // 1 + one-way delay in delayUnit, or 0 for unknown
	loss  uint16 // loss in lossUnit per cent
}

func (p point) up() bool { return p.delay != 0 }

// Link is one directed link's state at one moment, as Record takes it.
type Link struct {
	From, To string
	Up       bool
	OneWayMs float64
	LossPct  float64
}

// Sample is one point of a link's record, as Series returns it.
type Sample struct {
	At       time.Time `json:"at"`
	Seconds  int       `json:"seconds"` // the span the point covers, 1 to 10
	Up       bool      `json:"up"`
	OneWayMs float64   `json:"one_way_ms,omitempty"`
	LossPct  float64   `json:"loss_pct"`
}

// Event is one route change of this site.
type Event struct {
	Seq    uint64    `json:"seq"`
	At     time.Time `json:"at"`
	Dest   string    `json:"dest"`
	From   []string  `json:"from"` // the old path, empty when there was none
	To     []string  `json:"to"`   // the new path, empty when there is none
	Reason string    `json:"reason"`
}

// series is one link's record. Second sec is in fine[sec%finePoints] while
// it is among the last ten minutes; when it leaves, it is added to the
// coarse point of its ten seconds, coarse[(sec/10)%coarsePts].
type series struct {
	fine   [finePoints]point
	coarse [coarsePts]point
	// The coarse point being built.
	accSum  float64
	accUp   int
	accN    int
	accLoss uint16
}

type key struct{ from, to string }

// Recorder is the record of every link and of the route changes. It is
// safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	start  time.Time
	last   int // the last second recorded, -1 before the first
	links  map[key]*series
	events []Event
	seq    uint64
}

// New returns a recorder whose seconds count from start.
func New(start time.Time) *Recorder {
	return &Recorder{start: start, last: -1, links: map[key]*series{}}
}

// Record stores the links' state at now as the point of now's second.
// Seconds skipped since the last call are stored as unknown, for every
// link; a second already recorded is not recorded again.
func (r *Recorder) Record(now time.Time, links []Link) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sec := int(now.Sub(r.start) / time.Second)
	if sec <= r.last {
		return
	}
	from := max(r.last+1, sec-finePoints-coarsePts*coarseEvery)
	for _, s := range r.links {
		for gap := from; gap < sec; gap++ {
			s.put(gap, point{})
		}
	}
	seen := make(map[key]bool, len(links))
	for _, l := range links {
		k := key{l.From, l.To}
		seen[k] = true
		s := r.links[k]
		if s == nil {
			s = &series{} // unknown until now
			r.links[k] = s
		}
		s.put(sec, toPoint(l))
	}
	for k, s := range r.links {
		if !seen[k] {
			s.put(sec, point{})
		}
	}
	r.last = sec
}

func toPoint(l Link) point {
	p := point{loss: uint16(clamp(l.LossPct/lossUnit, maxDelay))}
	if l.Up {
		p.delay = uint16(clamp(l.OneWayMs*float64(time.Millisecond/delayUnit), maxDelay-1)) + 1
	}
	return p
}

// clamp rounds v into 0..hi, NaN to 0.
func clamp(v, hi float64) float64 {
	if !(v > 0) {
		return 0
	}
	return min(math.Round(v), hi)
}

// put stores the point of second sec; the second it replaces in the fine
// ring goes into its coarse point.
func (s *series) put(sec int, p point) {
	i := sec % finePoints
	if old := sec - finePoints; old >= 0 {
		s.accumulate(s.fine[i])
		if old%coarseEvery == coarseEvery-1 {
			s.coarse[(old/coarseEvery)%coarsePts] = s.flush()
		}
	}
	s.fine[i] = p
}

// accumulate adds a fine point to the coarse point being built.
func (s *series) accumulate(p point) {
	s.accN++
	s.accLoss = max(s.accLoss, p.loss)
	if p.up() {
		s.accUp++
		s.accSum += float64(p.delay - 1)
	}
}

// flush returns the coarse point built: the mean delay of its seconds up,
// the largest loss; and starts the next one.
func (s *series) flush() point {
	p := s.partial()
	s.accSum, s.accUp, s.accN, s.accLoss = 0, 0, 0, 0
	return p
}

// partial is the coarse point being built, as it stands.
func (s *series) partial() point {
	p := point{loss: s.accLoss}
	if s.accUp > 0 {
		p.delay = uint16(math.Round(s.accSum/float64(s.accUp))) + 1
	}
	return p
}

// Series returns the record of the link from → to, oldest first: a point
// per ten seconds for the hour before the last ten minutes, then a point a
// second. It reports false for a link never recorded.
func (r *Recorder) Series(from, to string) ([]Sample, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.links[key{from, to}]
	if !ok {
		return nil, false
	}
	firstFine := max(0, r.last-finePoints+1)
	done := firstFine / coarseEvery // the coarse points complete
	out := make([]Sample, 0, coarsePts+1+finePoints)
	for c := max(0, done-coarsePts); c < done; c++ {
		out = append(out, r.sample(s.coarse[c%coarsePts], c*coarseEvery, coarseEvery))
	}
	if n := firstFine - done*coarseEvery; n > 0 {
		out = append(out, r.sample(s.partial(), done*coarseEvery, n))
	}
	for sec := firstFine; sec <= r.last; sec++ {
		out = append(out, r.sample(s.fine[sec%finePoints], sec, 1))
	}
	return out, true
}

// sample returns point p of the seconds from sec as a Sample.
func (r *Recorder) sample(p point, sec, seconds int) Sample {
	sm := Sample{At: r.start.Add(time.Duration(sec) * time.Second), Seconds: seconds, Up: p.up(), LossPct: float64(p.loss) * lossUnit}
	if sm.Up {
		sm.OneWayMs = float64(time.Duration(p.delay-1)*delayUnit) / float64(time.Millisecond)
	}
	return sm
}

// Links returns the links recorded, sorted.
func (r *Recorder) Links() [][2]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([][2]string, 0, len(r.links))
	for k := range r.links {
		out = append(out, [2]string{k.from, k.to})
	}
	slices.SortFunc(out, func(a, b [2]string) int {
		return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
	})
	return out
}

// RouteChange records a route change and returns its sequence number.
func (r *Recorder) RouteChange(e Event) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	e.Seq = r.seq
	if len(r.events) == MaxEvents {
		r.events = slices.Delete(r.events, 0, 1)
	}
	r.events = append(r.events, e)
	return e.Seq
}

// Last returns the sequence number of the last route change recorded.
func (r *Recorder) Last() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// Events returns the route changes after sequence number since, oldest
// first.
func (r *Recorder) Events(since uint64) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, _ := slices.BinarySearchFunc(r.events, since+1, func(e Event, s uint64) int { return cmp.Compare(e.Seq, s) })
	return slices.Clone(r.events[i:])
}

// Bytes returns the memory the links' records take.
func (r *Recorder) Bytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.links) * int(unsafe.Sizeof(series{}))
}

// Summary is a link's last hour in a few numbers.
type Summary struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Seconds is the span recorded and UpSeconds the part the link was up.
	Seconds   int     `json:"seconds"`
	UpSeconds int     `json:"up_seconds"`
	MinMs     float64 `json:"min_ms"`
	MedianMs  float64 `json:"median_ms"`
	MaxMs     float64 `json:"max_ms"`
	MaxLoss   float64 `json:"max_loss_pct"`
}

// Summaries returns every link's summary, sorted by link.
func (r *Recorder) Summaries() []Summary {
	links := r.Links()
	out := make([]Summary, 0, len(links))
	for _, l := range links {
		samples, _ := r.Series(l[0], l[1])
		out = append(out, summarize(l[0], l[1], samples))
	}
	return out
}

func summarize(from, to string, samples []Sample) Summary {
	s := Summary{From: from, To: to}
	var delays []float64
	for _, sm := range samples {
		s.Seconds += sm.Seconds
		s.MaxLoss = max(s.MaxLoss, sm.LossPct)
		if sm.Up {
			s.UpSeconds += sm.Seconds
			delays = append(delays, sm.OneWayMs)
		}
	}
	if len(delays) > 0 {
		slices.Sort(delays)
		s.MinMs, s.MedianMs, s.MaxMs = delays[0], delays[len(delays)/2], delays[len(delays)-1]
	}
	return s
}
