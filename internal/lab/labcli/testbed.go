package labcli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/detour-overlay/detour/internal/cli/command"
	"github.com/detour-overlay/detour/internal/lab/scenario"
	"github.com/detour-overlay/detour/internal/lab/testbed"
	"github.com/detour-overlay/detour/internal/wire"
)

func init() {
	lab.Register(command.Command{
		Name:    "testbed",
		Summary: "emulate a multi-site WAN on this machine (up, down, status, exec, link, truth, traffic)",
		Run:     runTestbed,
		Usage:   strings.TrimPrefix(fmt.Sprintf(testbedUsage, strings.Join(scenario.Shipped(), ", "), testbed.DefaultStateDir), "usage: detour-lab "),
	})
}

const testbedUsage = `usage: detour-lab testbed COMMAND [ARGS]

  up SCENARIO [--overlay none|vxlan|tinc|detour|detour-plain|wireguard|easytier] [--underlay emulator|kernel]
        [--underlay-mtu N] [--host-mtu N] [--foreground] [--detour-bin PATH]
        [--underlay-ipv6] [--ca] [--hold SITE,...]
        bring up a testbed; SCENARIO is a file or a shipped name
        (%s); --underlay kernel joins the gateways with plain kernel
        links (no emulated delay; link, truth and traffic are unavailable);
        the detour overlays run the agent binary --detour-bin, else
        $DETOUR_BIN, else the file detour next to detour-lab;
        wireguard (VXLAN over wireguard-go) and easytier (EasyTier,
        routed, no Layer 2) are the peers the benchmarks compare, installed
        by scripts/install-peers.sh only; --ca runs the detour agents
        under an overlay CA (certificates, peers by address only);
        --hold starts the named sites' agents only at restart-agent;
        --measurement economy runs the agents with issue 22's cheaper
        measurement scheme
  down                         remove every namespace, link and process
  status [--json]              what is up
  exec SITE[/HOST] [--gateway] -- CMD...
                               run CMD in a site's first host (or host HOST,
                               or the gateway)
  link set A B [--delay D] [--jitter D] [--loss P] [--rate R] [--queue Q] [--both]
                               change the directed link A->B (and B->A)
  truth [--json]               configured and measured one-way delay of every link
  traffic start|stop|list [NAME]
                               cross traffic defined in the scenario
  migrate SITE[/HOST] --to SITE
                               move a host (namespace, MAC, IP, open
                               connections) to another site's bridge
  restart-agent SITE [--kill] [--pause D] [--detour-bin PATH]
                               stop a site's detour agent (SIGTERM, or
                               SIGKILL with --kill: a crash) and start it
                               again with the same configuration after D;
                               a site held back by up --hold starts
  nat-rebind SITE [--port N]   give a NATed site's gateway a new mapping
                               (source port N, default 40001) and flush
                               the old ones, as a NAT that restarts
  disk-cap SERVER [--read-mbps N] [--read-iops N]
                               change the read caps of a kv server's disk tier
                               (SERVER: IP:port; 0 lifts a cap; no flags: the
                               scenario's caps again)
  scenario NAME                print a shipped scenario's YAML
  ui SITE [--listen ADDR]      SITE's map page with the emulator's truth beside
                               the agent's estimates (default 127.0.0.1:7450)
  flood FROM TO [--kind random|forged|keyed] [--as SITE] [--spoof]
        [--duration D] [--port N] [--json]
                               a lab flood from FROM's gateway to TO's agent,
                               as fast as one thread sends (sendmmsg): random
                               bytes, initiations naming SITE (forged: random
                               Noise bytes; keyed: with a valid mac1), from
                               random 198.18.0.0/15 sources with --spoof; only
                               to testbed addresses. Pin it with taskset.

Every command takes --state DIR (default %s, or $DETOUR_TESTBED_STATE).
`

func runTestbed(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stdout, testbedUsage, strings.Join(scenario.Shipped(), ", "), testbed.DefaultStateDir)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub := map[string]func([]string, io.Writer, io.Writer) error{
		"up": tbUp, "down": tbDown, "status": tbStatus, "exec": tbExec, "link": tbLink,
		"truth": tbTruth, "traffic": tbTraffic, "scenario": tbScenario, "wanem": tbWanem, "migrate": tbMigrate,
		"restart-agent": tbRestartAgent, "nat-rebind": tbNATRebind, "flood": tbFlood, "ui": tbUI, "disk-cap": tbDiskCap,
	}
	run, ok := sub[args[0]]
	if !ok {
		return fail(stderr, "testbed", fmt.Errorf("%w: unknown command %q (see 'detour-lab testbed help')", errUsage, args[0]))
	}
	if args[0] != "scenario" {
		if err := testbed.CheckRoot(); err != nil {
			return fail(stderr, "testbed "+args[0], err)
		}
	}
	if err := run(args[1:], stdout, stderr); err != nil {
		return fail(stderr, "testbed "+args[0], err)
	}
	return 0
}

