package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/lab/proc"
	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// startOverlay brings up the chosen overlay on every gateway and waits
// until it carries traffic.
func startOverlay(ctx context.Context, st *State, sc *scenario.Scenario, o Options) error {
	switch o.Overlay {
	case "vxlan":
		if err := startVXLAN(st); err != nil {
			return err
		}
	case "tinc":
		if err := startTinc(ctx, st, o.StateDir); err != nil {
			return err
		}
	case "detour", "detour-plain":
		if err := startDetour(ctx, st, sc, o); err != nil {
			return err
		}
	case "wireguard":
		if err := startWireGuard(ctx, st, o); err != nil {
			return err
		}
	case "easytier":
		if err := startEasyTier(ctx, st, o); err != nil {
			return err
		}
	default:
		return nil
	}
	// Every site meets every other, so a large overlay takes longer to
	// come up on one machine.
	err := waitOverlay(ctx, st, 20*time.Second+time.Duration(len(st.Sites))*time.Second)
	var u *unreachableError
	if errors.As(err, &u) {
		return fmt.Errorf("%w%s%s", err, diagnosis(st, o, st.Sites[0].Name, u.site), daemonLogs(o, st.Sites[0].Name, u.site))
	}
	return err
}

// daemonLogs quotes the end of the logs of the overlay daemons on the
// named sites, so that an overlay that does not come up says why.
func daemonLogs(o Options, sites ...string) string {
	prefix := map[string]string{"tinc": "tinc-", "detour": "agent-", "detour-plain": "agent-",
		"wireguard": "wg-", "easytier": "easytier-"}[o.Overlay]
	if prefix == "" {
		return ""
	}
	var b strings.Builder
	for _, site := range sites {
		name := prefix + tincName(site)
		fmt.Fprintf(&b, "\nend of %s.log:\n%s", name, logTail(o.StateDir, name))
	}
	return b.String()
}

// diagnosis says, for an overlay that did not come up between sites a
// and b, what the emulator carried between them and, for detour, what
// each agent saw: whether the underlay or the overlay failed.
func diagnosis(st *State, o Options, a, b string) string {
	var out strings.Builder
	if t, err := GetTruth(o.StateDir); err != nil {
		fmt.Fprintf(&out, "\nemulator: no ground truth: %v", err)
	} else {
		fmt.Fprintf(&out, "\nemulator after %.1f s: unroutable %d, write errors %d, wake-up lateness %.0f µs",
			t.UptimeS, t.Unroutable, t.WriteErrors, t.WakeLateUS)
		for _, l := range t.Links {
			if (l.From == a && l.To == b) || (l.From == b && l.To == a) {
				fmt.Fprintf(&out, "\n  %s→%s: delivered %d, lost %d, queue drops %d, late %d",
					l.From, l.To, l.Delivered, l.Lost, l.QueueDrops, l.Late)
			}
		}
	}
	if o.Overlay != "detour" && o.Overlay != "detour-plain" {
		return out.String()
	}
	for _, site := range st.Sites {
		if site.Name != a && site.Name != b {
			continue
		}
		var s api.Status
		if err := api.NewSocketClient(api.NetnsSocket(site.Gateway)).Get("/v1/status", &s); err != nil {
			fmt.Fprintf(&out, "\nagent %s: no status: %v", site.Name, err)
			continue
		}
		alive := 0
		for _, m := range s.Members {
			if m.State == "alive" {
				alive++
			}
		}
		c := s.Counters
		fmt.Fprintf(&out, "\nagent %s after %.1f s: %d of %d other members alive; packets in %d, out %d; handshakes completed as initiator %d, initiations and responses %d and %d (%d of them sent again), collisions %d, responses unexpected or rejected %d; late wakes %d (%d ms)",
			site.Name, s.UptimeSeconds, alive, len(s.Members)-1, c["packets_received"], c["packets_sent"],
			c["session_established"], c["session_initiations"], c["session_responses"], c["session_resent"], c["session_collisions"], c["session_handshake_rejected"],
			c["late_wakes"], c["late_wake_ms"])
	}
	return out.String()
}

