package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/lab/proc"
	"github.com/detour-overlay/detour/internal/lab/scenario"
	"github.com/detour-overlay/detour/internal/lab/wanem"
)

// Overlays the testbed can bring up.
// wireguard and easytier are the peers compared in the benchmarks
// (peers.go); their programs are installed only for them.
var Overlays = []string{"none", "vxlan", "tinc", "detour", "detour-plain", "wireguard", "easytier"}

// Options configure Up.
type Options struct {
	// Scenario is a file path or the name of a shipped scenario.
	Scenario string
	// Overlay is one of Overlays.
	Overlay string
	// UnderlayMTU overrides the scenario's underlay MTU when non-zero.
	UnderlayMTU int
	// HostMTU overrides the hosts' MTU when non-zero; by default it is
	// the underlay MTU less the overlay's overhead.
	HostMTU int
	// Underlay is one of Underlays; empty means UnderlayEmulator.
	Underlay string
	StateDir string
	Prefix   string
	// Self is the path of the detour-lab binary, run for the emulator.
	Self string
	// Detour is the path of the detour binary, run as each site's agent
	// with the detour overlays; empty means FindDetour's default.
	Detour string
	// Log receives progress messages.
	Log io.Writer
	// UnderlayIPv6 gives the gateways IPv6 underlay addresses too and
	// runs the detour agents over them (ipv6.go).
	UnderlayIPv6 bool
	// CA makes an overlay CA and gives every detour agent a certificate
	// and its peers' addresses only, instead of explicit key lists
	// (trust.go).
	CA bool
	// Hold names sites whose agents are configured but not started:
	// RestartAgent starts them, as sites joining a running overlay. The
	// other sites' configurations do not mention them, so with CA they
	// join with nothing changed at the others.
	Hold []string
	// Measurement sets the detour agents' measurement scheme
	// (config.Agent.Measurement); empty leaves the agents' default.
	Measurement string
	// peers holds the paths of a peer overlay's programs, by name.
	peers map[string]string
}

// ErrNotRoot is returned when the testbed is used without root.
var ErrNotRoot = errors.New("the testbed needs root (it creates network namespaces and TUN devices): run it with sudo or as root")

// CheckRoot returns ErrNotRoot unless the process runs as root.
func CheckRoot() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	return nil
}