// newFlags returns a flag set with the common --state flag.
func newFlags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("testbed "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := os.Getenv("DETOUR_TESTBED_STATE")
	if def == "" {
		def = testbed.DefaultStateDir
	}
	return fs, fs.String("state", def, "state directory of the testbed")
}

// parseArgs parses flags placed anywhere among the positional arguments,
// up to a "--", and returns the positional arguments and what follows
// "--".
func parseArgs(fs *flag.FlagSet, args []string) (pos, rest []string, err error) {
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, rest, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

func wantArgs(pos []string, n int, what string) error {
	if len(pos) != n {
		return fmt.Errorf("%w: want %s, got %d argument(s)", errUsage, what, len(pos))
	}
	return nil
}

func tbUp(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("up", stderr)
	overlay := fs.String("overlay", "none", "overlay: none, vxlan, tinc, detour, detour-plain, wireguard or easytier")
	underlay := fs.String("underlay", testbed.UnderlayEmulator, "underlay: emulator (the scenario's WAN) or kernel (plain kernel links, to measure overlays alone)")
	mtu := fs.Int("underlay-mtu", 0, "underlay MTU (default: the scenario's, else 1500)")
	ipv6 := fs.Bool("underlay-ipv6", false, "give the gateways IPv6 underlay addresses (fd18::198.18.0.N) and run the detour agents over IPv6")
	hostMTU := fs.Int("host-mtu", 0, "the hosts' MTU (default: the underlay MTU less the overlay's overhead)")
	fg := fs.Bool("foreground", false, "stay in the foreground; Ctrl-C or SIGTERM tears the testbed down")
	prefix := fs.String("prefix", envOr("DETOUR_TESTBED_PREFIX", testbed.DefaultPrefix), "prefix of namespace names")
	caTrust := fs.Bool("ca", false, "with --overlay detour: admit sites by certificates of an overlay CA the testbed makes (keys, certificates and the CA key in STATE/detour) instead of explicit key lists")
	hold := fs.String("hold", "", "comma-separated sites whose agents are configured but not started, and not named in the others' configurations; start one later with restart-agent SITE, as a site joining")
	measurement := fs.String("measurement", "", "with --overlay detour: the agents' measurement scheme, full or economy (default: the agent's, full)")
	detour := detourFlag(fs)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "one SCENARIO (a file or a shipped name)"); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	st, err := testbed.Up(ctx, testbed.Options{
		Scenario: pos[0], Overlay: *overlay, Underlay: *underlay, UnderlayMTU: *mtu, HostMTU: *hostMTU, StateDir: *state,
		Prefix: *prefix, Self: self, Detour: *detour, Log: stderr, UnderlayIPv6: *ipv6,
		CA: *caTrust, Hold: splitList(*hold), Measurement: *measurement,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "testbed %s up in %.2fs: %d sites, overlay %s, underlay %s, underlay MTU %d, host MTU %d\n",
		st.Scenario, time.Since(t0).Seconds(), len(st.Sites), st.Overlay, underlayName(st), st.UnderlayMTU, st.HostMTU)
	printSites(stdout, st)
	if !*fg {
		return nil
	}
	fmt.Fprintln(stdout, "running in the foreground; Ctrl-C tears it down")
	<-ctx.Done()
	return testbed.Down(*state)
}

// detourFlag adds --detour-bin, the detour binary the agents run.
func detourFlag(fs *flag.FlagSet) *string {
	return fs.String("detour-bin", "", "the detour binary the agents run (default $"+testbed.DetourEnv+", else detour next to detour-lab)")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func printSites(w io.Writer, st *testbed.State) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SITE\tGATEWAY NS\tUNDERLAY\tHOSTS")
	for _, s := range st.Sites {
		var hosts []string
		for _, h := range s.Hosts {
			hosts = append(hosts, h.NS+"="+h.Addr)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Gateway, s.Underlay, strings.Join(hosts, " "))
	}
	tw.Flush()
}

func tbDown(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("down", stderr)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 0, "no arguments"); err != nil {
		return err
	}
	err = testbed.Down(*state)
	if errors.Is(err, testbed.ErrNoTestbed) {
		fmt.Fprintln(stdout, "no testbed is up")
		return nil
	}
	if err == nil {
		fmt.Fprintln(stdout, "testbed down")
	}
	return err
}

