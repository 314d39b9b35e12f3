package sim

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// route returns a site's current route to a destination.
func route(n *Net, src, dst string) (*routing.Route, bool) {
	return n.Site(src).Node.Table().Lookup(n.Site(dst).ID)
}

// carried reports whether a frame from src to dst sent now would avoid the
// site avoid on at least one of the paths it is sent on (the route's path
// or its backup).
func carried(n *Net, src, dst string, avoid wire.SiteID) bool {
	r, ok := route(n, src, dst)
	if !ok {
		return false
	}
	return !slices.Contains(r.Path, avoid) || (len(r.Backup) > 0 && !slices.Contains(r.Backup, avoid))
}

// TestRelayDiesBackupBeforeDown: S→D and D→S go via R; R is killed. Within
// the suspicion time (250 ms after the last reply, so at most 350 ms after
// the kill) both directions send a copy on a path avoiding R; the route
// then settles on that path with no backup by the time R is declared down
// (500 ms after the last reply). 20 seeds.
func TestRelayDiesBackupBeforeDown(t *testing.T) {
	var covered, settled []time.Duration
	for seed := uint64(1); seed <= 20; seed++ {
		n := detourMesh(seed)
		n.SetLink("S", "D", Link{Delay: 30 * ms, Jitter: ms})
		n.SetLink("D", "S", Link{Delay: 30 * ms, Jitter: ms})
		start(t, n)
		n.RunFor(5*time.Second + time.Duration(seed*37)*ms)
		r := n.Site("R").ID
		for _, p := range [][2]string{{"S", "D"}, {"D", "S"}} {
			if !slices.Contains(n.Path(p[0], p[1]), r) {
				t.Fatalf("seed %d: %s→%s is %v, not via R", seed, p[0], p[1], n.PathNames(p[0], p[1]))
			}
		}
		n.Kill("R")
		at := n.Now()
		both := func() bool { return carried(n, "S", "D", r) && carried(n, "D", "S", r) }
		if !n.RunUntil(at.Add(2*time.Second), both) {
			t.Fatalf("seed %d: no path avoiding R within 2 s", seed)
		}
		covered = append(covered, n.Now().Sub(at))
		for _, p := range [][2]string{{"S", "D"}, {"D", "S"}} {
			if rt, _ := route(n, p[0], p[1]); slices.Contains(rt.Path, r) && len(rt.Backup) == 0 {
				t.Fatalf("seed %d: %s→%s covered without a backup: %+v", seed, p[0], p[1], rt)
			}
		}
		clean := func() bool {
			for _, p := range [][2]string{{"S", "D"}, {"D", "S"}} {
				rt, ok := route(n, p[0], p[1])
				if !ok || slices.Contains(rt.Path, r) || len(rt.Backup) > 0 {
					return false
				}
			}
			return true
		}
		if !n.RunUntil(at.Add(2*time.Second), clean) {
			t.Fatalf("seed %d: routes not settled off R within 2 s", seed)
		}
		settled = append(settled, n.Now().Sub(at))
	}
	t.Logf("relay killed, traffic on a path avoiding it (20 trials): p50 %v, p95 %v, max %v",
		percentile(covered, 0.5), percentile(covered, 0.95), percentile(covered, 1))
	t.Logf("relay killed, route settled off it with no backup: p50 %v, p95 %v, max %v",
		percentile(settled, 0.5), percentile(settled, 0.95), percentile(settled, 1))
	if p := percentile(covered, 1); p > 350*ms {
		t.Errorf("max time to a path avoiding the dead relay %v, want ≤ 350 ms", p)
	}
	if p := percentile(settled, 0.95); p > time.Second {
		t.Errorf("p95 time to settle %v, want < 1 s", p)
	}
}

// TestSuspicionClearedWhenConfirmed: R's replies to S stop for 300 ms (a
// burst of loss on R→S), long enough to suspect the link and short of
// declaring it down. S sends on a backup meanwhile, then drops the backup
// and keeps its path: no switch. (The other paths are slow enough that the
// burst's loss, which counts against the link, does not make one better.)
func TestSuspicionClearedWhenConfirmed(t *testing.T) {
	n := detourMesh(3)
	n.SetLink("S", "D", Link{Delay: 40 * ms, Jitter: ms})
	n.SetLink("S", "Q", Link{Delay: 18 * ms, Jitter: ms})
	n.SetLink("Q", "D", Link{Delay: 18 * ms, Jitter: ms})
	start(t, n)
	n.RunFor(6 * time.Second)
	r := n.Site("R").ID
	before := slices.Clone(n.Path("S", "D"))
	if !slices.Contains(before, r) {
		t.Fatalf("S→D is %v, not via R", n.PathNames("S", "D"))
	}
	changes := len(n.Changes)
	l := n.LinkOf("R", "S")
	l.Down = true
	n.SetLink("R", "S", l)
	end := n.Now().Add(300 * ms)
	sawBackup := n.RunUntil(end, func() bool {
		rt, _ := route(n, "S", "D")
		return len(rt.Backup) > 0 && !slices.Contains(rt.Backup, r)
	})
	n.RunUntil(end, nil) // the rest of the burst
	l.Down = false
	n.SetLink("R", "S", l)
	n.RunFor(time.Second)
	if !sawBackup {
		t.Error("no backup avoiding R while its replies were missing")
	}
	rt, _ := route(n, "S", "D")
	if len(rt.Backup) != 0 || !slices.Equal(rt.Path, before) {
		t.Errorf("after the burst: path %v backup %v, want %v and none", rt.Path, rt.Backup, before)
	}
	for _, c := range n.Changes[changes:] {
		if c.Site == "S" && c.Dest == n.Site("D").ID {
			t.Errorf("S→D switched for a burst: %v → %v", c.From, c.To)
		}
	}
}

