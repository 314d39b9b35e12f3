package edge

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Shaper limits the egress of a site's virtual networks, like a two-level
// hierarchical token bucket: each network may have a ceiling (MaxBps) and
// a guaranteed rate (MinBps), and the site may have a total egress
// capacity (SiteBps) that the networks share. Traffic within a network's
// guarantee always passes (drawing the shared capacity down, into debt if
// need be); traffic above it waits for shared capacity; nothing exceeds a
// ceiling. A network over its rate is delayed, not dropped: its device
// loop sleeps, the device's queue fills, and TCP sees an ordinary
// bottleneck.
//
// Rates are in bits per second; zero means no limit (or no guarantee).
type Shaper struct {
	mu    sync.Mutex
	site  *rate.Limiter // nil: no shared capacity
	nets  map[uint32]*netBuckets
	limit map[uint32]Limits
}

// Limits are one network's rates in bits per second.
type Limits struct {
	MaxBps float64 `json:"max_bps"`
	MinBps float64 `json:"min_bps"`
}

type netBuckets struct {
	max *rate.Limiter // nil: no ceiling
	min *rate.Limiter // nil: no guarantee
}

// burstFor is the bucket depth for a rate: 10 ms of traffic, and at least
// one 64 KB super-frame.
func burstFor(bps float64) int { return max(int(bps/8*0.010), minBurst) }

func limiter(bps float64) *rate.Limiter {
	if bps <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(bps/8), burstFor(bps))
}

// NewShaper returns a shaper with a total site egress capacity (0 for
// none).
func NewShaper(siteBps float64) *Shaper {
	return &Shaper{site: limiter(siteBps), nets: map[uint32]*netBuckets{}, limit: map[uint32]Limits{}}
}

// SetSite changes the site's total egress capacity.
func (s *Shaper) SetSite(bps float64) {
	s.mu.Lock()
	s.site = limiter(bps)
	s.mu.Unlock()
}

// Set configures (or, with zero Limits, removes) the limits of a network.
func (s *Shaper) Set(network uint32, l Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l == (Limits{}) {
		delete(s.nets, network)
		delete(s.limit, network)
		return
	}
	s.nets[network] = &netBuckets{max: limiter(l.MaxBps), min: limiter(l.MinBps)}
	s.limit[network] = l
}

// Get returns a network's limits.
func (s *Shaper) Get(network uint32) Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit[network]
}

// Delay reserves capacity for n bytes of network's traffic at now and
// returns how long the caller must wait before sending them.
func (s *Shaper) Delay(network uint32, n int, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A bucket cannot reserve more than its depth at once (the reservation
	// would never be granted), and a batch of offloaded frames can exceed
	// it: reserve chunk by chunk; the delay is the last chunk's.
	var wait time.Duration
	for n > 0 {
		chunk := min(n, minBurst)
		wait = s.delay(network, chunk, now)
		n -= chunk
	}
	return wait
}

// minBurst is the smallest bucket depth (see burstFor): no reservation is
// larger.
const minBurst = 65536

// delay reserves n bytes, at most minBurst, for network.
func (s *Shaper) delay(network uint32, n int, now time.Time) time.Duration {
	b := s.nets[network]
	var wait time.Duration
	if b != nil && b.max != nil {
		wait = b.max.ReserveN(now, n).DelayFrom(now)
	}
	if s.site == nil {
		return wait
	}
	if b != nil && b.min != nil {
		// A network with a guarantee sends as soon as either its
		// guarantee or the shared capacity allows, and always counts
		// against the shared capacity so that others yield. (The device
		// loop asks for whole batches of frames: taking the guarantee
		// only when it covers the batch at once would send most batches
		// of a busy network to the shared capacity, where its guarantee
		// no longer holds.)
		rm := b.min.ReserveN(now, n)
		rs := s.site.ReserveN(now, n)
		dm, ds := rm.DelayFrom(now), rs.DelayFrom(now)
		if rm.OK() && dm < ds {
			return max(wait, dm)
		}
		rm.CancelAt(now)
		return max(wait, ds)
	}
	return max(wait, s.site.ReserveN(now, n).DelayFrom(now))
}