// jsonFlags parses the arguments of a command that takes only --state and
// --json.
func jsonFlags(name string, args []string, stderr io.Writer) (state *string, asJSON *bool, err error) {
	fs, state := newFlags(name, stderr)
	asJSON = fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return nil, nil, err
	}
	return state, asJSON, wantArgs(pos, 0, "no arguments")
}

func tbStatus(args []string, stdout, stderr io.Writer) error {
	state, asJSON, err := jsonFlags("status", args, stderr)
	if err != nil {
		return err
	}
	s, err := testbed.GetStatus(*state)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSONOut(stdout, s)
	}
	fmt.Fprintf(stdout, "scenario %s, overlay %s, underlay %s, underlay MTU %d, host MTU %d, up since %s\n",
		s.Scenario, s.Overlay, underlayName(&s.State), s.UnderlayMTU, s.HostMTU, s.Created.Format(time.RFC3339))
	printSites(stdout, &s.State)
	names := make([]string, 0, len(s.Alive))
	for n := range s.Alive {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(stdout, "process %-16s %s\n", n, map[bool]string{true: "running", false: "NOT RUNNING"}[s.Alive[n]])
	}
	if len(s.Traffic) > 0 {
		fmt.Fprintf(stdout, "cross traffic: %s\n", strings.Join(s.Traffic, ", "))
	}
	return nil
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func tbExec(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("exec", stderr)
	gw := fs.Bool("gateway", false, "run in the site's gateway namespace")
	pos, cmd, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "SITE[/HOST] -- CMD..."); err != nil {
		return err
	}
	if len(cmd) == 0 {
		return fmt.Errorf("%w: no command after --", errUsage)
	}
	st, err := testbed.LoadState(*state)
	if err != nil {
		return err
	}
	ns, err := testbed.Target(st, pos[0], *gw)
	if err != nil {
		return err
	}
	return testbed.Exec(ns, cmd)
}

func tbLink(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("link", stderr)
	var patch scenario.Patch
	fs.Func("delay", "one-way delay, e.g. 30ms", func(s string) error { return setPtr(&patch.Delay, s, scenario.ParseDuration) })
	fs.Func("jitter", "jitter, e.g. 1ms", func(s string) error { return setPtr(&patch.Jitter, s, scenario.ParseDuration) })
	fs.Func("loss", "random loss, e.g. 1%", func(s string) error { return setPtr(&patch.Loss, s, scenario.ParsePercent) })
	fs.Func("rate", "rate limit, e.g. 20mbit or unlimited", func(s string) error { return setPtr(&patch.Rate, s, scenario.ParseRate) })
	fs.Func("queue", "queue size, e.g. 64KB or 50ms", func(s string) error { return setPtr(&patch.Queue, s, scenario.ParseQueue) })
	reorder := fs.Bool("reorder", false, "let jitter reorder packets")
	both := fs.Bool("both", false, "change both directions")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 3 || pos[0] != "set" {
		return fmt.Errorf("%w: want 'link set A B [--delay D] ...'", errUsage)
	}
	if isSet(fs, "reorder") {
		patch.Reorder = reorder
	}
	if patch.IsEmpty() {
		return fmt.Errorf("%w: nothing to change: give --delay, --jitter, --loss, --rate, --queue or --reorder", errUsage)
	}
	if err := scenario.ValidatePatch(patch); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	res, err := testbed.SetLink(*state, pos[1], pos[2], *both, patch)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSONOut(stdout, res)
	}
	for _, l := range res.Links {
		fmt.Fprintf(stdout, "%s->%s: delay %gms jitter %gms loss %g%% rate %s\n", l.From, l.To, l.DelayMS, l.JitterMS, l.LossPct, l.Rate)
	}
	return nil
}

// setPtr parses s and stores the value in a newly allocated *T.
func setPtr[T any](dst **T, s string, parse func(string) (T, error)) error {
	v, err := parse(s)
	if err != nil {
		return err
	}
	*dst = &v
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

func tbTruth(args []string, stdout, stderr io.Writer) error {
	state, asJSON, err := jsonFlags("truth", args, stderr)
	if err != nil {
		return err
	}
	t, err := testbed.GetTruth(*state)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSONOut(stdout, t)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "FROM\tTO\tDELAY ms\tJITTER ms\tLOSS %\tRATE\tQUEUE ms\tMEASURED ms\tPACKETS\tDROPS\t")
	for _, l := range t.Links {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%g\t%s\t%.3f\t%.3f\t%d\t%d\t\n", l.From, l.To, l.DelayMS, l.JitterMS,
			l.LossPct, l.Rate, l.QueueMS, l.MeasuredMS, l.Delivered, l.Lost+l.QueueDrops)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "emulator wake-up lateness %.1f µs (compensated)\n", t.WakeLateUS)
	return err
}