// unreachableError means the first site's host could not reach a host
// of site through the overlay in time.
type unreachableError struct {
	site, addr string
	from       string
	timeout    time.Duration
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("no ping from %s to %s (%s) through the overlay after %v", e.from, e.site, e.addr, e.timeout)
}

// startVXLAN builds a full mesh of kernel VXLAN: one vx0 per gateway,
// attached to br0, with head-end replication to every peer (an all-zero
// FDB entry per peer); unicast entries are learnt.
func startVXLAN(st *State) error {
	for i, site := range st.Sites {
		lines := []string{
			fmt.Sprintf("link add vx0 type vxlan id 42 local %s dstport 4789 dev wan0", site.Underlay),
			fmt.Sprintf("link set vx0 mtu %d master br0 up", st.HostMTU),
		}
		if err := ipBatch(site.Gateway, lines); err != nil {
			return err
		}
		for j, peer := range st.Sites {
			if i == j {
				continue
			}
			out, err := exec.Command("bridge", "-n", site.Gateway, "fdb", "append",
				"00:00:00:00:00:00", "dev", "vx0", "dst", peer.Underlay).CombinedOutput()
			if err != nil {
				return fmt.Errorf("bridge fdb append in %s: %v: %s", site.Gateway, err, out)
			}
		}
	}
	return nil
}

// tincName turns a site name into a valid tinc node name.
func tincName(site string) string { return strings.ReplaceAll(strings.ToLower(site), "-", "_") }

// startTinc configures tinc 1.0 in switch mode on every gateway (keys
// made with tincd -K, a meta connection from every site to the first,
// tap bridged to br0) and runs each tincd in the foreground (-D) as a
// recorded background process, one after the other.
func startTinc(ctx context.Context, st *State, dir string) error {
	base := filepath.Join(dir, "tinc")
	if err := writeTincConfigs(st, base); err != nil {
		return err
	}
	if err := tincKeys(st, base); err != nil {
		return err
	}
	if err := shareTincHosts(st, base); err != nil {
		return err
	}
	for _, site := range st.Sites {
		cdir := filepath.Join(base, tincName(site.Name))
		name := "tinc-" + tincName(site.Name)
		// Debug level 1 logs each meta connection made or lost.
		p, err := startDetached(dir, name, "ip", "netns", "exec", site.Gateway,
			"tincd", "-c", cdir, "-D", "-d1", "--pidfile="+filepath.Join(cdir, "tinc.pid"))
		if err != nil {
			return err
		}
		st.Procs = append(st.Procs, p)
		if err := st.Save(dir); err != nil {
			return err
		}
		// The sites started later connect to the first. A connection
		// refused because it is not listening yet is retried only after
		// 5 s, then 15 s and 30 s, so wait until each tincd listens.
		err = waitFor(ctx, 10*time.Second, p, dir, func() bool { return proc.Listening(p.PID, "tincd", tincPort) })
		if err != nil {
			return err
		}
	}
	return nil
}

// tincPort is tinc's TCP and UDP port.
const tincPort = 655

