// Command detour is the single binary of the detour overlay: the site agent,
// the operator's CLI, the multi-site WAN testbed and the experiments.
package main

import (
	"os"

	"github.com/detour-overlay/detour/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
