// Package proc starts, watches and stops the lab's background programs,
// always by PID, never by name. There are two kinds:
//
//   - Detached processes (the testbed's emulator, agents, tincd, iperf3)
//     run in a session of their own and outlive the command that started
//     them. A Record names one by PID and start time, so that it can be
//     written to a state file and a recycled PID is never signalled.
//   - Children (the experiments' ZooKeeper and etcd servers) die with the
//     process that started them (PR_SET_PDEATHSIG), which waits for them.
//
// Both write their output to a log file whose end LogTail quotes when a
// program does not come up; WaitReady polls a readiness check while
// watching that the program still runs.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Record is a detached background process.
type Record struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// Start is the process's start time in clock ticks after boot
	// (/proc/PID/stat field 22): a PID whose start differs is not ours.
	Start uint64 `json:"start"`
}

// NewRecord records the running process pid.
func NewRecord(name string, pid int) Record {
	st, _ := stat(pid)
	return Record{Name: name, PID: pid, Start: st.start}
}

// procStat is what Record reads of /proc/PID/stat.
type procStat struct {
	start  uint64
	zombie bool
}

// stat reads the start time and state of process pid, or fails if there
// is no such process.
func stat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(b))
}

// parseStat parses a /proc/PID/stat line. The command name (field 2) may
// contain spaces and parentheses; the fields after the last ')' are fixed:
// the state (field 3) first, the start time (field 22) 20th.
func parseStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("unreadable stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procStat{}, errors.New("short stat")
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return procStat{start: start, zombie: f[0] == "Z"}, err
}

// Alive reports whether the process is still the one recorded (and not a
// zombie).
func (r Record) Alive() bool {
	st, err := stat(r.PID)
	return err == nil && st.start == r.Start && !st.zombie
}

// ThreadsGone reports whether no thread of the process is left but its
// leader. A killed multi-threaded process shows its leader as a zombie
// while its other threads are still exiting and still hold its files (a
// bound socket, for one), so Alive turning false is not enough before
// reusing what the process held.
func (r Record) ThreadsGone() bool {
	st, err := stat(r.PID)
	if err != nil || st.start != r.Start {
		return true
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(r.PID) + "/task")
	return err != nil || len(tasks) <= 1
}

// Kill stops the process if it is still the recorded one: SIGTERM, then
// SIGKILL after grace.
func (r Record) Kill(grace time.Duration) {
	if !r.Alive() {
		return
	}
	syscall.Kill(r.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !r.Alive() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r.Alive() {
		syscall.Kill(r.PID, syscall.SIGKILL)
	}
}

// StartDetached starts prog in a new session with its output in logPath
// and returns its record.
func StartDetached(logPath, name, prog string, args ...string) (Record, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return Record{}, err
	}
	defer logf.Close()
	cmd := exec.Command(prog, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return Record{}, fmt.Errorf("start %s: %w", name, err)
	}
	r := NewRecord(name, cmd.Process.Pid)
	// Reap the child if it exits while we are still running, so that it
	// does not linger as a zombie that looks alive.
	go cmd.Wait()
	return r, nil
}

// WaitReady polls ready every 20 ms until it holds, alive turns false,
// ctx is cancelled or the timeout passes; the errors quote the end of
// logPath.
func WaitReady(ctx context.Context, timeout time.Duration, name, logPath string, alive, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ready() {
			return nil
		}
		if !alive() {
			return fmt.Errorf("%s exited: %s", name, LogTail(logPath))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %s", name, timeout, LogTail(logPath))
		}
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// LogTail returns the last lines of the log at path.
func LogTail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "(no output in " + path + ")"
	}
	return strings.Join(lines, "\n")
}

// Listening reports whether process pid runs prog and its network
// namespace has a TCP socket listening on port (any address), read from
// /proc/PID/net/tcp. Checking the program first skips the moment before
// a wrapper ("ip netns exec") has entered the namespace and run it, when
// the table is the host's.
func Listening(pid int, prog string, port int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != prog {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return false
	}
	return tcpListens(string(b), port)
}

// tcpListens reports whether a /proc/net/tcp table has a socket in state
// LISTEN (0A) on the local port. A row reads
// "  0: 010012C6:028F 00000000:0000 0A ...".
func tcpListens(table string, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			return true
		}
	}
	return false
}
