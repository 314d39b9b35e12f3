package labcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/detour-overlay/detour/internal/cli/command"
	"github.com/detour-overlay/detour/internal/lab/experiment/lanman"
	"github.com/detour-overlay/detour/internal/lab/testbed"
)

func init() {
	lab.Register(command.Command{Name: "experiment", Summary: "run an experiment on the testbed (lanman2017: geo-replicated ZooKeeper; locality: nearby memory against local disk; narrow: bulk transfers on the widest path)", Run: runExperiment,
		Usage: strings.TrimPrefix(experimentUsage, "usage: detour-lab ")})
}

const experimentUsage = `usage: detour-lab experiment locality [--short] [--out DIR] [--rounds N] [--via-detour] [--dynamics]
                                 [--plot SCRIPT|none] [--detour-bin PATH]
       detour-lab experiment lanman2017 [--overlays vxlan,tinc,wireguard,easytier,detour] [--short] [--out DIR] [--ops N]
                                   [--store zookeeper|etcd] [--continuous OVERLAYS] [--plot SCRIPT|none]
                                   [--detour-bin PATH]
       detour-lab experiment narrow [--overlays vxlan,tinc,detour] [--short] [--out DIR] [--transfer 30s]
                               [--detour-bin PATH]

Geo-replicated ZooKeeper (CLU leader, BOR, LAN) on the lanman2017 testbed,
client at LAN, in three phases: (a) idle WAN, (b) TCP cross traffic filling
CLU<->LAN outside the overlay, (c) the same load with detour free to
reroute; then a continuous run while the load starts. --overlays also takes
the peers wireguard (VXLAN over wireguard-go) and easytier (hosts routed,
--latency-first), installed by scripts/install-peers.sh. Writes raw samples,
a summary with the latency model's predictions, plots and versions to DIR
and prints the summary table. The agents run the detour binary
--detour-bin, else $DETOUR_BIN, else the file detour next to detour-lab.
Needs root.

locality: the data-locality experiment (issue 18, docs/locality.md): a
client at ZRH reads 1 KB to 1 MB objects from a capped local disk, nearby
memory (MXP) and remote memory (IAD), and compares replica-choice policies
side by side; writes samples, summary.csv and plots to DIR.

narrow: bulk transfers on the widest path (issue 23, docs/bulk.md): on the
narrow-relay testbed (direct West-East fastest but 20 Mbit/s, a relay 3 ms
slower at 200 Mbit/s), a bulk iperf3 transfer West->East and a 10 ms
request/response stream beside it, idle and during the transfer, over each
overlay; reads detour's flow class, reorder and probe counters; writes
result.json and summary.md to DIR and prints the table.

`

// experimentOptions are the command line of `detour-lab experiment
// lanman2017`.
type experimentOptions struct {
	overlays, continuous, out, scenario, plot, store, detour string
	short                                                    bool
	ops                                                      int
}

func runExperiment(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		io.WriteString(stderr, experimentUsage)
		return 2
	}
	if args[0] == "locality" {
		return runLocality(args[1:], stdout, stderr)
	}
	if args[0] == "narrow" {
		return runNarrow(args[1:], stdout, stderr)
	}
	if args[0] != "lanman2017" {
		return fail(stderr, "experiment", fmt.Errorf("%w: unknown experiment %q (known: lanman2017, locality, narrow)", errUsage, args[0]))
	}
	return parseAndRun(args[1:], stderr, parseExperiment, func(o experimentOptions) error { return experiment(o, stdout, stderr) })
}

// saveResults writes an experiment's results (write) to out, also after a
// failed run (runErr), and returns the run's error naming where the
// partial results are.
func saveResults(write func() error, runErr error, out string) error {
	if err := write(); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr != nil {
		return fmt.Errorf("%w (partial results in %s)", runErr, out)
	}
	return nil
}

// parseAndRun parses an experiment's command line and runs it as root:
// 2 after --help, 1 (with the error on stderr) when parsing or the run
// fails.
func parseAndRun[O any](args []string, stderr io.Writer, parse func([]string, io.Writer) (O, error), run func(O) error) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 2
		}
		return fail(stderr, "experiment", err)
	}
	if os.Geteuid() != 0 {
		return fail(stderr, "experiment", errors.New("must run as root (it drives the testbed's network namespaces)"))
	}
	if err := run(o); err != nil {
		return fail(stderr, "experiment", err)
	}
	return 0
}

func parseExperiment(args []string, stderr io.Writer) (experimentOptions, error) {
	var o experimentOptions
	fs := flag.NewFlagSet("experiment lanman2017", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.overlays, "overlays", "", "comma-separated overlays (default vxlan,tinc,detour; with --short vxlan,detour)")
	fs.BoolVar(&o.short, "short", false, "a short run (under 3 minutes) that shows the direction of the effect")
	fs.StringVar(&o.out, "out", "", "results directory (default results/lanman2017-TIME)")
	fs.IntVar(&o.ops, "ops", 0, "timed operations of each kind per server and phase (default 40; 15 with --short)")
	fs.StringVar(&o.continuous, "continuous", "", "overlays with a continuous run (default: all; with --short detour only)")
	fs.StringVar(&o.store, "store", lanman.ZooKeeper, "replicated store: zookeeper or etcd (3.4, --heartbeat-interval=150 --election-timeout=1500)")
	fs.StringVar(&o.scenario, "scenario", "lanman2017", "testbed scenario with sites BOR, CLU, LAN, NEU and flow clu-lan")
	fs.StringVar(&o.detour, "detour-bin", "", "the detour binary the agents run (default $"+testbed.DetourEnv+", else detour next to detour-lab)")
	fs.StringVar(&o.plot, "plot", "", "plotting script (default scripts/plot_experiment.py next to the binary or in the working directory; 'none' to skip)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if o.ops < 0 {
		return o, fmt.Errorf("%w: --ops must be positive", errUsage)
	}
	if o.store != lanman.ZooKeeper && o.store != lanman.Etcd {
		return o, fmt.Errorf("%w: unknown store %q (want zookeeper or etcd)", errUsage, o.store)
	}
	for _, ov := range splitList(o.overlays) {
		if !lanmanOverlays[ov] {
			return o, fmt.Errorf("%w: unknown overlay %q (want vxlan, tinc, wireguard, easytier or detour)", errUsage, ov)
		}
	}
	return o, nil
}

