// Command detour is the gateway's binary of the detour overlay: the site
// agent (the daemon) and the operator's CLI. The lab (testbed, WAN
// emulator, experiments) is the separate binary detour-lab, and none of
// it is linked here.
package main

import (
	"os"

	"github.com/detour-overlay/detour/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
