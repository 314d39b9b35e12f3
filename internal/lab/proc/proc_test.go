package proc

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A /proc/net/tcp table as Linux 6.18 prints it: a header, a socket
// listening on 198.18.0.1:655, one connected to that port from elsewhere
// and one listening on port 6550.
const tcpTable = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 010012C6:028F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41211 1 0000000000000000 100 0 0 10 0
   1: 020012C6:9D2F 010012C6:028F 01 00000000:00000000 00:00000000 00000000     0        0 41302 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1996 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41377 1 0000000000000000 100 0 0 10 0
`

func TestTCPListens(t *testing.T) {
	for _, c := range []struct {
		table string
		port  int
		want  bool
	}{
		{tcpTable, 655, true},
		{tcpTable, 6550, true},
		{tcpTable, 40239, false}, // 9D2F is a connected socket's local port, not a listener
		{tcpTable, 22, false},
		{"  sl  local_address rem_address   st\n", 655, false},
		{"", 655, false},
	} {
		if got := tcpListens(c.table, c.port); got != c.want {
			t.Errorf("tcpListens(port %d) = %v, want %v", c.port, got, c.want)
		}
	}
}

// parseStat reads the state and the start time after the command name,
// which may hold spaces and parentheses.
func TestParseStat(t *testing.T) {
	rest := " 1 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 4242 1000 10"
	for _, c := range []struct {
		line   string
		start  uint64
		zombie bool
		ok     bool
	}{
		{"12 (sleep) S" + rest, 4242, false, true},
		{"12 (a) b (c)) Z" + rest, 4242, true, true},
		{"12 (sleep) S 1 1", 0, false, false},
		{"12 sleep S" + rest, 0, false, false},
	} {
		st, err := parseStat(c.line)
		if (err == nil) != c.ok || st.start != c.start || st.zombie != c.zombie {
			t.Errorf("parseStat(%q) = %+v, %v; want start %d zombie %v ok %v", c.line, st, err, c.start, c.zombie, c.ok)
		}
	}
}

// A detached process is alive until killed, and a record whose start
// time differs is not that process.
func TestDetachedRecord(t *testing.T) {
	dir := t.TempDir()
	r, err := StartDetached(filepath.Join(dir, "sleep.log"), "sleep", "sleep", "30")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(0) })
	if !r.Alive() {
		t.Fatal("a started sleep is not alive")
	}
	if other := (Record{PID: r.PID, Start: r.Start + 1}); other.Alive() || !other.ThreadsGone() {
		t.Error("a record with another start time counts as the process")
	}
	r.Kill(2 * time.Second)
	if r.Alive() {
		t.Error("alive after Kill")
	}
}

// WaitReady returns when ready holds, and quotes the log of a process that
// exited before.
func TestWaitReady(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "x.log")
	r, err := StartDetached(log, "x", "sh", "-c", "echo no config; exit 1")
	if err != nil {
		t.Fatal(err)
	}
	err = WaitReady(context.Background(), 5*time.Second, "x", log, r.Alive, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "x exited: no config") {
		t.Errorf("WaitReady on a dead process: %v; want its log quoted", err)
	}
	n := 0
	err = WaitReady(context.Background(), 5*time.Second, "y", log, func() bool { return true }, func() bool { n++; return n == 3 })
	if err != nil || n != 3 {
		t.Errorf("WaitReady = %v after %d polls; want nil after 3", err, n)
	}
	err = WaitReady(context.Background(), 30*time.Millisecond, "z", filepath.Join(dir, "none.log"), func() bool { return true }, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "z not ready after 30ms: (no output in ") {
		t.Errorf("WaitReady past its timeout: %v", err)
	}
}

// StopAll ends children by PID: SIGTERM, and SIGKILL for one that ignores
// it (an ignored signal stays ignored across exec).
func TestStopAll(t *testing.T) {
	dir := t.TempDir()
	polite, err := StartChild("polite", exec.Command("sleep", "30"), filepath.Join(dir, "polite.log"))
	if err != nil {
		t.Fatal(err)
	}
	stubborn, err := StartChild("stubborn", exec.Command("sh", "-c", "trap '' TERM; echo ready; exec sleep 30"), filepath.Join(dir, "stubborn.log"))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(LogTail(filepath.Join(dir, "stubborn.log")), "ready"); {
		if time.Now().After(deadline) {
			t.Fatal("the stubborn child never set its trap")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if done, _ := polite.Exited(); done {
		t.Fatal("exited before StopAll")
	}
	t0 := time.Now()
	StopAll([]*Child{polite, stubborn}, 300*time.Millisecond)
	for _, c := range []*Child{polite, stubborn} {
		if done, _ := c.Exited(); !done {
			t.Errorf("%s still runs after StopAll", c.Name)
		}
	}
	if d := time.Since(t0); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("StopAll took %v; want the grace of 300ms for the stubborn child, then a kill", d)
	}
}

// StopOne ends one child of a group by name and leaves the others.
func TestGroupStopOne(t *testing.T) {
	dir := t.TempDir()
	var g Group
	for _, name := range []string{"a", "b"} {
		if err := g.Start(name, []string{"sleep", "30"}, nil, filepath.Join(dir, name+".log")); err != nil {
			t.Fatal(err)
		}
	}
	defer g.Stop(time.Second)
	a := g.Children()[0]
	if !g.StopOne("a", time.Second) || g.StopOne("nobody", time.Second) {
		t.Fatal("StopOne found the wrong children")
	}
	if done, _ := a.Exited(); !done {
		t.Error("a still runs after StopOne")
	}
	if len(g.Children()) != 1 || g.Children()[0].Name != "b" {
		t.Errorf("children after StopOne: %v", g.Children())
	}
	if done, _ := g.Children()[0].Exited(); done {
		t.Error("b exited")
	}
}
