package labcli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/lanman"
	"github.com/detour-overlay/detour/internal/lab/experiment/narrow"
	"github.com/detour-overlay/detour/internal/lab/testbed"
)

// narrowOptions are the command line of `detour-lab experiment narrow`.
type narrowOptions struct {
	overlays, out, detour, scenario string
	short                           bool
	transfer                        time.Duration
}

func runNarrow(args []string, stdout, stderr io.Writer) int {
	return parseAndRun(args, stderr, parseNarrow, func(o narrowOptions) error { return narrowRun(o, stdout, stderr) })
}

func parseNarrow(args []string, stderr io.Writer) (narrowOptions, error) {
	var o narrowOptions
	fs := flag.NewFlagSet("experiment narrow", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.overlays, "overlays", "vxlan,tinc,detour", "comma-separated overlays")
	fs.BoolVar(&o.short, "short", false, "a short run (about a minute per overlay)")
	fs.StringVar(&o.out, "out", "", "results directory (default results/narrow-TIME)")
	fs.DurationVar(&o.transfer, "transfer", 0, "length of the bulk transfer (default 30s; 20s with --short)")
	fs.StringVar(&o.scenario, "scenario", "narrow-relay", "testbed scenario with sites West, East and Relay")
	fs.StringVar(&o.detour, "detour-bin", "", "the detour binary the agents run (default $"+testbed.DetourEnv+", else detour next to detour-lab)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if o.transfer != 0 && o.transfer < 5*time.Second {
		return o, fmt.Errorf("%w: --transfer %v is shorter than 5s", errUsage, o.transfer)
	}
	for _, ov := range splitList(o.overlays) {
		if ov != "vxlan" && ov != "tinc" && ov != "detour" {
			return o, fmt.Errorf("%w: unknown overlay %q (want vxlan, tinc or detour)", errUsage, ov)
		}
	}
	return o, nil
}

func narrowRun(o narrowOptions, stdout, stderr io.Writer) error {
	bin, detour, out, err := experimentPaths(o.detour, o.out, "narrow")
	if err != nil {
		return err
	}
	c := narrow.DefaultConfig()
	c.Bin, c.Detour, c.Scenario, c.Log = bin, detour, o.scenario, stderr
	c.Overlays = splitList(o.overlays)
	c.StateDir = envDefault("DETOUR_TESTBED_STATE", "/run/detour/experiment-narrow")
	c.Prefix = envDefault("DETOUR_TESTBED_PREFIX", "nr-")
	if o.short {
		c.Short()
	}
	if o.transfer > 0 {
		c.Transfer = o.transfer
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, runErr := narrow.Run(ctx, c)
	if res == nil {
		return runErr
	}
	res.Versions = lanman.Versions(bin, detour)
	saveErr := saveResults(func() error { return res.Write(out) }, runErr, out)
	res.WriteTable(stdout)
	if saveErr != nil {
		return saveErr
	}
	fmt.Fprintf(stdout, "results in %s (%.0f s)\n", out, time.Since(start).Seconds())
	return nil
}
