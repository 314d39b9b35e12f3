package main

import (
	"strings"
	"testing"
	"time"
)

// TestProgress: a passing test gives one line with its time, a failing one
// its whole output (subtests included), a long one a "running" line, and
// go test's package lines pass unchanged; the other output of a passing
// test is not printed; the failed tests are listed again at the end with
// the lines their failing checks wrote.
func TestProgress(t *testing.T) {
	clock := time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)
	var b strings.Builder
	p := newPrinter(&b, func() time.Time { return clock })
	in := strings.Join([]string{
		`{"Action":"start","Package":"x/p"}`,
		`{"Action":"run","Package":"x/p","Test":"TestA"}`,
		`{"Action":"output","Package":"x/p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"x/p","Test":"TestA","Output":"    a_test.go:1: quiet detail\n"}`,
		`{"Action":"pass","Package":"x/p","Test":"TestA","Elapsed":1.5}`,
		`{"Action":"run","Package":"x/p","Test":"TestB"}`,
		`{"Action":"run","Package":"x/p","Test":"TestB/sub"}`,
		`{"Action":"output","Package":"x/p","Test":"TestB/sub","Output":"    b_test.go:9: 815.0 vs 962.8 Mbit/s\n","OutputType":"error"}`,
		`{"Action":"output","Package":"x/p","Test":"TestB/sub","Output":"        -15.3 %\n","OutputType":"error-continue"}`,
		`{"Action":"output","Package":"x/p","Test":"TestB/sub","Output":"    b_test.go:12: what came after\n"}`,
		`{"Action":"fail","Package":"x/p","Test":"TestB/sub","Elapsed":2}`,
		`{"Action":"output","Package":"x/p","Test":"TestB","Output":"--- FAIL: TestB (4.00s)\n"}`,
		`{"Action":"fail","Package":"x/p","Test":"TestB","Elapsed":4}`,
		`{"Action":"run","Package":"x/p","Test":"TestC"}`,
		`{"Action":"output","Package":"x/p","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"x/p","Output":"FAIL\tx/p\t5.5s\n"}`,
		`{"Action":"output","Package":"x/q","Output":"ok  \tx/q\t0.1s\n"}`,
		`not json: go: downloading something`,
	}, "\n")
	clock = clock.Add(90 * time.Second)
	if err := p.run(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(40 * time.Second)
	p.running(30 * time.Second)
	out := b.String()
	for _, want := range []string{
		"13:01:30 [+1m30s] pass TestA (1.5s)\n",
		"13:01:30 [+1m30s] FAIL TestB (4.0s) in x/p; its output:\n",
		"    b_test.go:9: 815.0 vs 962.8 Mbit/s\n",
		"\nFAIL\tx/p\t5.5s\n",
		"\nok  \tx/q\t0.1s\n",
		"\nnot json: go: downloading something\n",
		"13:02:10 [+2m10s] running TestC (40s)\n",
		"13:01:30 [+1m30s] 1 test(s) failed:\n  FAIL TestB (4.0s) in x/p\n   what failed:\n        b_test.go:9: 815.0 vs 962.8 Mbit/s\n            -15.3 %\n   last lines:\n        b_test.go:9: 815.0 vs 962.8 Mbit/s\n            -15.3 %\n        b_test.go:12: what came after\n    --- FAIL: TestB (4.00s)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "quiet detail") {
		t.Errorf("a passing test's output was printed:\n%s", out)
	}
}
