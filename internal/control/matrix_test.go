package control

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/linkstate"
	"github.com/detour-overlay/detour/internal/wire"
)

// matrixScenario drives a node's link-state database through random
// reports (full and delta, links going up and down, loss, rates, clock
// drift), silences that make reports stale, vouches, and changes of the
// live set, and after each step compares the matrix the node keeps
// between computations with one built from nothing at the same moment.
type matrixScenario struct {
	t     *testing.T
	n     *Node
	rng   *rand.Rand
	ids   []wire.SiteID
	seq   map[wire.SiteID]uint32
	now   time.Time
	drift bool
}

func newMatrixScenario(t *testing.T, seed uint64, drift bool) *matrixScenario {
	n := newNode(t)
	s := &matrixScenario{t: t, n: n, rng: rand.New(rand.NewPCG(seed, 7)), seq: map[wire.SiteID]uint32{}, now: t0, drift: drift}
	s.ids = append(s.ids, n.self)
	for i := range 7 {
		s.ids = append(s.ids, wire.SiteIDFromName(fmt.Sprintf("site-%d", i)))
	}
	return s
}

// entry returns a random link entry towards to.
func (s *matrixScenario) entry(to wire.SiteID) wire.LinkEntry {
	e := wire.LinkEntry{Peer: to, RTT: uint32(1000 + s.rng.IntN(90000)), Jitter: uint16(s.rng.IntN(2000)),
		Delay: int64(time.Duration(s.rng.IntN(80000)) * time.Microsecond), LossSamples: uint16(s.rng.IntN(600))}
	if s.rng.IntN(5) > 0 {
		e.Flags = wire.LinkFlagUp
	}
	if s.rng.IntN(4) == 0 {
		e.Loss = uint16(s.rng.IntN(3000))
	}
	if s.drift && s.rng.IntN(2) == 0 {
		e.Drift = int8(s.rng.IntN(121) - 60)
	}
	if s.rng.IntN(3) == 0 {
		e.RevRate, e.RevRateKind = uint32(1000+s.rng.IntN(1e6)), wire.RateKindTrain
	}
	return e
}

// report applies a report of a random origin other than self: full, or a
// delta of a few links.
func (s *matrixScenario) report() {
	origin := s.ids[1+s.rng.IntN(len(s.ids)-1)]
	s.seq[origin]++
	ls := wire.LinkState{Origin: origin, Incarnation: 1, Seq: s.seq[origin], Rates: s.rng.IntN(2) == 0,
		Delta: s.rng.IntN(2) == 0}
	for _, to := range s.ids {
		if to != origin && (s.rng.IntN(3) > 0 || !ls.Delta) {
			ls.Entries = append(ls.Entries, s.entry(to))
		}
	}
	s.n.db.Apply(s.now, &ls)
}

// own replaces this site's own report.
func (s *matrixScenario) own() {
	var links []linkstate.Link
	for _, to := range s.ids[1:] {
		e := s.entry(to)
		links = append(links, linkstate.FromWire(s.n.self, &e))
	}
	s.n.db.SetOwn(s.now, s.n.self, 1, links)
}

// live returns the live sites: all, or all but one now and then.
func (s *matrixScenario) live() []wire.SiteID {
	live := append([]wire.SiteID(nil), s.ids...)
	if s.rng.IntN(10) == 0 {
		k := 1 + s.rng.IntN(len(live)-1)
		live = append(live[:k], live[k+1:]...)
	}
	s.rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	return live
}

// step moves time on and changes the database at random.
func (s *matrixScenario) step() {
	switch r := s.rng.IntN(20); {
	case r == 0:
		s.now = s.now.Add(s.n.cfg.ExpireAfter) // every report goes stale
	case r < 3:
		s.now = s.now.Add(time.Duration(s.rng.IntN(3000)) * time.Millisecond)
	default:
		s.now = s.now.Add(time.Duration(s.rng.IntN(300)) * time.Millisecond)
	}
	for range s.rng.IntN(4) {
		s.report()
	}
	if s.rng.IntN(4) == 0 {
		s.own()
	}
	if s.rng.IntN(4) == 0 {
		s.n.db.Vouch(s.ids[1+s.rng.IntN(len(s.ids)-1)], s.now)
	}
}

