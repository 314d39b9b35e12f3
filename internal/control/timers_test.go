package control

import (
	"net/netip"
	"testing"
	"time"
)

func TestScaledTimers(t *testing.T) {
	cfg := DefaultConfig("a", netip.MustParseAddrPort("10.0.0.1:4789"))
	ms := time.Millisecond
	for _, c := range []struct {
		members, rate        int
		probe, suspect, down time.Duration
		batch                time.Duration
	}{
		{0, 200, 100 * ms, 250 * ms, 500 * ms, 5 * ms},
		{15, 200, 100 * ms, 250 * ms, 500 * ms, 15 * ms},
		{20, 200, 100 * ms, 250 * ms, 500 * ms, 20 * ms},
		{53, 200, 265 * ms, 663 * ms, 1325 * ms, 50 * ms},
		{53, 0, 100 * ms, 250 * ms, 500 * ms, 50 * ms},
		{400, 1000, 400 * ms, 1000 * ms, 2000 * ms, 50 * ms},
	} {
		cfg.MaxProbeRate = c.rate
		got := scaledTimers(&cfg, c.members)
		want := timers{probe: c.probe, suspect: c.suspect, down: c.down, batch: c.batch, members: c.members,
			lsMin: max(100*ms, time.Duration(c.members)*10*ms)}
		if got != want {
			t.Errorf("%d members at %d/s: %+v, want %+v", c.members, c.rate, got, want)
		}
	}
}

// With a Stopwatch, refreshes asked for every millisecond are spaced so
// that they take at most 1/refreshShare of the wall clock: each one here
// takes 5 ms, so at most one per 100 ms runs. Without one, the member
// count's interval (5 ms with no members) applies.
func TestRefreshesKeepToTheirShareOfTheClock(t *testing.T) {
	run := func(stopwatch bool) (refreshes, micros uint64) {
		cfg := DefaultConfig("fujisawa", netip.MustParseAddrPort("10.0.0.1:4789"))
		if stopwatch {
			wall := t0
			cfg.Stopwatch = func() time.Time { wall = wall.Add(5 * time.Millisecond); return wall }
		}
		n, err := New(cfg, t0)
		if err != nil {
			t.Fatal(err)
		}
		start := n.Counters().Refreshes
		for now := t0; now.Before(t0.Add(10 * time.Second)); now = now.Add(time.Millisecond) {
			n.Tick(now)
			n.refreshSoon(now)
		}
		return n.Counters().Refreshes - start, n.Counters().RefreshMicros
	}
	paced, micros := run(true)
	if paced < 90 || paced > 102 {
		t.Errorf("%d refreshes of 5 ms in 10 s; want about 100 (5 %% of the clock)", paced)
	}
	if got, want := micros, (paced+1)*5000; got != want {
		t.Errorf("refresh time counted %d µs, want %d", got, want)
	}
	if free, _ := run(false); free < 1900 {
		t.Errorf("%d refreshes in 10 s without a stopwatch; want one per 5 ms", free)
	}
}
