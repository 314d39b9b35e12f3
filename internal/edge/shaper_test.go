package edge

import (
	"math"
	"testing"
	"time"
)

// drive offers traffic from several networks in a simulated clock, each
// sending a 1500-byte frame whenever its own previous frame's wait is
// over, and returns the achieved rates in bits per second.
func drive(s *Shaper, offered map[uint32]float64, d time.Duration) map[uint32]float64 {
	start := time.Unix(0, 0)
	next := map[uint32]time.Time{}
	sent := map[uint32]float64{}
	for n := range offered {
		next[n] = start
	}
	for now := start; now.Sub(start) < d; now = now.Add(50 * time.Microsecond) {
		for n, bps := range offered {
			if now.Before(next[n]) {
				continue
			}
			wait := s.Delay(n, 1500, now)
			sent[n] += 1500 * 8
			// A source offering bps paces itself; a shaped one waits more.
			next[n] = now.Add(max(wait, time.Duration(1500*8/bps*1e9)))
		}
	}
	out := map[uint32]float64{}
	for n, b := range sent {
		out[n] = b / d.Seconds()
	}
	return out
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*want {
		t.Errorf("%s: %.2f Mbit/s, want %.2f ± %.0f %%", what, got/1e6, want/1e6, tol*100)
	}
}

func TestShaperCeiling(t *testing.T) {
	s := NewShaper(0)
	s.Set(1, Limits{MaxBps: 10e6})
	got := drive(s, map[uint32]float64{1: 100e6}, 10*time.Second)
	within(t, "network 1", got[1], 10e6, 0.02)
}

func TestShaperGuaranteesUnderContention(t *testing.T) {
	s := NewShaper(20e6)
	s.Set(1, Limits{MinBps: 15e6})
	s.Set(2, Limits{MinBps: 2e6})
	got := drive(s, map[uint32]float64{1: 100e6, 2: 100e6}, 10*time.Second)
	if got[1] < 15e6*0.98 || got[2] < 2e6*0.98 {
		t.Errorf("guarantees not met: network 1 %.2f, network 2 %.2f Mbit/s", got[1]/1e6, got[2]/1e6)
	}
	within(t, "total", got[1]+got[2], 20e6, 0.05)
}

func TestShaperIdleNetworkLeavesCapacityToOthers(t *testing.T) {
	s := NewShaper(20e6)
	s.Set(1, Limits{MinBps: 15e6})
	s.Set(2, Limits{MinBps: 2e6})
	got := drive(s, map[uint32]float64{2: 100e6}, 10*time.Second)
	within(t, "network 2 alone", got[2], 20e6, 0.05)
}

func TestShaperRemoveLimits(t *testing.T) {
	s := NewShaper(0)
	s.Set(1, Limits{MaxBps: 1e6})
	s.Set(1, Limits{})
	if d := s.Delay(1, 1<<20, time.Unix(0, 0)); d != 0 {
		t.Errorf("removed limit still delays by %v", d)
	}
}

func BenchmarkShaperDelay(b *testing.B) {
	s := NewShaper(1e9)
	s.Set(1, Limits{MaxBps: 1e9, MinBps: 1e8})
	now := time.Unix(0, 0)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		s.Delay(1, 1500, now)
	}
}

// A batch larger than a bucket's depth (a TAP with offloads gives up to
// 128 frames at once) must get a finite delay at the configured rate, not
// an impossible reservation.
func TestShaperBatchLargerThanBucket(t *testing.T) {
	s := NewShaper(20e6)
	s.Set(1, Limits{MaxBps: 20e6, MinBps: 5e6})
	now := time.Unix(0, 0)
	const batch = 128 * 1500
	var total time.Duration
	for i := 0; i < 10; i++ {
		d := s.Delay(1, batch, now)
		if d > time.Second {
			t.Fatalf("batch %d: delay %v", i, d)
		}
		now = now.Add(d)
		total = now.Sub(time.Unix(0, 0))
	}
	// 10 batches of 192 KB at 20 Mbit/s take about 0.77 s (less the
	// initial bucket).
	if total < 600*time.Millisecond || total > 800*time.Millisecond {
		t.Errorf("10 batches took %v at 20 Mbit/s", total)
	}
}
