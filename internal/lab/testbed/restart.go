package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/detour-overlay/detour/internal/config"
)

// RestartOptions say how RestartAgent stops a site's agent.
type RestartOptions struct {
	// Kill stops the agent with SIGKILL (a crash: no leave is sent)
	// instead of SIGTERM (a clean stop: the agent leaves and the other
	// sites drop it at once).
	Kill bool
	// Pause is how long the site stays without an agent.
	Pause time.Duration
	// Detour is the detour binary to start; empty means the one the
	// testbed started the agents with.
	Detour string
}

// Restart reports what RestartAgent did.
type Restart struct {
	// Down is the time from the stop signal to the new agent's API
	// answering.
	Down time.Duration
	PID  int
}

// RestartAgent stops the detour agent of a site (if it still runs) and
// starts it again with the same configuration file, as the testbed first
// started it, then waits until its API answers. An agent that already
// died (killed by a test) is simply started again. On the easytier
// overlay it does the same with the site's easytier-core.
func RestartAgent(dir, site string, o RestartOptions) (*Restart, error) {
	st, err := LoadState(dir)
	if err != nil {
		return nil, err
	}
	s := st.Site(site)
	if s == nil {
		return nil, fmt.Errorf("unknown site %q", site)
	}
	if st.Overlay == "easytier" {
		return restartEasyTier(dir, st, site, o)
	}
	if !usesDetour(st.Overlay) {
		return nil, fmt.Errorf("the testbed runs overlay %q, not detour", st.Overlay)
	}
	name := "agent-" + tincName(s.Name)
	file := filepath.Join(dir, "detour", tincName(s.Name)+".yaml")
	if _, err := os.Stat(file); err != nil {
		return nil, fmt.Errorf("agent configuration of %s: %w", s.Name, err)
	}
	bin := o.Detour
	if bin == "" {
		bin = st.DetourBin
	}
	bin, err = FindDetour(bin)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	idx := stopAgent(st, name, o.Kill)
	time.Sleep(o.Pause)
	p, err := startDetached(dir, name, "ip", "netns", "exec", s.Gateway, bin, "agent", "--config", file)
	if err != nil {
		return nil, err
	}
	if idx >= 0 {
		st.Procs[idx] = p
	} else {
		st.Procs = append(st.Procs, p)
	}
	if err := st.Save(dir); err != nil {
		return nil, err
	}
	err = waitFor(context.Background(), 10*time.Second, p, dir, func() bool {
		return exec.Command("ip", "netns", "exec", s.Gateway, bin, "status", "--api", config.DefaultAPI).Run() == nil
	})
	if err != nil {
		return nil, err
	}
	return &Restart{Down: time.Since(t0), PID: p.PID}, nil
}

// stopAgent stops the recorded process name (SIGKILL, or SIGTERM with a
// grace of 3 s) and waits for it to be gone; it returns the process's
// index in st.Procs, or -1.
func stopAgent(st *State, name string, kill bool) int {
	for i, p := range st.Procs {
		if p.Name != name {
			continue
		}
		if kill && p.Alive() {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		p.Kill(3 * time.Second)
		for deadline := time.Now().Add(3 * time.Second); (p.Alive() || !p.ThreadsGone()) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		return i
	}
	return -1
}
