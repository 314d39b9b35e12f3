package lanman

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/results"
	"github.com/detour-overlay/detour/internal/lab/experiment/store"
)

func TestFullPathAddsMissingEndpoints(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, "LAN>CLU"},
		{[]string{"CLU"}, "LAN>CLU"},
		{[]string{"NEU", "CLU"}, "LAN>NEU>CLU"},
		{[]string{"LAN", "NEU", "CLU"}, "LAN>NEU>CLU"},
		{[]string{"NEU"}, "LAN>NEU>CLU"},
	} {
		got := fullPath("LAN", "CLU", tc.in)
		s := ""
		for i, p := range got {
			if i > 0 {
				s += ">"
			}
			s += p
		}
		if s != tc.want {
			t.Errorf("fullPath(%v) = %s, want %s", tc.in, s, tc.want)
		}
	}
}

func TestWindowsAreAtLeastASecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	recs := []results.Record{
		{Op: "read", Server: "LAN", Start: t0, Latency: time.Millisecond},
		{Op: "read", Server: "LAN", Start: t0.Add(time.Millisecond), Latency: time.Millisecond},
		{Op: "write", Server: "CLU", Start: t0, Latency: 120 * time.Millisecond},
		{Op: "write", Server: "CLU", Start: t0.Add(3 * time.Second), Latency: 120 * time.Millisecond},
	}
	w := windows(recs)
	if d := w[opKey{"read", "LAN"}]; d[1].Sub(d[0]) != time.Second || d[0].After(t0) {
		t.Errorf("short window %v..%v: want one second around the operations", d[0], d[1])
	}
	if d := w[opKey{"write", "CLU"}]; !d[0].Equal(t0) || !d[1].Equal(t0.Add(3120*time.Millisecond)) {
		t.Errorf("long window %v..%v: want the operations' own span", d[0], d[1])
	}
}