func tbTraffic(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("traffic", stderr)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || (pos[0] != "list" && len(pos) != 2) || (pos[0] == "list" && len(pos) != 1) {
		return fmt.Errorf("%w: want 'traffic start NAME', 'traffic stop NAME' or 'traffic list'", errUsage)
	}
	name := ""
	if len(pos) == 2 {
		name = pos[1]
	}
	res, err := testbed.Traffic(*state, pos[0], name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "running: %s\n", strings.Join(res.Running, ", "))
	return nil
}

func tbScenario(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: want 'scenario NAME' (shipped: %s)", errUsage, strings.Join(scenario.Shipped(), ", "))
	}
	b, err := scenario.ShippedSource(args[0])
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}

// tbWanem is the hidden command that runs the emulator of a testbed; Up
// starts it in the background.
func tbWanem(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("wanem", stderr)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 0, "no arguments"); err != nil {
		return err
	}
	return testbed.RunEmulator(*state)
}

// underlayName names what carries a testbed's underlay.
func underlayName(st *testbed.State) string {
	if st.UsesEmulator() {
		return testbed.UnderlayEmulator
	}
	return testbed.UnderlayKernel
}

func tbMigrate(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("migrate", stderr)
	to := fs.String("to", "", "the site the host moves to")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "one SITE[/HOST] and --to SITE"); err != nil {
		return err
	}
	if *to == "" {
		return fmt.Errorf("%w: --to SITE is required", errUsage)
	}
	t0 := time.Now()
	h, err := testbed.Migrate(*state, pos[0], *to)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "host %s (%s) moved to %s in %.0f ms\n", h.NS, h.Addr, *to, float64(time.Since(t0).Microseconds())/1000)
	return nil
}

// tbRestartAgent stops and restarts one site's detour agent, or starts
// one held back by up --hold.
func tbRestartAgent(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("restart-agent", stderr)
	kill := fs.Bool("kill", false, "stop with SIGKILL (no leave) instead of SIGTERM")
	pause := fs.Duration("pause", 0, "time without an agent before the new one starts")
	detour := detourFlag(fs)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "one SITE"); err != nil {
		return err
	}
	r, err := testbed.RestartAgent(*state, pos[0], testbed.RestartOptions{Kill: *kill, Pause: *pause, Detour: *detour})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "agent of %s restarted (pid %d), API answering %.0f ms after the stop\n", pos[0], r.PID, float64(r.Down.Microseconds())/1000)
	return nil
}

// tbNATRebind gives a NATed site a new NAT mapping.
func tbNATRebind(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("nat-rebind", stderr)
	port := fs.Int("port", testbed.NATPort+1, "the new source port of the site's NAT")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "one SITE"); err != nil {
		return err
	}
	if err := testbed.RebindNAT(*state, pos[0], *port); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s's NAT now maps its agent to port %d; old mappings flushed\n", pos[0], *port)
	return nil
}

func tbFlood(args []string, stdout, stderr io.Writer) error {
	fs, state := newFlags("flood", stderr)
	kind := fs.String("kind", testbed.FloodForged, "what to send: "+strings.Join(testbed.FloodKinds, ", "))
	as := fs.String("as", "", "the site the initiations name (forged, keyed)")
	spoof := fs.Bool("spoof", false, "send from random source addresses in 198.18.0.0/15")
	dur := fs.Duration("duration", 10*time.Second, "how long to flood")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	port := fs.Int("port", 0, "send to this port of TO instead of its agent's (a control: the same path, no listener)")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 2, "FROM and TO sites"); err != nil {
		return err
	}
	ns, to, pub, err := testbed.FloodTarget(*state, pos[0], pos[1])
	if err != nil {
		return err
	}
	if *port > 0 && *port < 65536 {
		to = netip.AddrPortFrom(to.Addr(), uint16(*port))
	}
	o := testbed.FloodOptions{NS: ns, To: to, Kind: *kind, Key: pub, Spoof: *spoof, Duration: *dur}
	if *as != "" {
		o.As = wire.SiteIDFromName(*as)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := testbed.Flood(ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSONOut(stdout, r)
	}
	fmt.Fprintf(stdout, "sent %d datagrams in %.1f s (%.0f/s)\n", r.Sent, r.Seconds, r.Rate)
	return nil
}