// Validate checks the options and loads the scenario, creating nothing.
func (o *Options) Validate() (*scenario.Scenario, error) {
	if o.Overlay == "" {
		o.Overlay = "none"
	}
	if !contains(Overlays, o.Overlay) {
		return nil, fmt.Errorf("--overlay %q: want one of %s", o.Overlay, strings.Join(Overlays, ", "))
	}
	if o.CA && o.Overlay != "detour" {
		return nil, fmt.Errorf("--ca needs --overlay detour (certificates admit encrypted sites), not %q", o.Overlay)
	}
	if o.Underlay == "" {
		o.Underlay = UnderlayEmulator
	}
	if !contains(Underlays, o.Underlay) {
		return nil, fmt.Errorf("--underlay %q: want one of %s", o.Underlay, strings.Join(Underlays, ", "))
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if err := ValidPrefix(o.Prefix); err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if usesDetour(o.Overlay) {
		bin, err := FindDetour(o.Detour)
		if err != nil {
			return nil, err
		}
		o.Detour = bin
	}
	if isPeer(o.Overlay) {
		bins, err := findPeerBinaries(o.Overlay)
		if err != nil {
			return nil, err
		}
		o.peers = bins
	}
	sc, err := scenario.Load(o.Scenario)
	if err != nil {
		return nil, err
	}
	if o.UnderlayMTU != 0 {
		if o.UnderlayMTU < scenario.MinMTU || o.UnderlayMTU > scenario.MaxMTU {
			return nil, fmt.Errorf("--underlay-mtu %d is outside %d..%d", o.UnderlayMTU, scenario.MinMTU, scenario.MaxMTU)
		}
		sc.UnderlayMTU = o.UnderlayMTU
	}
	if err := validMeasurement(o); err != nil {
		return nil, err
	}
	if err := validHold(o, sc); err != nil {
		return nil, err
	}
	if o.HostMTU != 0 && (o.HostMTU < 576 || o.HostMTU > 9000) {
		return nil, fmt.Errorf("--host-mtu %d is outside 576..9000", o.HostMTU)
	}
	if o.Overlay != "none" && sc.UnderlayMTU-overlayOverhead(o.Overlay) < 576 {
		return nil, fmt.Errorf("underlay MTU %d leaves less than 576 bytes for hosts over %s", sc.UnderlayMTU, o.Overlay)
	}
	return sc, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// overlayOverhead is how much smaller the hosts' MTU is than the
// underlay's: VXLAN adds 50 bytes (outer IPv4, UDP, VXLAN, inner
// Ethernet); tinc and detour get a round 100 for their
// headers; VXLAN over WireGuard adds both; EasyTier's TUN has an MTU 120
// bytes below the underlay's (easytier.go).
func overlayOverhead(overlay string) int {
	switch overlay {
	case "vxlan":
		return 50
	case "wireguard":
		return 50 + wgOverhead
	case "easytier":
		return 100 + etMTUGap
	case "tinc", "detour", "detour-plain":
		return 100
	}
	return 0
}

// Up brings up a testbed and returns its state. A testbed left in the
// state directory (e.g. after a crash) is removed first. If anything fails,
// or ctx is cancelled (Ctrl-C), everything created so far is removed.
func Up(ctx context.Context, o Options) (st *State, err error) {
	if err := CheckRoot(); err != nil {
		return nil, err
	}
	sc, err := o.Validate()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, err
	}
	if err := cleanStale(o.StateDir, o.Prefix, o.Log); err != nil {
		return nil, err
	}
	st = newState(sc, o)
	if err := st.Save(o.StateDir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(o.Log, "testbed: %v; removing what was created\n", err)
			Down(o.StateDir)
		}
	}()
	b, err := sc.Marshal()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.StateDir, "scenario.yaml"), b, 0o644); err != nil {
		return nil, err
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"namespaces", func() error { return createSites(st) }},
		{"underlay " + o.Underlay, func() error { return startUnderlay(ctx, st, o) }},
		{"NAT", func() error { return setupNAT(st, sc, o) }},
		{"overlay " + o.Overlay, func() error { return startOverlay(ctx, st, sc, o) }},
		{"memcached", func() error { return startMemcached(ctx, st, o.StateDir, o.Self, diskConfig(sc)) }},
	}
	for _, s := range steps {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted before %s", s.what)
		}
		t0 := time.Now()
		if err := s.do(); err != nil {
			return nil, fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(o.Log, "testbed: %s ready in %v\n", s.what, time.Since(t0).Round(time.Millisecond))
	}
	if ctx.Err() != nil {
		return nil, errors.New("interrupted")
	}
	st.Ready = true
	if err := st.Save(o.StateDir); err != nil {
		return nil, err
	}
	if st.UsesEmulator() {
		return st, startTimeline(o.StateDir)
	}
	return st, nil
}

// startUnderlay joins the gateways: through the WAN emulator, or with
// plain kernel links.
func startUnderlay(ctx context.Context, st *State, o Options) error {
	if o.Underlay == UnderlayKernel {
		return makeKernelUnderlay(st)
	}
	return startEmulator(ctx, st, o)
}

// startTimeline tells the emulator to run the scenario's timed events.
func startTimeline(dir string) error {
	if err := wanem.Call(socketPath(dir), wanem.Request{Op: "timeline"}, nil); err != nil {
		return fmt.Errorf("starting the timeline: %w", err)
	}
	return nil
}

func newState(sc *scenario.Scenario, o Options) *State {
	st := &State{
		Scenario: sc.Name, Overlay: o.Overlay, Underlay: o.Underlay, Prefix: o.Prefix,
		UnderlayMTU: sc.UnderlayMTU, HostMTU: sc.UnderlayMTU - overlayOverhead(o.Overlay),
		DetourBin: o.Detour, Created: time.Now(), UnderlayIPv6: o.UnderlayIPv6,
		Held: o.Hold,
	}
	if o.HostMTU != 0 {
		st.HostMTU = o.HostMTU
	}
	for i, site := range sc.Sites {
		ss := SiteState{
			Name: site.Name, Gateway: GatewayNS(o.Prefix, site.Name),
			Underlay: UnderlayAddr(i).String(),
		}
		for k := 1; k <= site.Hosts; k++ {
			ss.Hosts = append(ss.Hosts, HostState{NS: HostNS(o.Prefix, site.Name, k), Addr: HostAddr(i, k).String()})
		}
		st.Sites = append(st.Sites, ss)
	}
	st.KVPools = kvPools(sc, o.Prefix)
	return st
}

