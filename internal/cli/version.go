package cli

import (
	"fmt"
	"io"
	"runtime/debug"
)

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

func init() { Register(VersionCommand("detour")) }

// VersionCommand is the version command of the binary prog: it prints
// Version and the Go toolchain that built the binary.
func VersionCommand(prog string) Command {
	return Command{
		Name:    "version",
		Summary: "print the version of " + prog + " and of the Go toolchain that built it",
		Run: func(args []string, stdout, stderr io.Writer) int {
			goVersion := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			fmt.Fprintf(stdout, "%s %s (%s)\n", prog, Version, goVersion)
			return 0
		},
	}
}
