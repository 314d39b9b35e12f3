package locality

import (
	"math"
	"testing"
	"time"
)

func TestParseTag(t *testing.T) {
	s := &server{Site: "ZRH", Tier: "disk"}
	v := value(s, 1000)
	if len(v) != 1000 {
		t.Fatalf("value of %d bytes", len(v))
	}
	if site, tier := parseTag(v); site != "ZRH" || tier != "disk" {
		t.Fatalf("tag %q/%q", site, tier)
	}
	for _, bad := range []string{"", "replica=ZRH", "xx=ZRH/disk;"} {
		if site, tier := parseTag([]byte(bad)); site != "" || tier != "" {
			t.Fatalf("%q: tag %q/%q", bad, site, tier)
		}
	}
}

func TestQuantile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if Quantile(v, 0.5) != 5 || Quantile(v, 0.99) != 10 || Quantile(v, 0) != 1 || !math.IsNaN(Quantile(nil, 0.5)) {
		t.Fatal("nearest-rank quantiles")
	}
}

// TestSummarize checks the percentiles, the classes and the order of a
// small set of samples.
func TestSummarize(t *testing.T) {
	var ss []Sample
	for i := 1; i <= 100; i++ {
		ss = append(ss, Sample{Policy: "local-first", Mode: ModeClient, Size: 1000, Phase: "static", Latency: time.Duration(i) * time.Millisecond, Class: Local})
		c := Nearby
		if i > 90 {
			c = Remote
		}
		ss = append(ss, Sample{Policy: "predicted", Mode: ModeDetour, Size: 1000, Phase: "static", Latency: time.Millisecond, Class: c})
		ss = append(ss, Sample{Policy: "local-disk", Mode: ModeTier, Size: 1000, Phase: "static", Latency: time.Millisecond, Class: Local})
	}
	ss = append(ss, Sample{Policy: "predicted", Mode: ModeDetour, Size: 1000, Phase: "static", Err: "miss"})
	ss = append(ss, Sample{Policy: "predicted", Mode: ModeDetour, Size: 1000, Phase: "baseline", Latency: time.Hour})
	sum := Summarize(ss)
	if len(sum) != 3 || sum[0].Policy != "local-disk" || sum[1].Policy != "local-first" || sum[2].Policy != "predicted" {
		t.Fatalf("rows %+v", sum)
	}
	if lf := sum[1]; lf.P50 != 50 || lf.P99 != 99 || lf.Local != 100 || lf.Reads != 100 {
		t.Fatalf("local-first %+v", lf)
	}
	if p := sum[2]; p.Nearby != 90 || p.Remote != 10 || p.Errs != 1 || p.Reads != 101 || p.P99 != 1 {
		t.Fatalf("predicted %+v", p)
	}
}

// TestMoves checks when a row's reads count as moved after an event:
// only once they stay away from the class before it for a second.
func TestMoves(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var ss []Sample
	add := func(ms int, class string) {
		ss = append(ss, Sample{Policy: "predicted", Mode: ModeDetour, Phase: "dyn", Start: t0.Add(time.Duration(ms) * time.Millisecond), Class: class})
	}
	for ms := -1900; ms < 0; ms += 100 {
		add(ms, Nearby)
	}
	add(100, Local)  // a sample that goes back at once: not a move
	add(200, Nearby) //
	for ms := 700; ms < 3000; ms += 100 {
		add(ms, Local)
	}
	m := Moves(ss, []Event{{At: t0, What: "nearby-slow"}})
	if len(m) != 1 || m[0].Before != Nearby || m[0].After != Local || m[0].AfterMS != 700 {
		t.Fatalf("moves %+v", m)
	}
	stay := Moves(ss[:19], []Event{{At: t0, What: "x"}})
	if stay[0].AfterMS != -1 {
		t.Fatalf("a row that did not move: %+v", stay)
	}
}
