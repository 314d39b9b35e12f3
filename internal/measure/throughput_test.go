package measure

import (
	"math"
	"testing"
	"time"
)

func within(t *testing.T, what string, got, want, frac float64) {
	t.Helper()
	if math.Abs(got-want) > frac*want {
		t.Fatalf("%s = %.0f, want %.0f within %.0f %%", what, got, want, frac*100)
	}
}

// feed delivers rate bits/s over d, fed every 100 ms, with a probe every
// 100 ms whose delay is base+queue.
func feed(r *RateEstimator, start time.Time, total *uint64, rate float64, d, base, queue time.Duration) time.Time {
	now := start
	for end := start.Add(d); now.Before(end); {
		now = now.Add(100 * time.Millisecond)
		*total += uint64(rate / 8 / 10)
		r.OnDelay(now, base+queue)
		r.OnBytes(now, *total)
	}
	return now
}

func TestRateNothingKnown(t *testing.T) {
	r := NewRateEstimator(DefaultRateConfig())
	if e := r.Estimate(t0); e.Valid() || !e.Stale(t0, time.Minute) {
		t.Fatalf("fresh estimator: %+v", e)
	}
}

func TestRatePassiveLowerBound(t *testing.T) {
	r := NewRateEstimator(DefaultRateConfig())
	var total uint64
	r.OnBytes(t0, 0)
	now := feed(r, t0, &total, 50e6, 3*time.Second, 10*time.Millisecond, 0)
	e := r.Estimate(now)
	if e.Kind != RateLowerBound {
		t.Fatalf("kind %v, want lower-bound", e.Kind)
	}
	within(t, "lower bound", e.Rate, 50e6, 0.02)
	if !e.Stale(now, time.Minute) {
		t.Fatal("a lower bound must ask for a train")
	}
}

func TestRatePassiveSaturated(t *testing.T) {
	r := NewRateEstimator(DefaultRateConfig())
	var total uint64
	r.OnBytes(t0, 0)
	// Idle probes set the floor, then a flow fills the link: its probes
	// see 8 ms of queue.
	now := feed(r, t0, &total, 0, 2*time.Second, 10*time.Millisecond, 0)
	now = feed(r, now, &total, 20e6, 5*time.Second, 10*time.Millisecond, 8*time.Millisecond)
	e := r.Estimate(now)
	if e.Kind != RateSaturated {
		t.Fatalf("kind %v, want saturated", e.Kind)
	}
	within(t, "saturated rate", e.Rate, 20e6, 0.02)
	if e.Stale(now, time.Minute) {
		t.Fatal("a fresh saturated estimate needs no train")
	}
	if e.Stale(now.Add(59*time.Second), time.Minute) != false || !e.Stale(now.Add(61*time.Second), time.Minute) {
		t.Fatal("staleness does not follow the refresh age")
	}
}

// A probe delayed now and then while data flows is no queue: the windows
// it falls in give lower bounds, not the link's rate. Two probes in a
// window are needed, and every one of them must see the queue.
func TestRateLoneDelayedProbeIsNoQueue(t *testing.T) {
	r := NewRateEstimator(DefaultRateConfig())
	var total uint64
	r.OnBytes(t0, 0)
	now := feed(r, t0, &total, 0, 2*time.Second, 10*time.Millisecond, 0)
	// 2.5 Mbit/s of requests on a wide link for 10 s; every third probe
	// is 3 ms late.
	for i := 0; i < 100; i++ {
		now = now.Add(100 * time.Millisecond)
		total += uint64(2.5e6 / 8 / 10)
		d := 10 * time.Millisecond
		if i%3 == 0 {
			d += 3 * time.Millisecond
		}
		r.OnDelay(now, d)
		r.OnBytes(now, total)
	}
	if e := r.Estimate(now); e.Kind != RateLowerBound {
		t.Fatalf("jitter on a link with room: %+v, want a lower bound", e)
	}
}