func writeTincConfigs(st *State, base string) error {
	for _, site := range st.Sites {
		name := tincName(site.Name)
		cdir := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(cdir, "hosts"), 0o700); err != nil {
			return err
		}
		conf := []string{"Name = " + name, "Mode = switch", "DeviceType = tap", "Device = /dev/net/tun",
			"Interface = tap0", "AddressFamily = ipv4", "BindToAddress = " + site.Underlay}
		// Every other site makes its one meta connection to the first
		// site: a star. Data still flows directly between any two sites
		// over UDP, as tinc sends each node's packets to the address its
		// edges announce; only meta messages and broadcasts pass the hub.
		// A full mesh would give a pair two meta paths, and tinc 1.0 can
		// then take a session key that arrives late over the longer path
		// for the newer one that came directly. The peer then drops every
		// packet as unauthenticated until the key expires (an hour), so
		// one site in several startups could not reach another.
		if site.Name != st.Sites[0].Name {
			conf = append(conf, "ConnectTo = "+tincName(st.Sites[0].Name))
		}
		up := fmt.Sprintf("#!/bin/sh\nip link set $INTERFACE mtu %d master br0 up\n", st.HostMTU)
		host := fmt.Sprintf("Address = %s\nPort = %d\n", site.Underlay, tincPort)
		files := map[string]string{"tinc.conf": strings.Join(conf, "\n") + "\n", "tinc-up": up, "hosts/" + name: host}
		for f, text := range files {
			if err := os.WriteFile(filepath.Join(cdir, f), []byte(text), 0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

// tincKeys generates every site's RSA key pair in parallel.
func tincKeys(st *State, base string) error {
	errs := make([]error, len(st.Sites))
	var wg sync.WaitGroup
	for i, site := range st.Sites {
		wg.Go(func() {
			cmd := exec.Command("tincd", "-c", filepath.Join(base, tincName(site.Name)), "-K2048")
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("tincd -K for %s: %v: %s", site.Name, err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// shareTincHosts copies every site's host file (address and public key)
// to every other site.
func shareTincHosts(st *State, base string) error {
	for _, a := range st.Sites {
		an := tincName(a.Name)
		b, err := os.ReadFile(filepath.Join(base, an, "hosts", an))
		if err != nil {
			return err
		}
		for _, peer := range st.Sites {
			if peer.Name == a.Name {
				continue
			}
			if err := os.WriteFile(filepath.Join(base, tincName(peer.Name), "hosts", an), b, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// agentPort is the UDP port of detour agents on the underlay.
const agentPort = 4800

// startDetour writes an agent configuration per site and starts
// `detour agent --config FILE` in every gateway, then waits until each
// agent's API answers `detour status`.
func startDetour(ctx context.Context, st *State, sc *scenario.Scenario, o Options) error {
	cdir := filepath.Join(o.StateDir, "detour")
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return err
	}
	privs, err := siteKeys(len(st.Sites), o.Overlay == "detour")
	if err != nil {
		return err
	}
	if o.CA {
		if err := writeTrust(o.StateDir, st, privs); err != nil {
			return err
		}
	}
	started := map[int]Proc{}
	ready := func(i int) error {
		gw := st.Sites[i].Gateway
		return waitFor(ctx, 10*time.Second, started[i], o.StateDir, func() bool {
			return exec.Command("ip", "netns", "exec", gw, o.Detour, "status", "--api", config.DefaultAPI).Run() == nil
		})
	}
	for i, site := range st.Sites {
		file := filepath.Join(cdir, tincName(site.Name)+".yaml")
		if err := writeAgentConfig(st, sc, i, privs, file, o); err != nil {
			return err
		}
		if st.held(site.Name) {
			continue
		}
		name := "agent-" + tincName(site.Name)
		p, err := startDetached(o.StateDir, name, "ip", "netns", "exec", site.Gateway, o.Detour, "agent", "--config", file)
		if err != nil {
			return err
		}
		st.Procs = append(st.Procs, p)
		started[i] = p
		if err := st.Save(o.StateDir); err != nil {
			return err
		}
		if len(st.Sites) > staggerAbove {
			if err := ready(i); err != nil {
				return err
			}
		}
	}
	for i, site := range st.Sites {
		if st.held(site.Name) || len(st.Sites) > staggerAbove {
			continue
		}
		if err := ready(i); err != nil {
			return err
		}
	}
	return nil
}

// staggerAbove is the number of sites above which the agents start one
// after the other, each once the one before answers its API, rather than
// all at once: 54 agents starting in the same second on one machine (each
// shaking hands with all the others, measuring every link from its first
// probe) load it for a minute, and the first estimates read hundreds of
// milliseconds high. Gateways of a real overlay do not all start in the
// same second on two shared cores.
const staggerAbove = 20

// siteKeys returns a new private key per site for an encrypted overlay,
// or nil keys for one in the clear.
func siteKeys(n int, encrypted bool) ([]keys.PrivateKey, error) {
	if !encrypted {
		return nil, nil
	}
	privs := make([]keys.PrivateKey, n)
	for i := range privs {
		var err error
		if privs[i], err = keys.Generate(nil); err != nil {
			return nil, err
		}
	}
	return privs, nil
}

// testbedProbeRate is the probe budget of each agent on a testbed of n
// sites. Real gateways each have their own CPU; here every agent and the
// emulator share one machine, and the probes of a full mesh grow as n²:
// beyond 32 sites the default 200 probes a second per site (about 3 % of
// a core each, mostly the kernel's per-packet work) would saturate two
// cores, so the budget falls to 100 (at 54 sites: every 530 ms, a link
// down after 2.65 s).
func testbedProbeRate(n int) int {
	if n > 32 {
		return 100
	}
	return config.DefaultMaxProbeRate
}

// writeAgentConfig writes site i's agent configuration: every other site
// is a bootstrap peer, with its public key when privs is not nil, by
// address only under an overlay CA (o.CA), and sites held back (o.Hold)
// only in their own configurations.
func writeAgentConfig(st *State, sc *scenario.Scenario, i int, privs []keys.PrivateKey, file string, o Options) error {
	site := st.Sites[i]
	a := config.Agent{
		Site:   site.Name,
		Listen: agentAddr(st, site),
		API:    config.DefaultAPI,
		// Every namespace sees the same file system, so each agent has
		// its own socket: the one the CLI finds by default in the
		// gateway's namespace (ip netns exec GW detour route ...).
		APISocket: api.NetnsSocket(site.Gateway),
		Networks: []config.Network{{
			Name: config.DefaultNetworkName, ID: config.DefaultNetworkID,
			TAP: config.DefaultTAP, Bridge: "br0", MTU: st.HostMTU,
		}},
		TestClockOffset: sc.Sites[i].ClockOffset.D(),
		MaxProbeRate:    testbedProbeRate(len(st.Sites)),
		Measurement:     o.Measurement,
	}
	switch {
	case o.CA:
		trust, err := caTrust(o.StateDir, site.Name)
		if err != nil {
			return err
		}
		a.PrivateKeyFile, a.Trust = SiteKeyFile(o.StateDir, site.Name), trust
	case privs != nil:
		a.PrivateKey = privs[i].String()
	}
	if pools, subnet := agentKVPools(st); pools != nil {
		a.Networks[0].Subnet, a.KVPools = subnet, pools
	}
	natAgent(sc, i, &a)
	if sc.Bulk != nil {
		a.Bulk = *sc.Bulk
	}
	for j, peer := range st.Sites {
		if j == i || (st.held(peer.Name) && !st.held(site.Name)) {
			continue
		}
		p := config.Peer{Name: peer.Name, Address: peerAddr(st, sc, j)}
		if o.CA && p.Address == "" {
			continue // a NATed site: the CA admits it when it comes
		}
		if privs != nil && !o.CA {
			p.PublicKey = privs[j].Public().String()
		}
		a.Peers = append(a.Peers, p)
	}
	a.ApplyDefaults()
	if err := a.Validate(); err != nil {
		return fmt.Errorf("agent configuration for %s: %w", site.Name, err)
	}
	b, err := a.Marshal()
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o600)
}

// waitOverlay waits until the first host of the first site reaches the
// first host of every other site through the overlay.
func waitOverlay(ctx context.Context, st *State, timeout time.Duration) error {
	src := st.Sites[0].Hosts[0].NS
	deadline := time.Now().Add(timeout)
	for _, site := range st.Sites[1:] {
		if st.held(site.Name) {
			continue
		}
		dst := site.Hosts[0].Addr
		for {
			err := exec.CommandContext(ctx, "ip", "netns", "exec", src, "ping", "-c1", "-W0.5", "-q", dst).Run()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return &unreachableError{site: site.Name, addr: dst, from: st.Sites[0].Name, timeout: timeout}
			}
		}
	}
	return nil
}
