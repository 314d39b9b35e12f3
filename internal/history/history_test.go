package history

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// delayAt is the link's one-way delay in second sec of the tests.
func delayAt(sec int) float64 { return 20 + float64(sec%100)/10 }

func TestSeriesHoldsTheLastHour(t *testing.T) {
	r := New(t0)
	const secs = 4000
	for sec := 0; sec < secs; sec++ {
		r.Record(t0.Add(time.Duration(sec)*time.Second+300*time.Millisecond), []Link{{From: "A", To: "B", Up: sec%50 != 7, OneWayMs: delayAt(sec), LossPct: float64(sec%10) / 4}})
	}
	got, ok := r.Series("A", "B")
	if !ok {
		t.Fatal("no series")
	}
	if n := len(got); n != coarsePts+finePoints {
		t.Fatalf("%d samples, want %d", n, coarsePts+finePoints)
	}
	first := secs - finePoints - coarsePts*coarseEvery
	if !got[0].At.Equal(t0.Add(time.Duration(first) * time.Second)) {
		t.Errorf("oldest sample at %v, want second %d", got[0].At, first)
	}
	// Fine points: exact to 10 µs.
	for i, sm := range got[coarsePts:] {
		sec := secs - finePoints + i
		if sm.Seconds != 1 || !sm.At.Equal(t0.Add(time.Duration(sec)*time.Second)) {
			t.Fatalf("fine sample %d: %+v, want second %d", i, sm, sec)
		}
		if sm.Up != (sec%50 != 7) {
			t.Fatalf("second %d: up %v", sec, sm.Up)
		}
		if sm.Up && math.Abs(sm.OneWayMs-delayAt(sec)) > 0.005 {
			t.Fatalf("second %d: %.3f ms, want %.3f", sec, sm.OneWayMs, delayAt(sec))
		}
		if math.Abs(sm.LossPct-float64(sec%10)/4) > 0.005 {
			t.Fatalf("second %d: loss %.2f", sec, sm.LossPct)
		}
	}
	// Coarse points: the mean delay of the seconds up, the largest loss.
	for c, sm := range got[:coarsePts] {
		sec := first + c*coarseEvery
		var sum float64
		var n int
		for s := sec; s < sec+coarseEvery; s++ {
			if s%50 != 7 {
				sum += delayAt(s)
				n++
			}
		}
		if sm.Seconds != coarseEvery || math.Abs(sm.OneWayMs-sum/float64(n)) > 0.01 || sm.LossPct != 2.25 {
			t.Fatalf("coarse sample %d (second %d): %+v, want %.3f ms, loss 2.25", c, sec, sm, sum/float64(n))
		}
	}
}

func TestGapsAndNewLinksAreUnknown(t *testing.T) {
	r := New(t0)
	ab := []Link{{From: "A", To: "B", Up: true, OneWayMs: 5}}
	r.Record(t0, ab)
	r.Record(t0.Add(4*time.Second), append(ab, Link{From: "A", To: "C", Up: true, OneWayMs: 7}))
	r.Record(t0.Add(4500*time.Millisecond), nil) // the same second: ignored
	r.Record(t0.Add(5*time.Second), ab)
	b, _ := r.Series("A", "B")
	c, _ := r.Series("A", "C")
	wantB := []bool{true, false, false, false, true, true}
	wantC := []bool{false, false, false, false, true, false}
	if len(b) != 6 || len(c) != 6 {
		t.Fatalf("%d and %d samples, want 6", len(b), len(c))
	}
	for i := range wantB {
		if b[i].Up != wantB[i] || c[i].Up != wantC[i] {
			t.Errorf("second %d: A>B up %v (want %v), A>C up %v (want %v)", i, b[i].Up, wantB[i], c[i].Up, wantC[i])
		}
	}
	if _, ok := r.Series("B", "A"); ok {
		t.Error("a link never recorded has a series")
	}
	if got := r.Links(); len(got) != 2 || got[0] != [2]string{"A", "B"} || got[1] != [2]string{"A", "C"} {
		t.Errorf("Links = %v", got)
	}
}

func TestDelaySaturatesAndNothingBreaksOnBadValues(t *testing.T) {
	r := New(t0)
	r.Record(t0, []Link{{From: "A", To: "B", Up: true, OneWayMs: 9000, LossPct: 900}, {From: "B", To: "A", Up: true, OneWayMs: -3, LossPct: math.NaN()}})
	ab, _ := r.Series("A", "B")
	if ab[0].OneWayMs < 655 || ab[0].OneWayMs > 656 {
		t.Errorf("a 9 s delay reads %.2f ms, want the 655 ms ceiling", ab[0].OneWayMs)
	}
	ba, _ := r.Series("B", "A")
	if !ba[0].Up || ba[0].OneWayMs != 0 || ba[0].LossPct != 0 {
		t.Errorf("a negative delay and a NaN loss read %+v", ba[0])
	}
}

func TestEvents(t *testing.T) {
	r := New(t0)
	for i := range MaxEvents + 5 {
		r.RouteChange(Event{At: t0.Add(time.Duration(i) * time.Second), Dest: "B", Reason: "better"})
	}
	all := r.Events(0)
	if len(all) != MaxEvents || all[0].Seq != 6 || all[len(all)-1].Seq != MaxEvents+5 {
		t.Fatalf("%d events from %d to %d", len(all), all[0].Seq, all[len(all)-1].Seq)
	}
	if got := r.Events(MaxEvents + 3); len(got) != 2 || got[0].Seq != MaxEvents+4 {
		t.Errorf("Events(since) = %+v", got)
	}
}

// The memory stated in the package comment: 3.6 KB a link, 10.4 MB at 54
// sites.
func TestBytes(t *testing.T) {
	r := New(t0)
	var links []Link
	for i := range 54 {
		for j := range 54 {
			if i != j {
				links = append(links, Link{From: string(rune('a' + i)), To: string(rune('a' + j)), Up: true})
			}
		}
	}
	r.Record(t0, links)
	if got := r.Bytes(); got < 10_300_000 || got > 10_500_000 {
		t.Errorf("54 sites take %d bytes, want about 10.4 MB", got)
	}
}

func TestSummaries(t *testing.T) {
	r := New(t0)
	for sec := range 30 {
		r.Record(t0.Add(time.Duration(sec)*time.Second), []Link{{From: "A", To: "B", Up: sec >= 10, OneWayMs: float64(sec), LossPct: float64(sec % 3)}})
	}
	s := r.Summaries()
	want := Summary{From: "A", To: "B", Seconds: 30, UpSeconds: 20, MinMs: 10, MedianMs: 20, MaxMs: 29, MaxLoss: 2}
	if len(s) != 1 || s[0] != want {
		t.Errorf("Summaries = %+v, want %+v", s, want)
	}
}
