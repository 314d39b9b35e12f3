package labcli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/detour-overlay/detour/internal/cli/command"
	"github.com/detour-overlay/detour/internal/lab/testbed"
	"github.com/detour-overlay/detour/internal/lab/tiers"
)

func init() {
	lab.Register(command.Command{Name: "tiers", Summary: "the storage tiers' helpers (the disk tier's background reader)", Run: runTiers,
		Usage: "tiers load [--file PATH --depth N] [--block BYTES] [--drop FILE --drop-every D]\n\nKeeps N direct reads of BYTES at random offsets of PATH outstanding, and\ndrops the page cache of FILE every D, until SIGTERM: the work that shares\na disk tier's device with its memcached (the testbed starts it inside the\ndisk's cgroups; docs/locality.md).\n"})
}

func runTiers(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "load" {
		fmt.Fprintln(stderr, "usage: detour-lab tiers load [--file PATH --depth N] [--block BYTES] [--drop FILE --drop-every D]")
		return 2
	}
	fs := flag.NewFlagSet("tiers load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o tiers.LoadOptions
	fs.StringVar(&o.File, "file", "", "file to read")
	fs.IntVar(&o.Depth, "depth", 0, "reads outstanding (0: none)")
	fs.IntVar(&o.Block, "block", tiers.LoadBlock, "bytes per read (a multiple of 512)")
	fs.StringVar(&o.DropFile, "drop", "", "file whose page cache is dropped periodically")
	fs.DurationVar(&o.DropEvery, "drop-every", 50*time.Millisecond, "period of the drops")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if (o.Depth > 0) == (o.File == "") || (o.Depth == 0 && o.DropFile == "") {
		return fail(stderr, "tiers load", fmt.Errorf("%w: give --file with --depth, or --drop, or both", errUsage))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := tiers.Background(ctx, o); err != nil {
		return fail(stderr, "tiers load", err)
	}
	return 0
}

// tbDiskCap changes the read caps of a kv server's disk tier.
func tbDiskCap(args []string, stdout, stderr io.Writer) error {
	fs, dir := newFlags("disk-cap", stderr)
	mbps := fs.Int("read-mbps", -1, "read bandwidth cap in MiB/s (0: none; default: the scenario's)")
	iops := fs.Int("read-iops", -1, "read I/Os per second cap (0: none; default: the scenario's)")
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "SERVER (IP:port)"); err != nil {
		return err
	}
	st, err := testbed.LoadState(*dir)
	if err != nil {
		return err
	}
	d := st.DiskOf(pos[0])
	if d == nil {
		return fmt.Errorf("%s has no disk tier in this testbed", pos[0])
	}
	if *mbps < 0 {
		*mbps = d.Config.ReadMBps
	}
	if *iops < 0 {
		*iops = d.Config.ReadIOPS
	}
	if err := d.SetCap(*mbps, *iops); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: reads capped at %d MiB/s and %d IOPS (0: none)\n", pos[0], *mbps, *iops)
	return nil
}
