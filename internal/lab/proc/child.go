package proc

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Child is a started process that dies with the process that started it;
// a goroutine waits for it from the start.
type Child struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartChild starts cmd (built, not started) with its output in logPath.
// The child gets SIGKILL when this process dies, even without a chance to
// clean up.
func StartChild(name string, cmd *exec.Cmd, logPath string) (*Child, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{Name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	return c, nil
}

// PID is the child's process ID.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Exited reports whether the child has exited, and how.
func (c *Child) Exited() (bool, *os.ProcessState) {
	select {
	case <-c.done:
		return true, c.cmd.ProcessState
	default:
		return false, nil
	}
}

// StopAll sends SIGTERM to every child, then waits for each, killing one
// that has not exited after grace.
func StopAll(children []*Child, grace time.Duration) {
	for _, c := range children {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range children {
		select {
		case <-c.done:
		case <-time.After(grace):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
}
