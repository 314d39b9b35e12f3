package results

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5}
	if q := Quantile(v, 0.5); q != 3 {
		t.Errorf("median = %v", q)
	}
	if q := Quantile(v, 0.95); math.Abs(q-4.8) > 1e-9 {
		t.Errorf("p95 = %v, want 4.8", q)
	}
	if q := Quantile([]float64{1, 2}, 0.5); q != 1.5 {
		t.Errorf("median of two = %v", q)
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("quantile of nothing is not NaN")
	}
}

func TestCSVRoundTripAndSummary(t *testing.T) {
	t0 := time.Unix(1700000000, 123)
	var recs []Record
	for i, lat := range []float64{60, 62, 61, 100, 63} {
		recs = append(recs, Record{Overlay: "vxlan", Phase: "a", Server: "CLU", Op: "read", Seq: i,
			Start: t0.Add(time.Duration(i) * time.Second), Latency: time.Duration(lat * float64(time.Millisecond))})
	}
	recs = append(recs, Record{Overlay: "vxlan", Phase: "a", Server: "CLU", Op: "read", Seq: 5, Start: t0, Err: "timeout"})
	var buf bytes.Buffer
	if err := WriteCSV(&buf, recs); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(recs) || !back[2].Start.Equal(recs[2].Start) || back[3].Latency != 100*time.Millisecond || back[5].Err != "timeout" {
		t.Fatalf("round trip changed the records: %+v", back)
	}
	rows := Summarize(back)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	r := rows[0]
	if r.N != 5 || r.Errors != 1 || r.MedianMs != 62 {
		t.Errorf("row %+v: want n=5, errors=1, median 62", r)
	}
	r.PredictedMs = 60
	var out bytes.Buffer
	if err := PrintTable(&out, []Row{r}); err != nil {
		t.Fatal(err)
	}
	var sum bytes.Buffer
	if err := WriteSummaryCSV(&sum, []Row{r}); err != nil {
		t.Fatal(err)
	}
	srows, err := ReadSummaryCSV(&sum)
	if err != nil || len(srows) != 1 || srows[0] != r {
		t.Errorf("summary round trip: %+v, %v; want %+v", srows, err, r)
	}
	if !strings.Contains(out.String(), "+3.3%") || !strings.Contains(out.String(), "5 (1 failed)") {
		t.Errorf("table lacks the error column or failure count:\n%s", out.String())
	}
}

func TestReadCSVRejectsOtherFiles(t *testing.T) {
	if _, err := ReadCSV(strings.NewReader("a,b\n1,2\n")); err == nil {
		t.Error("no error for a file with another header")
	}
}