func TestRateIdleWindowsDoNotCount(t *testing.T) {
	r := NewRateEstimator(DefaultRateConfig())
	var total uint64
	r.OnBytes(t0, 0)
	now := t0
	// One burst of 1 MB every second: never flows throughout a window.
	for i := 0; i < 50; i++ {
		now = now.Add(100 * time.Millisecond)
		if i%10 == 0 {
			total += 1 << 20
		}
		r.OnBytes(now, total)
	}
	if e := r.Estimate(now); e.Valid() {
		t.Fatalf("bursts with idle gaps gave %+v", e)
	}
}

func TestRateTrainDispersion(t *testing.T) {
	r := NewRateEstimator(DefaultRateConfig())
	const size = 1228
	rate := 200e6
	gap := time.Duration(float64(size*8) / rate * 1e9)
	var e RateEstimate
	var ok bool
	for i := 0; i < 24; i++ {
		e, ok = r.OnTrain(t0.Add(time.Duration(i)*gap), 7, i, 24, size)
		if ok != (i == 23) {
			t.Fatalf("packet %d: done %v", i, ok)
		}
	}
	if e.Kind != RateTrain {
		t.Fatalf("kind %v", e.Kind)
	}
	within(t, "train rate", e.Rate, rate, 0.01)
	if got := r.Estimate(t0.Add(time.Second)); got.Kind != RateTrain || got.Rate != e.Rate {
		t.Fatalf("estimate %+v, want the train's", got)
	}
	if r.Estimate(t0.Add(3 * time.Minute)).Valid() {
		t.Fatal("a train older than MaxAge still counts")
	}
}

func TestRateTrainLostTail(t *testing.T) {
	r := NewRateEstimator(DefaultRateConfig())
	gap := 500 * time.Microsecond
	for i := 0; i < 20; i++ { // the last 4 of 24 are lost
		if _, ok := r.OnTrain(t0.Add(time.Duration(i)*gap), 9, i, 24, 1000); ok {
			t.Fatalf("train done at packet %d", i)
		}
	}
	if _, ok := r.Expire(t0.Add(100 * time.Millisecond)); ok {
		t.Fatal("train expired before its timeout")
	}
	e, ok := r.Expire(t0.Add(2 * time.Second))
	if !ok {
		t.Fatal("train with 20 of 24 packets gave no rate")
	}
	within(t, "train rate", e.Rate, 16e6, 0.01)
	// Too few packets give nothing.
	r.OnTrain(t0.Add(3*time.Second), 10, 0, 24, 1000)
	r.OnTrain(t0.Add(3*time.Second+gap), 10, 1, 24, 1000)
	if _, ok := r.Expire(t0.Add(5 * time.Second)); ok {
		t.Fatal("two packets gave a rate")
	}
}

func TestRateNewTrainEndsOld(t *testing.T) {
	r := NewRateEstimator(DefaultRateConfig())
	for i := 0; i < 10; i++ {
		r.OnTrain(t0.Add(time.Duration(i)*time.Millisecond), 1, i, 24, 1000)
	}
	e, ok := r.OnTrain(t0.Add(time.Second), 2, 0, 24, 1000)
	if !ok {
		t.Fatal("the next train did not end the previous one")
	}
	within(t, "first train", e.Rate, 8e6, 0.01)
	if id, active := r.TrainID(); !active || id != 2 {
		t.Fatalf("train in progress %d %v", id, active)
	}
}

func TestRateSaturatedBeatsTrainAndLowerBoundRaises(t *testing.T) {
	r := NewRateEstimator(DefaultRateConfig())
	for i := 0; i < 24; i++ {
		r.OnTrain(t0.Add(time.Duration(i)*100*time.Microsecond), 1, i, 24, 1250)
	}
	var total uint64
	r.OnBytes(t0, 0)
	now := feed(r, t0, &total, 0, time.Second, 5*time.Millisecond, 0)
	now = feed(r, now, &total, 40e6, 3*time.Second, 5*time.Millisecond, 5*time.Millisecond)
	if e := r.Estimate(now); e.Kind != RateSaturated {
		t.Fatalf("kind %v, want saturated over the train", e.Kind)
	}
	now = feed(r, now, &total, 60e6, 2*time.Second, 5*time.Millisecond, 0)
	e := r.Estimate(now)
	within(t, "raised rate", e.Rate, 60e6, 0.02)
}
