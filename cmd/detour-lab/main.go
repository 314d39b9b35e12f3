// Command detour-lab is the lab of the detour overlay: the multi-site WAN
// testbed of network namespaces, its emulator and flood tool, and the
// experiments. It runs the gateway's binary, detour, as each site's
// agent: by default the file detour next to detour-lab, else the one
// named by --detour-bin or $DETOUR_BIN.
package main

import (
	"os"

	"github.com/detour-overlay/detour/internal/lab/labcli"
)

func main() {
	os.Exit(labcli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
