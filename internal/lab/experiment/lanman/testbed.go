// Package lanman runs the experiment of the LANMAN 2017 paper "On the
// Impact of Indirect WAN Routing on Geo-Replicated Storage" on detour's
// testbed: a ZooKeeper ensemble at CLU (leader), BOR and LAN of the
// lanman2017 scenario, a client at LAN timing synchronous 1 KB reads and
// writes through each server, in three phases: (a) idle WAN, (b) TCP cross
// traffic filling CLU<->LAN outside the overlay, (c) the same load with
// detour free to route around it; and a continuous run (the paper's
// Figure 7) with the timeline of detour's route changes. It predicts every
// median from the delays measured during the phase (the quorum model of
// package model) and writes samples, summary, predictions, versions and
// plots to a results directory.
//
// The testbed is driven through the lab binary's own CLI (`detour-lab
// testbed up|down|status|truth`), so the experiment sees exactly what a
// user sees; the answers are read into the testbed's own Go types.
package lanman

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/lab/testbed"
	"github.com/detour-overlay/detour/internal/lab/wanem"
)

// Testbed drives `detour-lab testbed` through the detour-lab binary and
// reads its answers into the testbed package's own types.
type Testbed struct {
	// Bin is the detour-lab binary.
	Bin string
	// Detour, when set, is the detour binary the agents run ($DETOUR_BIN
	// of the testbed commands).
	Detour string
	// StateDir and Prefix, when set, give this testbed its own state
	// directory and namespace names, so that it does not disturb another
	// testbed on the same machine.
	StateDir, Prefix string
	// Log receives the testbed commands' output.
	Log func(format string, args ...any)

	status testbed.Status
}

// site returns the named site of st, which must have a host.
func site(st *testbed.Status, name string) (testbed.SiteState, error) {
	s := st.Site(name)
	if s == nil {
		return testbed.SiteState{}, fmt.Errorf("testbed: no site %s", name)
	}
	if len(s.Hosts) == 0 {
		return *s, fmt.Errorf("testbed: site %s has no host", name)
	}
	return *s, nil
}

func (t *Testbed) run(ctx context.Context, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.Bin, args...)
	cmd.Env = os.Environ()
	if t.StateDir != "" {
		cmd.Env = append(cmd.Env, "DETOUR_TESTBED_STATE="+t.StateDir)
	}
	if t.Prefix != "" {
		cmd.Env = append(cmd.Env, "DETOUR_TESTBED_PREFIX="+t.Prefix)
	}
	if t.Detour != "" {
		cmd.Env = append(cmd.Env, testbed.DetourEnv+"="+t.Detour)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("detour-lab %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// Up brings the scenario up with the given overlay and reads its status.
func (t *Testbed) Up(ctx context.Context, scenario, overlay string) error {
	out, err := t.run(ctx, 2*time.Minute, "testbed", "up", scenario, "--overlay", overlay)
	if t.Log != nil {
		t.Log("%s", bytes.TrimSpace(out))
	}
	if err != nil {
		return err
	}
	return t.refresh(ctx)
}

func (t *Testbed) refresh(ctx context.Context) error {
	out, err := t.run(ctx, 30*time.Second, "testbed", "status", "--json")
	if err != nil {
		return err
	}
	var s testbed.Status
	if err := json.Unmarshal(out, &s); err != nil {
		return fmt.Errorf("testbed status: %w", err)
	}
	t.status = s
	return nil
}

// Status is the testbed's status as read after Up.
func (t *Testbed) Status() *testbed.Status { return &t.status }

// Down tears the testbed down. It uses a fresh context so that it also
// runs after the experiment was interrupted.
func (t *Testbed) Down() error {
	_, err := t.run(context.Background(), 2*time.Minute, "testbed", "down")
	return err
}

// Truth reads the emulator's ground truth: per directed link, the
// configured delay plus the current queueing.
func (t *Testbed) Truth(ctx context.Context) ([]wanem.LinkTruth, error) {
	out, err := t.run(ctx, 10*time.Second, "testbed", "truth", "--json")
	if err != nil {
		return nil, err
	}
	var tr wanem.Truth
	if err := json.Unmarshal(out, &tr); err != nil {
		return nil, fmt.Errorf("testbed truth: %w", err)
	}
	return tr.Links, nil
}

// Traffic starts or stops a cross-traffic flow of the scenario (`detour-lab
// testbed traffic start|stop NAME`): iperf3 between the gateways over the
// underlay, outside any overlay.
func (t *Testbed) Traffic(ctx context.Context, action, flow string) error {
	_, err := t.run(ctx, 30*time.Second, "testbed", "traffic", action, flow)
	return err
}

// TrafficRunning reports whether flow is running (`detour-lab testbed
// traffic list`).
func (t *Testbed) TrafficRunning(ctx context.Context, flow string) (bool, error) {
	out, err := t.run(ctx, 10*time.Second, "testbed", "traffic", "list")
	if err != nil {
		return false, err
	}
	list, _ := strings.CutPrefix(strings.TrimSpace(string(out)), "running:")
	for _, f := range strings.Split(list, ",") {
		if strings.TrimSpace(f) == flow {
			return true, nil
		}
	}
	return false, nil
}
