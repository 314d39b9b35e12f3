package narrow

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func TestStreamOverLoopback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go ServeEcho(l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	s, err := Stream(ctx, c, 10*time.Millisecond, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// One request every 10 ms for 200 ms.
	if len(s) < 15 || len(s) > 21 {
		t.Errorf("%d requests in 200 ms at one per 10 ms", len(s))
	}
	// The requests keep to a 10 ms schedule: one sent late is followed
	// by the next on time, not 10 ms after it.
	if mean := s[len(s)-1].At.Sub(s[0].At) / time.Duration(len(s)-1); mean < 9*time.Millisecond || mean > 11*time.Millisecond {
		t.Errorf("requests %v apart on average, want 10 ms", mean)
	}
	if p := Percentile(s, 50); p <= 0 || p > 50*time.Millisecond {
		t.Errorf("loopback p50 %v", p)
	}
}

func TestStreamFailsWithoutReply(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			time.Sleep(time.Second) // never answers
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := Stream(context.Background(), c, 10*time.Millisecond, 50*time.Millisecond); err == nil {
		t.Error("a stream without replies did not fail")
	}
}

func TestPercentile(t *testing.T) {
	var s []Sample
	for i := 1; i <= 100; i++ {
		s = append(s, Sample{RTT: time.Duration(i) * time.Millisecond})
	}
	if p := Percentile(s, 50); p != 50*time.Millisecond {
		t.Errorf("p50 %v", p)
	}
	if p := Percentile(s, 95); p != 95*time.Millisecond {
		t.Errorf("p95 %v", p)
	}
	if Percentile(nil, 50) != 0 || percentileMs(nil, 50) != 0 {
		t.Error("percentile of nothing")
	}
}

func TestParseIperf(t *testing.T) {
	r, err := parseIperf([]byte(`{"end":{"sum_sent":{"bytes":1000,"bits_per_second":8e7,"retransmits":3},"sum_received":{"seconds":10,"bytes":990,"bits_per_second":7.9e7}}}`))
	if err != nil || r.End.SumReceived.BitsPerSecond != 7.9e7 || r.End.SumSent.Retransmits != 3 {
		t.Errorf("%+v, %v", r, err)
	}
	if _, err := parseIperf([]byte(`{"error":"unable to connect to server"}`)); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("iperf3's error: %v", err)
	}
	if _, err := parseIperf([]byte(`{"end":{}}`)); err == nil {
		t.Error("a report without a transfer accepted")
	}
}

func TestSummarizeAndTable(t *testing.T) {
	r := OverlayResult{Overlay: "detour", ThroughputMbps: 150, Idle: []float64{20, 20, 21}, Load: []float64{70, 70, 21, 21, 21},
		LoadAtS: []float64{0, 1, 4, 5, 6}, ChangeAtS: 3.5,
		Counters: map[string]map[string]uint64{
			West: {"class_changes": 1, "control_out_bytes_probe": 1000, "control_out_bytes_probe-reply": 500, "probe_bytes": 300, "bulk_frames": 9},
			East: {"flow_reordered": 0, "control_out_bytes_probe": 900},
		},
		Totals: map[string]map[string]uint64{West: {"probe_bytes": 5000}, East: {"probe_bytes": 4000}}}
	s := r.Summarize()
	if s.Times != 7.5 || s.IdleP50 != 20 || s.LoadP50 != 21 || s.AfterP50 != 21 || s.Reordered != 0 || s.PingDuring != 2400 || s.ProbeBytes != 9000 || s.ProbeDuring != 300 {
		t.Errorf("summary %+v", s)
	}
	res := &Result{Overlays: []OverlayResult{{Overlay: "vxlan", ThroughputMbps: 19, Idle: []float64{20}, Load: []float64{70}, ChangeAtS: -1}, r}}
	var b bytes.Buffer
	res.WriteTable(&b)
	out := b.String()
	for _, want := range []string{"| vxlan | 19.0 | 0.9 | 20.00 | 70.00 | +250 % |", "| – | 0 | – | – | – |", "| detour | 150.0 | 7.5 |", "| 21.00 | 0 | 0 | 9000 / 300 | 2400 |", "West: bulk_frames=9 class_changes=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestDelta(t *testing.T) {
	d := delta(map[string]map[string]uint64{West: {"a": 1, "b": 5}}, map[string]map[string]uint64{West: {"a": 4, "b": 5, "c": 2}})
	if len(d[West]) != 2 || d[West]["a"] != 3 || d[West]["c"] != 2 {
		t.Errorf("delta %v", d)
	}
}