// cleanStale removes a testbed left in dir and any namespace with the
// prefix.
func cleanStale(dir, prefix string, log io.Writer) error {
	if _, err := os.Stat(statePath(dir)); err == nil {
		fmt.Fprintf(log, "testbed: removing a testbed left in %s\n", dir)
		if err := Down(dir); err != nil {
			return fmt.Errorf("removing the stale testbed: %w", err)
		}
	}
	for _, ns := range listNamespaces(prefix) {
		fmt.Fprintf(log, "testbed: removing stale namespace %s\n", ns)
		if err := deleteNamespace(ns); err != nil {
			return err
		}
	}
	return nil
}

// createSites creates every namespace, bridge and host link.
func createSites(st *State) error {
	for _, site := range st.Sites {
		if err := ip("netns", "add", site.Gateway); err != nil {
			return err
		}
		gw := []string{"link set lo up", "link add br0 type bridge", "link set br0 up"}
		for k, h := range site.Hosts {
			if err := ip("netns", "add", h.NS); err != nil {
				return err
			}
			port := fmt.Sprintf("h%d", k+1)
			gw = append(gw,
				fmt.Sprintf("link add %s type veth peer name eth0 netns %s", port, h.NS),
				fmt.Sprintf("link set %s master br0 mtu %d up", port, st.HostMTU))
		}
		if err := ipBatch(site.Gateway, gw); err != nil {
			return err
		}
		for _, h := range site.Hosts {
			err := ipBatch(h.NS, []string{
				"link set lo up",
				fmt.Sprintf("link set eth0 mtu %d up", st.HostMTU),
				fmt.Sprintf("addr add %s/%d dev eth0", h.Addr, overlayBits),
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// startEmulator starts `detour-lab testbed wanem --state DIR` in its own
// session and waits until its control socket answers. Its readers and
// schedulers make their own threads real-time (wanem.realTime), ahead of
// every other program: the emulator is the network, and a reader that
// waits for a CPU delays every packet without its own accounts showing
// it (on two cores under 54 agents, with the emulator at nice -10,
// packets between two gateways waited 3 to 9 s in its input queue; real
// time, 6.0 to 6.1 ms). The rest of the process runs at normal priority:
// when the whole of it ran real-time (chrt -f 10), the Go runtime's
// sysmon thread, waking every 20 µs, took more than half a core at real
// time, and a start that asked a little more of the emulator left the
// agents the 5 % of each second the kernel keeps for other programs
// (docs/lab.md, "The emulator's priority").
func startEmulator(ctx context.Context, st *State, o Options) error {
	p, err := startDetached(o.StateDir, "wanem", o.Self, "testbed", "wanem", "--state", o.StateDir)
	if err != nil {
		return err
	}
	st.Procs = append(st.Procs, p)
	if err := st.Save(o.StateDir); err != nil {
		return err
	}
	return waitFor(ctx, 10*time.Second, p, o.StateDir, func() bool {
		return wanem.Call(socketPath(o.StateDir), wanem.Request{Op: "ping"}, nil) == nil
	})
}

// startDetached starts a background process in a new session with its
// output in DIR/NAME.log and returns its record.
func startDetached(dir, name, prog string, args ...string) (Proc, error) {
	return proc.StartDetached(logPath(dir, name), name, prog, args...)
}

// waitFor polls ready until it holds, the process dies, ctx is cancelled
// or the timeout passes; errors quote the end of the process's log.
func waitFor(ctx context.Context, timeout time.Duration, p Proc, dir string, ready func() bool) error {
	return proc.WaitReady(ctx, timeout, p.Name, logPath(dir, p.Name), p.Alive, ready)
}

// logTail returns the last lines of DIR/NAME.log.
func logTail(dir, name string) string { return proc.LogTail(logPath(dir, name)) }
