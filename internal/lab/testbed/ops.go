package testbed

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/detour-overlay/detour/internal/lab/scenario"
	"github.com/detour-overlay/detour/internal/lab/wanem"
)

// Status describes a running testbed.
type Status struct {
	State
	// Alive tells, per recorded process, whether it still runs.
	Alive map[string]bool `json:"alive"`
	// EmulatorUptimeS is zero when the emulator does not answer.
	EmulatorUptimeS float64  `json:"emulator_uptime_s"`
	Traffic         []string `json:"traffic"`
}

// GetStatus reads the state and checks the processes and the emulator.
func GetStatus(dir string) (*Status, error) {
	st, err := LoadState(dir)
	if err != nil {
		return nil, err
	}
	s := &Status{State: *st, Alive: map[string]bool{}, Traffic: []string{}}
	for _, p := range st.Procs {
		s.Alive[p.Name] = p.Alive()
	}
	var ping map[string]float64
	if wanem.Call(socketPath(dir), wanem.Request{Op: "ping"}, &ping) == nil {
		s.EmulatorUptimeS = ping["uptime_s"]
	}
	var tr TrafficResult
	if wanem.Call(socketPath(dir), wanem.Request{Op: "traffic"}, &tr) == nil {
		s.Traffic = tr.Running
	}
	return s, nil
}

// Target resolves "SITE", "SITE/K" or "SITE/hK" (host K, 1-based) to a
// namespace; gateway selects the site's gateway instead of a host.
func Target(st *State, target string, gateway bool) (string, error) {
	siteName, host, hasHost := strings.Cut(target, "/")
	site := st.Site(siteName)
	if site == nil {
		var names []string
		for _, s := range st.Sites {
			names = append(names, s.Name)
		}
		return "", fmt.Errorf("unknown site %q (sites: %s)", siteName, strings.Join(names, ", "))
	}
	if gateway {
		if hasHost {
			return "", fmt.Errorf("%q: --gateway takes a site, not a host", target)
		}
		return site.Gateway, nil
	}
	if !hasHost {
		return site.Hosts[0].NS, nil
	}
	k, err := strconv.Atoi(strings.TrimPrefix(host, "h"))
	if err != nil || k < 1 || k > len(site.Hosts) {
		return "", fmt.Errorf("%q: site %s has hosts 1..%d", target, site.Name, len(site.Hosts))
	}
	return site.Hosts[k-1].NS, nil
}

// Exec replaces the current process with cmd run in namespace ns.
func Exec(ns string, cmd []string) error {
	if len(cmd) == 0 {
		return fmt.Errorf("no command to run")
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		return err
	}
	args := append([]string{"ip", "netns", "exec", ns}, cmd...)
	return syscall.Exec(ipPath, args, syscall.Environ())
}

// SetLink changes the directed link from -> to (and to -> from with
// both) in the running emulator.
func SetLink(dir, from, to string, both bool, patch scenario.Patch) (*wanem.SetResult, error) {
	if err := needEmulator(dir); err != nil {
		return nil, err
	}
	var res wanem.SetResult
	err := wanem.Call(socketPath(dir), wanem.Request{Op: "set", From: from, To: to, Both: both, Patch: patch}, &res)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// GetTruth returns the emulator's ground truth for every directed link.
func GetTruth(dir string) (*wanem.Truth, error) {
	if err := needEmulator(dir); err != nil {
		return nil, err
	}
	var t wanem.Truth
	if err := wanem.Call(socketPath(dir), wanem.Request{Op: "truth"}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Traffic starts, stops or lists (action "list") cross-traffic flows.
func Traffic(dir, action, name string) (*TrafficResult, error) {
	if err := needEmulator(dir); err != nil {
		return nil, err
	}
	var res TrafficResult
	if err := wanem.Call(socketPath(dir), wanem.Request{Op: "traffic", Action: action, Name: name}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ErrNoEmulator is returned by operations that need the WAN emulator on a
// testbed whose underlay is made of kernel links.
var ErrNoEmulator = errors.New("this testbed runs on a kernel underlay (--underlay kernel): there is no emulator to change links, report truth or run cross traffic")

// needEmulator loads the state and checks that the emulator carries the
// underlay.
func needEmulator(dir string) error {
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	if !st.UsesEmulator() {
		return ErrNoEmulator
	}
	return nil
}
