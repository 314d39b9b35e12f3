package labcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/lanman"
	"github.com/detour-overlay/detour/internal/lab/experiment/locality"
	"github.com/detour-overlay/detour/internal/lab/testbed"
)

// localityOptions are the command line of `detour-lab experiment
// locality`.
type localityOptions struct {
	out, plot, detour, scenario string
	short, viaDetour, dynamics  bool
	rounds                      int
}

func runLocality(args []string, stdout, stderr io.Writer) int {
	var o localityOptions
	fs := flag.NewFlagSet("experiment locality", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.short, "short", false, "a short run (under 5 minutes)")
	fs.StringVar(&o.out, "out", "", "results directory (default results/locality-TIME)")
	fs.IntVar(&o.rounds, "rounds", 0, "reads per row and size (default 150; 40 with --short)")
	fs.BoolVar(&o.viaDetour, "via-detour", false, "also read through every replicated pool's virtual address (detour's choice; needs replicated pools at the gateways)")
	fs.BoolVar(&o.dynamics, "dynamics", false, "run the dynamics phase: nearby path slowed and restored, disk cap lifted and restored")
	fs.StringVar(&o.scenario, "scenario", "locality", "testbed scenario")
	fs.StringVar(&o.detour, "detour-bin", "", "the detour binary the agents run (default $"+testbed.DetourEnv+", else detour next to detour-lab)")
	fs.StringVar(&o.plot, "plot", "", "plotting script (default scripts/plot_locality.py; 'none' to skip)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 2
		}
		return fail(stderr, "experiment", err)
	}
	if fs.NArg() > 0 {
		return fail(stderr, "experiment", fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0)))
	}
	if os.Geteuid() != 0 {
		return fail(stderr, "experiment", errors.New("must run as root (it drives the testbed's network namespaces)"))
	}
	if err := localityRun(o, stdout, stderr); err != nil {
		return fail(stderr, "experiment", err)
	}
	return 0
}

func localityRun(o localityOptions, stdout, stderr io.Writer) error {
	bin, detour, out, err := experimentPaths(o.detour, o.out, "locality")
	if err != nil {
		return err
	}
	c := locality.Config{
		Bin: bin, Detour: detour, Scenario: o.scenario, Log: stderr,
		StateDir: envDefault("DETOUR_TESTBED_STATE", "/run/detour/experiment-locality"),
		Prefix:   envDefault("DETOUR_TESTBED_PREFIX", "dy-"),
		Rounds:   150, ViaDetour: o.viaDetour, Dynamics: o.dynamics, Seed: 1,
	}
	if o.short {
		c.Rounds, c.DynamicsStep = 40, 6*time.Second
		c.Keys = map[int]int{1000: 1000, 10000: 500, 100000: 150, 1000000: 30}
	}
	if o.rounds > 0 {
		c.Rounds = o.rounds
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, runErr := locality.Run(ctx, c)
	if res == nil {
		return runErr
	}
	res.Versions = lanman.Versions(bin, detour)
	if err := saveResults(func() error { return res.Write(out) }, runErr, out); err != nil {
		return err
	}
	plotScript(o.plot, "plot_locality.py", bin, out, stderr)
	if err := res.WriteReport(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results in %s (%.0f s)\n", out, time.Since(start).Seconds())
	return nil
}
