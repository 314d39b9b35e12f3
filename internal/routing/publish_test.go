package routing

import (
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// A route installed while the direct link was down must show the direct
// link once it comes up, even though the chosen path does not change.
func TestTableRefreshesDirectLinkWithoutPathChange(t *testing.T) {
	const self, relay, dst wire.SiteID = 1, 2, 3
	addrs := map[wire.SiteID]netip.AddrPort{
		relay: netip.MustParseAddrPort("198.18.0.2:1"),
		dst:   netip.MustParseAddrPort("198.18.0.3:1"),
	}
	ms := time.Millisecond
	matrix := func(direct bool) *Matrix {
		m := NewMatrix([]wire.SiteID{self, relay, dst})
		for _, e := range []struct {
			a, b wire.SiteID
			d    time.Duration
		}{{self, relay, 2 * ms}, {relay, self, 2 * ms}, {relay, dst, 8 * ms}, {dst, relay, 8 * ms}} {
			m.Set(e.a, e.b, Edge{Delay: e.d, RTT: 2 * e.d})
		}
		if direct {
			m.Set(self, dst, Edge{Delay: 16 * ms, RTT: 32 * ms})
			m.Set(dst, self, Edge{Delay: 16 * ms, RTT: 32 * ms})
		}
		return m
	}
	r := NewRouter(DefaultConfig(), self)
	now := time.Unix(0, 0)
	r.Update(now, matrix(false), addrs)
	rt, ok := r.Table().Lookup(dst)
	if !ok || rt.DirectUp || len(rt.Path) != 2 {
		t.Fatalf("before the direct link: route %+v", rt)
	}
	r.Update(now.Add(time.Second), matrix(true), addrs)
	rt, _ = r.Table().Lookup(dst)
	if len(rt.Path) != 2 {
		t.Fatalf("path changed to %v; the relay is still faster", rt.Path)
	}
	if !rt.DirectUp || rt.DirectDelay != 16*ms {
		t.Errorf("route after the direct link came up: DirectUp %v, DirectDelay %v", rt.DirectUp, rt.DirectDelay)
	}
}

// Loss costs only the part of its interval's lower bound above the floor,
// at Recovery per lost packet; a link surely losing MaxLoss is unusable.
func TestLossCost(t *testing.T) {
	w := DefaultConfig().Weights
	const d = 10 * time.Millisecond
	for _, c := range []struct {
		loss Loss
		want time.Duration
	}{
		{Loss{Rate: 0.01, Low: 0.007, High: 0.014, Samples: 5000, ChargeLow: 0.006}, d},      // background loss
		{Loss{Rate: 0.06, Low: 0.01, High: 0.2, Samples: 50, ChargeLow: 0.005}, d},           // not surely above the floor
		{Loss{Rate: 0.05, Low: 0.045, High: 0.06, Samples: 2000, ChargeLow: 0.04}, d + 4*ms}, // 2 % above the floor × 200 ms
		{Loss{Rate: 0.2, Low: 0.18, High: 0.23, Samples: 1000, ChargeLow: 0.17}, d + 30*ms},  // 15 % × 200 ms
		// 3 losses in 25 probes: surely above the floor for one link, not
		// among the thousands of an overlay.
		{Loss{Rate: 0.12, Low: 0.042, High: 0.3, Samples: 25, ChargeLow: 0.015}, d},
	} {
		if got := w.cost(Edge{Delay: d, Loss: c.loss}); (got - c.want).Abs() > 10*time.Microsecond {
			t.Errorf("loss %+v costs %v, want %v", c.loss, got, c.want)
		}
	}
	if !w.usable(Edge{Loss: Loss{Rate: 0.3, Low: 0.1, High: 0.7, Samples: 10}}) {
		t.Error("a link not surely losing a quarter is unusable")
	}
	if w.usable(Edge{Loss: Loss{Rate: 0.5, Low: 0.3, High: 0.7, Samples: 20}}) {
		t.Error("a link surely losing more than a quarter is usable")
	}
}

// After an operator removes a pin, the best path is followed as soon as
// it is better, without waiting out flap damping.
func TestUnpinIsNotDamped(t *testing.T) {
	const self, relay, dst wire.SiteID = 1, 2, 3
	addrs := map[wire.SiteID]netip.AddrPort{relay: netip.MustParseAddrPort("198.18.0.2:1"), dst: netip.MustParseAddrPort("198.18.0.3:1")}
	ms := time.Millisecond
	matrix := func(direct time.Duration) *Matrix {
		m := NewMatrix([]wire.SiteID{self, relay, dst})
		for _, e := range []struct {
			a, b wire.SiteID
			d    time.Duration
		}{{self, relay, 5 * ms}, {relay, self, 5 * ms}, {relay, dst, 5 * ms}, {dst, relay, 5 * ms}, {self, dst, direct}, {dst, self, direct}} {
			m.Set(e.a, e.b, Edge{Delay: e.d, RTT: 2 * e.d})
		}
		return m
	}
	cfg := DefaultConfig()
	r := NewRouter(cfg, self)
	now := time.Unix(0, 0)
	r.Update(now, matrix(8*ms), addrs)
	now = now.Add(cfg.Settle + time.Second)
	if err := r.Pin(dst, []wire.SiteID{dst}); err != nil {
		t.Fatal(err)
	}
	r.Update(now, matrix(8*ms), addrs)
	r.Unpin(dst)
	r.Update(now, matrix(8*ms), addrs) // direct is still best at the unpin
	// The direct link then slows: the relay must win after the hold alone.
	for step := 0; step < 10; step++ {
		now = now.Add(100 * time.Millisecond)
		r.Update(now, matrix(30*ms), addrs)
	}
	if rt, _ := r.Table().Lookup(dst); len(rt.Path) != 2 {
		t.Errorf("1 s after the direct link slowed following an unpin, the path is %v", rt.Path)
	}
}
