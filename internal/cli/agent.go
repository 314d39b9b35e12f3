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
	"syscall"

	"github.com/detour-overlay/detour/internal/agent"
	"github.com/detour-overlay/detour/internal/cli/command"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/runstate"
)

func init() {
	Register(Command{Name: "agent", Summary: "run a site's overlay daemon (detour agent --config site.yaml)", Run: runAgent,
		Usage: "agent --config FILE [--state FILE] [--check] [--log-level LEVEL]\n\n" +
			"The daemon of a site's gateway: it joins the overlay through the peers of FILE\n" +
			"(dist/site.example.yaml documents every field), measures every pair and forwards\n" +
			"the site's virtual networks over the fastest paths. --check reports every mistake\n" +
			"in FILE at once, then what the agent needs on this machine (root, the bridges,\n" +
			"the UDP port, the key and token files), and exits 1 if it could not start.\n" +
			"Every change made at run time (detour net, detour route pin/forbid) is stored\n" +
			"in --state before it is acknowledged (default: FILE with .state.json for its\n" +
			"extension, beside it; the packaged unit uses /var/lib/detour/site.state.json)\n" +
			"and applied over FILE at the next start. SIGHUP, like detour reload, reads\n" +
			"FILE again and applies what changed."})
}

func runAgent(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the site's configuration file (YAML)")
	statePath := fs.String("state", "", "the file keeping run-time changes (default: the config's name with .state.json)")
	check := fs.Bool("check", false, "validate the configuration, check what the agent needs at start on this machine (privileges, bridges, ports, key and token files) and exit")
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
		return reportPreflight(stdout, *path, cfg)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	if *statePath == "" {
		*statePath = runstate.DefaultPath(*path)
	}
	a, err := agent.New(cfg, agent.Options{Logger: log, Version: Version, StatePath: *statePath, ConfigPath: *path})
	if err != nil {
		return Fail(stderr, "agent", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer reloadOnHUP(a, log)()
	if dir := os.Getenv("DETOUR_CPUPROFILE_DIR"); dir != "" {
		defer startCPUProfile(filepath.Join(dir, "agent-"+cfg.Site+".pprof"), log)()
	}
	if err := a.Run(ctx); err != nil {
		return Fail(stderr, "agent", err)
	}
	return 0
}

// reloadOnHUP reloads the agent's configuration on every SIGHUP until the
// returned function is called.
func reloadOnHUP(a *agent.Agent, log *slog.Logger) func() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				if _, err := a.Reload(); err != nil {
					log.Error("SIGHUP: reload refused", "err", err)
				}
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}

// reportPreflight prints the findings of agent.Preflight and returns 1
// when one of them would stop the agent.
func reportPreflight(stdout io.Writer, path string, cfg *config.Agent) int {
	code := 0
	for _, f := range agent.Preflight(cfg) {
		fmt.Fprintf(stdout, "%s: %s\n", path, f)
		if f.Problem {
			code = 1
		}
	}
	if code == 0 {
		fmt.Fprintf(stdout, "%s: valid configuration of site %s; the agent can start here\n", path, cfg.Site)
	}
	return code
}

// startCPUProfile writes a CPU profile of the agent to file until the
// returned function is called (at a clean exit). It is how the benchmark
// harness profiles agents that the testbed starts: it sets
// DETOUR_CPUPROFILE_DIR in their environment.
func startCPUProfile(file string, log *slog.Logger) func() {
	stop, err := command.StartCPUProfile(file)
	if err != nil {
		log.Warn("cpu profile", "err", err)
		return func() {}
	}
	return stop
}