// flapTriangle: S→D direct flaps, S→R→D is 30 ms, everything else 15 ms,
// 1 ms jitter.
func flapTriangle(seed uint64) *Net {
	n := New(seed)
	for i, name := range []string{"S", "D", "R"} {
		var boot = AddrOf(0)
		if i == 0 {
			n.AddSite(name, 0, nil, nil)
			continue
		}
		n.AddSite(name, time.Duration(i)*1700*ms, []netip.AddrPort{boot}, nil)
	}
	for _, a := range []string{"S", "D", "R"} {
		for _, b := range []string{"S", "D", "R"} {
			if a != b {
				n.SetLink(a, b, Link{Delay: 15 * ms, Jitter: ms})
			}
		}
	}
	return n
}

// TestFlapDampingFiveMinutes: the S↔D link flaps every 2 s between 20 ms
// (direct best) and 40 ms (the 30 ms relay best) for five simulated
// minutes. Each direction switches at most once per 10 s, but for leaving
// the direct path when it collapses (20 ms worse at once), which damping
// does not hold; the return hold keeps it away for a minute each time.
// Once the link stays at 40 ms, both directions take the relay within the
// damping interval plus a second.
func TestFlapDampingFiveMinutes(t *testing.T) {
	n := flapTriangle(5)
	set := func(d time.Duration) {
		n.SetLink("S", "D", Link{Delay: d, Jitter: ms})
		n.SetLink("D", "S", Link{Delay: d, Jitter: ms})
	}
	set(20 * ms)
	start(t, n)
	n.RunFor(10 * time.Second)
	begin := len(n.Changes)
	const period, total = 2 * time.Second, 5 * time.Minute
	for i := 0; i < int(total/period); i++ {
		set([]time.Duration{40 * ms, 20 * ms}[i%2])
		n.RunFor(period)
	}
	count := map[string]int{}
	var at []time.Time
	for _, c := range n.Changes[begin:] {
		if c.From == nil || c.To == nil {
			t.Errorf("route lost during the flapping: %+v", c)
			continue
		}
		count[c.Site]++
		at = append(at, c.At)
	}
	limit := int(total/(10*time.Second)) + 1
	for _, s := range []string{"S", "D", "R"} {
		t.Logf("flapping link, 5 min: %s made %d route changes (limit %d)", s, count[s], limit)
		if count[s] > limit {
			t.Errorf("%s: %d route changes in 5 min, want ≤ %d", s, count[s], limit)
		}
	}
	collapses := 0
	for _, c := range n.Changes[begin:] {
		if strings.HasPrefix(c.Reason, routing.CollapseReason) {
			collapses++
		}
	}
	if limit := 2 * int(total/time.Minute); collapses > limit {
		t.Errorf("%d switches away from a collapsed path in 5 min; the return hold allows %d", collapses, limit)
	}
	checkSpacing(t, n.Changes[begin:])
	set(40 * ms)
	changed := n.Now()
	ok := n.RunUntil(changed.Add(11*time.Second), func() bool {
		return len(n.Path("S", "D")) == 2 && len(n.Path("D", "S")) == 2
	})
	if !ok {
		t.Errorf("lasting change not followed within 11 s: S→D %v, D→S %v", n.PathNames("S", "D"), n.PathNames("D", "S"))
	}
	t.Logf("lasting change after the flapping followed in %v", n.Now().Sub(changed))
}

// checkSpacing fails if two changes of one pair are less than 10 s apart,
// but for leaving a collapsed path, which damping does not hold.
func checkSpacing(t *testing.T, cs []RouteChange) {
	t.Helper()
	last := map[[2]string]time.Time{}
	for _, c := range cs {
		k := [2]string{c.Site, c.Dest.String()}
		if p, ok := last[k]; ok && c.At.Sub(p) < 10*time.Second && !strings.HasPrefix(c.Reason, routing.CollapseReason) {
			t.Errorf("%s → %v: changes %v apart", c.Site, c.Dest, c.At.Sub(p))
		}
		last[k] = c.At
	}
}
