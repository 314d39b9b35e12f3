package cli

import (
	"fmt"
	"io"
	"runtime/debug"
)

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

func init() {
	Register(Command{
		Name:    "version",
		Summary: "print the version of detour and of the Go toolchain that built it",
		Run: func(args []string, stdout, stderr io.Writer) int {
			goVersion := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			fmt.Fprintf(stdout, "detour %s (%s)\n", Version, goVersion)
			return 0
		},
	})
}
