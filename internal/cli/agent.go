package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"

	"github.com/detour-overlay/detour/internal/agent"
	"github.com/detour-overlay/detour/internal/config"
)

func init() {
	Register(Command{Name: "agent", Summary: "run a site's overlay daemon (detour agent --config site.yaml)", Run: runAgent})
}

func runAgent(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the site's configuration file (YAML)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		return Fail(stderr, "agent", fmt.Errorf("%w: detour agent --config FILE [--check] [--log-level LEVEL]", ErrUsage))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return Fail(stderr, "agent", fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", ErrUsage, *level))
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return Fail(stderr, "agent", err)
	}
	if *check {
		fmt.Fprintf(stdout, "%s: valid configuration of site %s\n", *path, cfg.Site)
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	a, err := agent.New(cfg, agent.Options{Logger: log, Version: Version})
	if err != nil {
		return Fail(stderr, "agent", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir := os.Getenv("DETOUR_CPUPROFILE_DIR"); dir != "" {
		defer startCPUProfile(filepath.Join(dir, "agent-"+cfg.Site+".pprof"), log)()
	}
	if err := a.Run(ctx); err != nil {
		return Fail(stderr, "agent", err)
	}
	return 0
}

// startCPUProfile writes a CPU profile of the agent to file until the
// returned function is called (at a clean exit). It is how the benchmark
// harness profiles agents that the testbed starts: it sets
// DETOUR_CPUPROFILE_DIR in their environment.
func startCPUProfile(file string, log *slog.Logger) func() {
	f, err := os.Create(file)
	if err != nil {
		log.Warn("cpu profile", "err", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Warn("cpu profile", "err", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
