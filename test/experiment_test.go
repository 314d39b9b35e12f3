//go:build netns

// Package test holds the tests that run the real thing in network
// namespaces (build tag netns, root). This file runs the short version of
// the LANMAN 2017 ZooKeeper experiment and checks the direction of the
// effect, not exact figures.
package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/results"
)

// experimentPrefix and experimentState keep this test's testbed apart from
// any other on the machine.
const (
	experimentPrefix = "dz-"
	experimentState  = "/run/detour/test-experiment"
)

func TestLanman2017ShortShowsTheEffect(t *testing.T) {
	if os.Getenv("DETOUR_BIN") == "" {
		t.Skip("DETOUR_BIN not set (make test sets it)")
	}
	bin := labBin(t)
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err != nil {
		t.Skip("ZooKeeper not installed (scripts/install-deps.sh)")
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "experiment", "lanman2017", "--short", "--out", out, "--plot", "none")
	cmd.Env = append(os.Environ(), "DETOUR_TESTBED_PREFIX="+experimentPrefix, "DETOUR_TESTBED_STATE="+experimentState)
	// On a timeout the experiment gets SIGTERM and cleans up itself.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	start := time.Now()
	output, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	t.Logf("experiment output:\n%s", output)
	t.Cleanup(func() { checkNothingLeft(t, cmd.Process.Pid) })
	if err != nil {
		t.Fatalf("detour-lab experiment lanman2017 --short: %v", err)
	}
	if elapsed > 3*time.Minute {
		t.Errorf("the short experiment took %v, want under 3 minutes", elapsed.Round(time.Second))
	}
	rows := readSummary(t, filepath.Join(out, "summary.csv"))
	med := func(ov, phase, op, server string) float64 {
		r, ok := results.Find(rows, results.Key{Overlay: ov, Phase: phase, Op: op, Server: server})
		if !ok || r.N == 0 {
			t.Fatalf("no samples for %s %s %s via %s", ov, phase, op, server)
		}
		return r.MedianMs
	}
	// Phase (b) degrades what crosses CLU<->LAN: reads and writes through
	// CLU, writes through LAN (the idle one-way delay of 31 ms rises to
	// about 65 ms).
	for _, c := range [][2]string{{"read", "CLU"}, {"write", "CLU"}, {"write", "LAN"}} {
		a, b := med("vxlan", "a", c[0], c[1]), med("vxlan", "b", c[0], c[1])
		if b < 1.2*a {
			t.Errorf("vxlan %s via %s: phase b median %.1f ms is not clearly above phase a's %.1f ms", c[0], c[1], b, a)
		}
	}
	// With detour free to reroute, phase (c) recovers: below vxlan's
	// loaded phase for each degraded operation, by a margin over them
	// taken together (a single median of ten operations under TCP cross
	// traffic moves by tens of milliseconds; the full experiment's margin
	// is about a third), and close to detour's own idle phase. This is the
	// direction of the effect, which is what the short run can show.
	var sumVB, sumDC float64
	for _, c := range [][2]string{{"read", "CLU"}, {"write", "CLU"}, {"write", "LAN"}} {
		vb, dc, da := med("vxlan", "b", c[0], c[1]), med("detour", "c", c[0], c[1]), med("detour", "a", c[0], c[1])
		sumVB += vb
		sumDC += dc
		if dc > 0.95*vb {
			t.Errorf("detour %s via %s: phase c median %.1f ms is not below vxlan's loaded %.1f ms", c[0], c[1], dc, vb)
		}
		if dc > 1.3*da {
			t.Errorf("detour %s via %s: phase c median %.1f ms did not recover towards phase a's %.1f ms", c[0], c[1], dc, da)
		}
	}
	if sumDC > 0.9*sumVB {
		t.Errorf("detour's phase c medians add up to %.1f ms, not clearly below vxlan's loaded %.1f ms", sumDC, sumVB)
	}
	if b, err := os.ReadFile(filepath.Join(out, "routes.csv")); err != nil || !strings.Contains(string(b), "NEU") {
		t.Errorf("the continuous run recorded no route through NEU (%v):\n%s", err, b)
	}
}

func readSummary(t *testing.T, path string) []results.Row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := results.ReadSummaryCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// checkNothingLeft fails when a namespace of the test's testbed or a
// ZooKeeper server of the experiment (process pid, whose servers keep
// their files under /run/detour/experiment-PID) survived.
func checkNothingLeft(t *testing.T, pid int) {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), experimentPrefix) {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "QuorumPeerMain") && strings.Contains(string(b), fmt.Sprintf("/run/detour/experiment-%d/", pid)) {
			t.Errorf("ZooKeeper server left behind: %s", p)
		}
	}
}
