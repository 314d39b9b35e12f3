// Command testprogress reads the events of `go test -json` on its standard
// input and prints the progress of a long test run: each top-level test as
// it passes, fails or is skipped, with the time since the start; every 30
// s the tests still running; the full output of each failed test; go
// test's own package lines ("ok", "FAIL", build errors) unchanged, so that
// readers of plain go test output still find them; and at the end, again,
// each failed test with the lines its t.Error and t.Fatal calls wrote and
// the last lines of its output, so that a reader of only the tail of a
// long log (a CI page) sees what failed. `make test` runs it.
//
// Usage: go test -json ./... | go run ./internal/devtools/testprogress
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	p := newPrinter(os.Stdout, time.Now)
	stop := p.tick(30 * time.Second)
	err := p.run(os.Stdin)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
	// OutputType is "error" on a line a t.Error or t.Fatal call wrote and
	// "error-continue" on its further lines; go test releases after 1.26
	// mark them so, older ones leave it empty.
	OutputType string
}

// printer turns events into progress lines.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	now   func() time.Time
	start time.Time
	// out holds, per package and top-level test, the output of the test
	// and its subtests until it ends.
	out map[[2]string][]string
	// errs holds, in the same way, the lines of that output that t.Error
	// and t.Fatal calls wrote.
	errs map[[2]string][]string
	// started is when each running top-level test began.
	started map[[2]string]time.Time
	// failed holds the failed top-level tests, for the summary.
	failed []failure
}

// failure is one failed top-level test: its name, package, the lines its
// failing checks wrote and the last lines of its output.
type failure struct {
	test, pkg string
	elapsed   float64
	errs      []string
	tail      []string
}

// summaryLines is how many of a failed test's last output lines the
// summary repeats, and summaryErrors how many of its error lines.
const (
	summaryLines  = 30
	summaryErrors = 20
)

func newPrinter(w io.Writer, now func() time.Time) *printer {
	return &printer{w: w, now: now, start: now(), out: map[[2]string][]string{}, errs: map[[2]string][]string{}, started: map[[2]string]time.Time{}}
}

// run reads events until the end of r. Lines that are not JSON events
// (go's own messages on a merged stderr) are printed as they are.
func (p *printer) run(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
			p.print(line + "\n")
			continue
		}
		p.handle(e)
	}
	p.summary()
	return sc.Err()
}

// summary prints, when any test failed, each failed test again with the
// lines its failing checks wrote and the last lines of its output.
func (p *printer) summary() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failed) == 0 {
		return
	}
	fmt.Fprintf(p.w, "%s %d test(s) failed:\n", p.stamp(), len(p.failed))
	for _, f := range p.failed {
		fmt.Fprintf(p.w, "  FAIL %s (%.1fs) in %s\n", f.test, f.elapsed, f.pkg)
		if len(f.errs) > 0 {
			io.WriteString(p.w, "   what failed:\n")
			for _, l := range f.errs {
				io.WriteString(p.w, "    "+l)
			}
		}
		io.WriteString(p.w, "   last lines:\n")
		for _, l := range f.tail {
			io.WriteString(p.w, "    "+l)
		}
	}
}

// stamp is the prefix of a progress line: the wall time and the time since
// the start.
func (p *printer) stamp() string {
	t := p.now()
	return fmt.Sprintf("%s [+%s]", t.Format("15:04:05"), t.Sub(p.start).Round(time.Second))
}

func (p *printer) print(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	io.WriteString(p.w, s)
}

// handle prints what one event calls for.
func (p *printer) handle(e event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.Action == "build-output" {
		io.WriteString(p.w, e.Output)
		return
	}
	if e.Test == "" {
		// Package lines: go test's "ok"/"FAIL" summary and anything the
		// package printed outside a test (TestMain, a panic, a timeout).
		if e.Action == "output" && e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
			io.WriteString(p.w, e.Output)
		}
		return
	}
	top, _, sub := strings.Cut(e.Test, "/")
	key := [2]string{e.Package, top}
	switch e.Action {
	case "run":
		if !sub {
			p.started[key] = p.now()
			p.out[key] = nil
			p.errs[key] = nil
		}
	case "output":
		p.out[key] = append(p.out[key], e.Output)
		if e.OutputType == "error" || e.OutputType == "error-continue" {
			p.errs[key] = append(p.errs[key], e.Output)
		}
	case "pass", "fail", "skip":
		if sub {
			return
		}
		if e.Action == "fail" {
			fmt.Fprintf(p.w, "%s FAIL %s (%.1fs) in %s; its output:\n", p.stamp(), top, e.Elapsed, e.Package)
			out := p.out[key]
			for _, l := range out {
				io.WriteString(p.w, "    "+l)
			}
			tail := out[max(0, len(out)-summaryLines):]
			errs := p.errs[key][:min(len(p.errs[key]), summaryErrors)]
			p.failed = append(p.failed, failure{test: top, pkg: e.Package, elapsed: e.Elapsed, errs: errs, tail: tail})
		} else {
			fmt.Fprintf(p.w, "%s %s %s (%.1fs)\n", p.stamp(), e.Action, top, e.Elapsed)
		}
		delete(p.out, key)
		delete(p.errs, key)
		delete(p.started, key)
	}
}

// tick prints, every d, the top-level tests that have run for longer than
// d; the returned function stops it.
func (p *printer) tick(d time.Duration) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.running(d)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// running prints the tests that have run for longer than d.
func (p *printer) running(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for k, t0 := range p.started {
		if el := p.now().Sub(t0); el >= d {
			names = append(names, fmt.Sprintf("%s (%s)", k[1], el.Round(time.Second)))
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	fmt.Fprintf(p.w, "%s running %s\n", p.stamp(), strings.Join(names, ", "))
}