// check compares the kept matrix with one built from nothing.
func (s *matrixScenario) check(step int) {
	live := s.live()
	kept := s.n.matrix(s.now, live)
	saved := s.n.mx
	s.n.mx = matrixState{}
	fresh := s.n.matrix(s.now, live)
	s.n.mx = saved
	tolerance := time.Duration(0)
	if s.drift {
		tolerance = driftTolerance
	}
	for _, from := range live {
		for _, to := range live {
			a, okA := kept.Edge(from, to)
			b, okB := fresh.Edge(from, to)
			if okA != okB {
				s.t.Fatalf("step %d, %v → %v: kept has the link %v, built anew %v", step, from, to, okA, okB)
			}
			d := (a.Delay - b.Delay).Abs()
			a.Delay, b.Delay = 0, 0
			if d > tolerance || a != b {
				s.t.Fatalf("step %d, %v → %v: kept %+v (delay off by %v), built anew %+v", step, from, to, a, d, b)
			}
		}
	}
	if s.drift {
		return
	}
	w := s.n.cfg.Routing.Weights
	for _, src := range live {
		if a, b := kept.ShortestPaths(w, src, 3, nil), fresh.ShortestPaths(w, src, 3, nil); fmt.Sprint(a) != fmt.Sprint(b) {
			s.t.Fatalf("step %d: paths from %v on the kept matrix %v, on one built anew %v", step, src, a, b)
		}
	}
}

// TestKeptMatrixIsTheFreshOne: the routing matrix a node keeps between
// route computations, building only the rows whose report changed, holds
// the same links, estimates, rates and paths as one built from every
// report at the same moment, through reports full and delta, stale and
// fresh again, settling links, and changes of the live set; with clock
// drift, delays differ by driftTolerance at most.
func TestKeptMatrixIsTheFreshOne(t *testing.T) {
	for _, drift := range []bool{false, true} {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("drift=%v/seed=%d", drift, seed), func(t *testing.T) {
				s := newMatrixScenario(t, seed, drift)
				for i := range 400 {
					s.step()
					s.check(i)
				}
			})
		}
	}
}

// BenchmarkMatrix300 builds the routing matrix of a site among 300 after
// a quarter of the origins sent a new report (their reports come every
// second, the computations every 250 ms at that size): kept between
// computations, and built anew each time as before.
func BenchmarkMatrix300(b *testing.B) {
	for _, kept := range []bool{true, false} {
		b.Run(map[bool]string{true: "kept", false: "anew"}[kept], func(b *testing.B) {
			n := newNode(b)
			rng := rand.New(rand.NewPCG(1, 2))
			ids := []wire.SiteID{n.self}
			for i := range 299 {
				ids = append(ids, wire.SiteIDFromName(fmt.Sprintf("site-%d", i)))
			}
			seq := uint32(0)
			report := func(now time.Time, origin wire.SiteID) {
				ls := wire.LinkState{Origin: origin, Incarnation: 1, Seq: seq}
				for _, to := range ids {
					if to != origin {
						ls.Entries = append(ls.Entries, wire.LinkEntry{Peer: to, Flags: wire.LinkFlagUp, RTT: uint32(1000 + rng.IntN(90000)),
							Delay: int64(rng.IntN(80e6)), LossSamples: 100})
					}
				}
				n.db.Apply(now, &ls)
			}
			now := t0
			seq++
			for _, id := range ids[1:] {
				report(now, id)
			}
			n.matrix(now, ids)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				now = now.Add(250 * time.Millisecond)
				seq++
				for k := range 75 {
					report(now, ids[1+(i*75+k)%299])
				}
				if !kept {
					clear(n.mx.rows) // every row built again, in the same memory
				}
				b.StartTimer()
				n.matrix(now, ids)
			}
		})
	}
}
