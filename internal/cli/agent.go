package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
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
	if err := a.Run(ctx); err != nil {
		return Fail(stderr, "agent", err)
	}
	return 0
}
