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