// lanmanOverlays are the overlays the lanman2017 experiment runs on: the
// peers wireguard and easytier need scripts/install-peers.sh first.
var lanmanOverlays = map[string]bool{"vxlan": true, "tinc": true, "wireguard": true, "easytier": true, "detour": true}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// config turns the options into the experiment's configuration.
func (o experimentOptions) config(bin, detour string, log io.Writer) lanman.Config {
	c := lanman.Config{
		Bin: bin, Detour: detour, Scenario: o.scenario, Log: log, Store: o.store,
		Overlays: []string{"vxlan", "tinc", "detour"}, Ops: 40, Warmup: 5,
		Settle: 4 * time.Second, ContinuousIdle: 15 * time.Second, ContinuousLoad: 40 * time.Second,
		WorkDir:       fmt.Sprintf("/run/detour/experiment-%d", os.Getpid()),
		TestbedState:  envDefault("DETOUR_TESTBED_STATE", "/run/detour/experiment-testbed"),
		TestbedPrefix: envDefault("DETOUR_TESTBED_PREFIX", "dx-"),
	}
	if o.short {
		c.Overlays, c.Ops, c.Warmup = []string{"vxlan", "detour"}, 15, 3
		c.Settle, c.ContinuousIdle, c.ContinuousLoad = 3*time.Second, 5*time.Second, 12*time.Second
		c.ContinuousOverlays = []string{"detour"}
	}
	if l := splitList(o.overlays); l != nil {
		c.Overlays = l
	}
	if c.ContinuousOverlays == nil {
		c.ContinuousOverlays = c.Overlays
	}
	if o.continuous != "" {
		c.ContinuousOverlays = splitList(o.continuous)
	}
	if o.ops > 0 {
		c.Ops = o.ops
	}
	return c
}

// experimentPaths returns the lab binary, the detour binary the agents
// run (from --detour-bin, else the default), and the output directory
// (out, else results/NAME-TIME).
func experimentPaths(detourFlag, out, name string) (bin, detour, dir string, err error) {
	if bin, err = os.Executable(); err != nil {
		return "", "", "", err
	}
	if detour, err = testbed.FindDetour(detourFlag); err != nil {
		return "", "", "", err
	}
	if out == "" {
		out = filepath.Join("results", name+"-"+time.Now().Format("20060102-150405"))
	}
	return bin, detour, out, nil
}

func experiment(o experimentOptions, stdout, stderr io.Writer) error {
	bin, detour, out, err := experimentPaths(o.detour, o.out, "lanman2017")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := o.config(bin, detour, stderr)
	cfg.LogDir = filepath.Join(out, "logs")
	defer os.RemoveAll(cfg.WorkDir)
	start := time.Now()
	res, runErr := lanman.Run(ctx, cfg)
	if res == nil {
		return runErr
	}
	if err := saveResults(func() error { return res.Write(out, lanman.Versions(bin, detour)) }, runErr, out); err != nil {
		return err
	}
	plot(o.plot, bin, out, stderr)
	name := map[string]string{lanman.ZooKeeper: "ZooKeeper", lanman.Etcd: "etcd"}[cfg.Store]
	fmt.Fprintf(stdout, "lanman2017: geo-replicated %s, client at %s, leader %s; %d operations of each kind per server and phase\n", name, lanman.Client, lanman.Leader, cfg.Ops)
	if err := res.WriteReport(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results in %s (%.0f s)\n", out, time.Since(start).Seconds())
	return nil
}

// plot runs the lanman2017 plotting script on the results directory.
func plot(script, bin, dir string, stderr io.Writer) {
	plotScript(script, "plot_experiment.py", bin, dir, stderr)
}

// plotScript runs a plotting script (script, else scripts/NAME next to
// the binary or in the working directory) on the results directory; a
// missing script or matplotlib only costs the plots.
func plotScript(script, name, bin, dir string, stderr io.Writer) {
	if script == "none" {
		return
	}
	if script == "" {
		for _, c := range []string{
			filepath.Join(filepath.Dir(bin), "..", "scripts", name),
			filepath.Join("scripts", name),
		} {
			if _, err := os.Stat(c); err == nil {
				script = c
				break
			}
		}
	}
	if script == "" {
		fmt.Fprintf(stderr, "detour-lab experiment: scripts/%s not found; no plots\n", name)
		return
	}
	// Debian's python3-matplotlib belongs to /usr/bin/python3, which may not
	// be the first python3 on PATH.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	cmd := exec.Command(py, script, dir)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(stderr, "detour-lab experiment: plotting failed: %v\n", err)
	}
}

// envDefault returns the environment variable key, or def when it is unset.
func envDefault(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