// TestReactFindsTheChangeAndTheSpike builds a continuous run in which the
// load starts at 10 s, LAN->CLU is relayed at 10.8 s and CLU->LAN at
// 11.0 s, with one slow write at 10.5 s.
func TestReactFindsTheChangeAndTheSpike(t *testing.T) {
	t0 := time.Unix(5000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	cr := &Continuous{Start: t0, LoadStart: at(10), End: at(30)}
	for i := 0; i < 300; i++ {
		ts := float64(i) * 0.1
		op, lat := store.Read, 62.0
		if i%2 == 1 {
			op, lat = store.Write, 117.0
		}
		if ts >= 11 {
			lat += 8 // the relayed path is a little longer
		}
		if i == 105 {
			lat = 190
		}
		cr.Samples = append(cr.Samples, store.Sample{Op: op, Start: at(ts), Latency: time.Duration(lat * float64(time.Millisecond))})
	}
	cr.Routes = []RouteEvent{
		{Time: at(0), From: "LAN", To: "CLU", Path: []string{"LAN", "CLU"}},
		{Time: at(0), From: "CLU", To: "LAN", Path: []string{"CLU", "LAN"}},
		{Time: at(10.8), From: "LAN", To: "CLU", Path: []string{"LAN", "NEU", "CLU"}},
		{Time: at(11.0), From: "CLU", To: "LAN", Path: []string{"CLU", "NEU", "LAN"}},
	}
	cr.Truth = []TruthPoint{
		{Time: at(9.9), From: "CLU", To: "LAN", Queue: 0},
		{Time: at(10.2), From: "CLU", To: "NEU", Queue: 9}, // not a loaded link
		{Time: at(10.3), From: "CLU", To: "LAN", Queue: 2},
		{Time: at(10.5), From: "LAN", To: "CLU", Queue: 12},
	}
	r := cr.React()
	if !r.Onset.Equal(at(10.5)) || r.AfterOnset != 500*time.Millisecond {
		t.Errorf("onset %v, after onset %v: want 10.5 s and 500ms", r.Onset.Sub(t0), r.AfterOnset)
	}
	if !r.Rerouted || r.After["LAN->CLU"] != 800*time.Millisecond || r.After["CLU->LAN"] != time.Second {
		t.Fatalf("reaction %+v: want LAN->CLU after 800ms and CLU->LAN after 1s", r)
	}
	if r.MaxMs != 190 || r.ExcessMs != 190-117 {
		t.Errorf("spike %.1f ms (%.1f above idle), want 190 (73)", r.MaxMs, r.ExcessMs)
	}
	// The slow write started at 10.5 s, before the change at 11 s; the
	// switch itself cost nothing beyond the longer path (+8 ms), and the
	// operation in flight at 11 s (started 10.9 s) is counted with it.
	if r.BeforeMaxMs != 190 || r.SwitchMaxMs != 125 || r.SwitchExcessMs != 8 {
		t.Errorf("before %.1f ms, switch %.1f ms (+%.1f): want 190, 125 (+8)", r.BeforeMaxMs, r.SwitchMaxMs, r.SwitchExcessMs)
	}
	if r.Changes != 2 {
		t.Errorf("%d changes under load, want 2", r.Changes)
	}
	if r.IdleMedian["read"] != 62 || r.SettledMedian["write"] != 125 {
		t.Errorf("medians idle %v settled %v", r.IdleMedian, r.SettledMedian)
	}
	if r.Exact || r.AfterOnsetDir["LAN->CLU"] != 300*time.Millisecond {
		t.Errorf("polled: exact %v, LAN->CLU %v after its onset; want false and 300ms", r.Exact, r.AfterOnsetDir["LAN->CLU"])
	}

	// The same run with the emulator's onsets and the agents' own times:
	// each direction is timed from its own link's queue.
	cr.Truth = append(cr.Truth,
		TruthPoint{Time: at(10.5), From: "CLU", To: "LAN", Queue: 12, Onset: at(10.42)},
		TruthPoint{Time: at(10.7), From: "LAN", To: "CLU", Queue: 30, Onset: at(10.46)},
		TruthPoint{Time: at(10.9), From: "LAN", To: "CLU", Queue: 30, Onset: at(10.46)})
	cr.Changes = []RouteEvent{
		{Time: at(9.0), From: "LAN", To: "CLU", Path: []string{"NEU", "CLU"}}, // before the load
		{Time: at(10.74), From: "LAN", To: "CLU", Path: []string{"NEU", "CLU"}},
		{Time: at(10.93), From: "CLU", To: "LAN", Path: []string{"NEU", "LAN"}},
	}
	r = cr.React()
	if !r.Exact || r.AfterOnsetDir["LAN->CLU"] != 280*time.Millisecond || r.AfterOnsetDir["CLU->LAN"] != 510*time.Millisecond {
		t.Errorf("exact %v, after each onset %v: want true, LAN->CLU 280ms and CLU->LAN 510ms", r.Exact, r.AfterOnsetDir)
	}
	if !r.Onset.Equal(at(10.42)) || r.After["CLU->LAN"] != 930*time.Millisecond || r.AfterOnset != 510*time.Millisecond {
		t.Errorf("onset %v, CLU->LAN %v after the load, %v after the onset: want 10.42 s, 930ms, 510ms", r.Onset.Sub(t0), r.After["CLU->LAN"], r.AfterOnset)
	}
}

func TestReactWithoutChange(t *testing.T) {
	t0 := time.Unix(5000, 0)
	cr := &Continuous{Start: t0, LoadStart: t0.Add(time.Second), End: t0.Add(3 * time.Second)}
	cr.Samples = []store.Sample{{Op: store.Read, Start: t0.Add(2 * time.Second), Latency: 130 * time.Millisecond}}
	if r := cr.React(); r.Rerouted || r.MaxMs != 130 {
		t.Errorf("reaction %+v: want no reroute and the loaded maximum", r)
	}
}

// TestReportOpensWithTheSummary: the report starts with the summary table
// of medians per overlay and phase, the phases of the degraded operations,
// the reroute time and the files written, then explains the long table's
// columns before printing it.
func TestReportOpensWithTheSummary(t *testing.T) {
	t0 := time.Unix(5000, 0)
	res := &Result{Predicted: map[results.Key]float64{}, PredictedTruth: map[results.Key]float64{},
		Reroute: map[string]time.Duration{"detour": 1200 * time.Millisecond}, Continuous: map[string]*Continuous{}}
	lat := map[string]map[string]float64{"vxlan": {"a": 64, "b": 137, "c": 138}, "detour": {"a": 65, "b": 137, "c": 73}}
	for _, ov := range []string{"vxlan", "detour"} {
		for _, ph := range Phases {
			for i := 0; i < 5; i++ {
				res.Records = append(res.Records, results.Record{Overlay: ov, Phase: ph, Server: "CLU", Op: "read", Seq: i,
					Start: t0, Latency: time.Duration(lat[ov][ph] * float64(time.Millisecond))})
			}
		}
	}
	// A continuous run: the load starts at 10 s, LAN->CLU is relayed at
	// 10.8 s and CLU->LAN at 11 s, one write at 10.5 s takes 190 ms.
	cr := &Continuous{Start: t0, LoadStart: t0.Add(10 * time.Second), End: t0.Add(20 * time.Second)}
	for i := 0; i < 200; i++ {
		op, lat := store.Read, 62.0
		if i%2 == 1 {
			op, lat = store.Write, 117.0
		}
		if i == 105 {
			lat = 190
		}
		cr.Samples = append(cr.Samples, store.Sample{Op: op, Start: t0.Add(time.Duration(i) * 100 * time.Millisecond), Latency: time.Duration(lat * float64(time.Millisecond))})
	}
	cr.Routes = []RouteEvent{
		{Time: t0.Add(10800 * time.Millisecond), From: "LAN", To: "CLU", Path: []string{"LAN", "NEU", "CLU"}},
		{Time: t0.Add(11 * time.Second), From: "CLU", To: "LAN", Path: []string{"CLU", "NEU", "LAN"}},
	}
	res.Continuous["detour"] = cr
	dir := t.TempDir()
	if err := res.Write(dir, "test\n"); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := res.WriteReport(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"read via CLU, phases a -> b -> c: vxlan 64.0 -> 137.0 -> 138.0; detour 65.0 -> 137.0 -> 73.0 ms",
		"detour rerouted CLU<->LAN through a relay 1.20 s after",
		"files in " + dir,
		"boxplots-detour.png",
		"timeseries-detour.png",
		"detour, continuous run: rerouted CLU->LAN 1.0 s, LAN->CLU 0.8 s after the load started",
		"largest latency from 2 s before to 2 s after the switch: 190.0 ms (73.0 ms above the idle median of its kind)",
		"from truth     the same model",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// The summary's row of detour's phase (c) carries the median read via
	// CLU, and the summary comes before the long table.
	if !regexp.MustCompile(`(?m)^detour\s+\(c\) loaded, rerouting free\s+73\.0\s+-\s+-`).MatchString(out) {
		t.Errorf("no summary row for detour phase c with 73.0 ms:\n%s", out)
	}
	if strings.Index(out, "SUMMARY") > strings.Index(out, "THE LONG TABLE") {
		t.Errorf("the summary does not come first:\n%s", out)
	}
}
