package control

import (
	"net/netip"
	"testing"
	"time"
)

// The drift of a link between clocks 50 ppm apart is found from its
// offset part within two spans, and a one-way step of the delay (not
// skew) does not change it.
func TestDriftFollowsSkewNotSteps(t *testing.T) {
	var d drift
	off := func(el time.Duration) time.Duration { return 3*time.Second + time.Duration(float64(el)*50e-6) }
	var got int
	for el := time.Duration(0); el <= 60*time.Second; el += time.Second {
		got = d.update(t0.Add(el), off(el))
	}
	if got != 50 {
		t.Fatalf("drift %d ppm, want 50", got)
	}
	// A step of 40 ms one way moves the offset part by 20 ms: 1000 ppm
	// over a span, far beyond any clock's skew.
	for el := 61 * time.Second; el <= 90*time.Second; el += time.Second {
		got = d.update(t0.Add(el), off(el)+20*time.Millisecond)
	}
	if got != 50 {
		t.Fatalf("drift %d ppm after a one-way step, want 50", got)
	}
}

// With the economy, members beyond the cold probe budget are probed at
// most once a second, and a hot member (a relay) at twice the base
// interval and detection times, whatever the size of the overlay.
func TestEconomyTimers(t *testing.T) {
	cfg := DefaultConfig("a", netip.MustParseAddrPort("10.0.0.1:4789"))
	cfg.Economy = true
	for _, c := range []struct {
		members int
		probe   time.Duration
	}{{9, 100 * time.Millisecond}, {53, 530 * time.Millisecond}, {99, 990 * time.Millisecond}, {299, time.Second}} {
		tm := scaledTimers(&cfg, c.members)
		if tm.probe != c.probe || tm.down != 5*tm.probe {
			t.Errorf("%d members: cold probe %v, down %v; want %v and five intervals", c.members, tm.probe, tm.down, c.probe)
		}
	}
	n, err := New(cfg, t0)
	if err != nil {
		t.Fatal(err)
	}
	n.timers = scaledTimers(&n.cfg, 299)
	hot, cold := &member{state: StateAlive, hot: true}, &member{state: StateAlive}
	if n.probeInterval(hot) != 200*time.Millisecond || n.suspectAfter(hot) != 500*time.Millisecond || n.downAfter(hot) != time.Second {
		t.Errorf("hot member: probe %v, suspect %v, down %v; want twice the base: 200 ms, 500 ms, 1 s", n.probeInterval(hot), n.suspectAfter(hot), n.downAfter(hot))
	}
	if n.probeInterval(cold) != time.Second || n.downAfter(cold) != 5*time.Second {
		t.Errorf("cold member: probe %v, down %v; want 1 s and 5 s", n.probeInterval(cold), n.downAfter(cold))
	}
	if n.cfg.LinkState.Delta != true || n.cfg.ExpireAfter < 3*n.cfg.LinkState.Refresh {
		t.Errorf("economy link state: delta %v, expiry %v for refresh %v", n.cfg.LinkState.Delta, n.cfg.ExpireAfter, n.cfg.LinkState.Refresh)
	}
}

// The smoothed delay averages noise away, follows the drift, and takes a
// real step at once.
func TestSmoothedDelay(t *testing.T) {
	var s smoothed
	var got time.Duration
	for i := range 60 {
		noise := time.Duration((i%5)-2) * 100 * time.Microsecond // ±0.2 ms
		drift := time.Duration(i) * 50 * time.Microsecond        // 50 ppm a second
		got = s.update(t0.Add(time.Duration(i)*time.Second), 10*time.Millisecond+drift+noise, 50)
	}
	want := 10*time.Millisecond + 59*50*time.Microsecond
	if d := got - want; d > 100*time.Microsecond || d < -100*time.Microsecond {
		t.Fatalf("smoothed %v, want %v within 0.1 ms", got, want)
	}
	if got = s.update(t0.Add(60*time.Second), 60*time.Millisecond, 50); got != 60*time.Millisecond {
		t.Fatalf("a 50 ms step gave %v, want it at once", got)
	}
}
