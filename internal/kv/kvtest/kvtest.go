// Package kvtest starts the real programs the key-value packages are
// tested against (memcached, nutcracker) on loopback addresses, and stops
// them by PID when the test ends, whatever its outcome.
package kvtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Need returns the path of program name, or skips the test when it is
// missing; with CI=true in the environment a missing program fails the
// test instead, so a CI run cannot pass without the comparison.
func Need(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (scripts/install-deps.sh installs it); CI=true forbids skipping", name)
	}
	t.Skipf("%s is not installed (scripts/install-deps.sh installs it)", name)
	return ""
}

// FreePort returns a TCP port on host that was free a moment ago.
func FreePort(t testing.TB, host string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("no free port on %s: %v", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs a program and kills it by PID (SIGKILL, then waits for it)
// when the test ends. Its output goes to a file in the test's temporary
// directory, printed when the test fails.
func Start(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out-*")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout = out
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("%s %s (pid %d) wrote:\n%s", name, strings.Join(args, " "), pid, b)
		}
		out.Close()
	})
	return cmd
}

// Memcached starts memcached on host:port over TCP, and over UDP on the
// same port when udp is true, and waits until it answers.
func Memcached(t testing.TB, host string, port int, udp bool) {
	t.Helper()
	bin := Need(t, "memcached")
	u := "0"
	if udp {
		u = strconv.Itoa(port)
	}
	args := []string{"-l", host, "-p", strconv.Itoa(port), "-U", u, "-m", "64", "-t", "1", "-c", "256"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "nobody")
	}
	Start(t, bin, args...)
	WaitTCP(t, net.JoinHostPort(host, strconv.Itoa(port)), "version\r\n", "VERSION")
}

// WaitTCP waits up to 5 s until addr accepts a connection and answers req
// with a line starting with want.
func WaitTCP(t testing.TB, addr, req, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		last = probe(addr, req, want)
		if last == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not answer: %v", addr, last)
}

// probe sends req to addr once and checks the first reply line.
func probe(addr, req, want string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, want) {
		return fmt.Errorf("answered %q", line)
	}
	return nil
}
