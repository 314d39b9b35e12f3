package testbed

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The peer overlays (what a user would pick instead of detour) run
// programs that only the benchmarks install, with scripts/install-peers.sh:
// wireguard-go and EasyTier under /opt/detour, wg from Debian's
// wireguard-tools. They are looked up here, before Up creates anything.

// PeersEnv names the environment variable that overrides the directory
// scripts/install-peers.sh installs into (default DefaultPeersDir).
const PeersEnv = "DETOUR_PEERS_DIR"

// DefaultPeersDir is where scripts/install-peers.sh puts the peers:
// bin/wireguard-go and easytier/bin/easytier-core.
const DefaultPeersDir = "/opt/detour"

// installPeers is the step that installs every peer overlay's programs.
const installPeers = "scripts/install-peers.sh (as root; `make bench` runs it)"

// peerBinary says where one program of a peer overlay is found: a path
// under the peers' directory, or a name on the PATH when rel is empty.
type peerBinary struct {
	name string
	rel  string
}

// peerBinaries lists the programs each peer overlay runs.
var peerBinaries = map[string][]peerBinary{
	"wireguard": {{name: "wireguard-go", rel: "peers/bin/wireguard-go"}, {name: "wg"}},
	"easytier":  {{name: "easytier-core", rel: "easytier/bin/easytier-core"}},
}

// isPeer reports whether an overlay is one of the peers run for comparison.
func isPeer(overlay string) bool { _, ok := peerBinaries[overlay]; return ok }

// findPeerBinaries returns the absolute path of every program the overlay
// needs, by name, or an error naming the first missing one and the step
// that installs it.
func findPeerBinaries(overlay string) (map[string]string, error) {
	dir := os.Getenv(PeersEnv)
	if dir == "" {
		dir = DefaultPeersDir
	}
	paths := map[string]string{}
	for _, b := range peerBinaries[overlay] {
		var path string
		var err error
		if b.rel == "" {
			path, err = exec.LookPath(b.name)
		} else {
			path = filepath.Join(dir, b.rel)
			var fi os.FileInfo
			fi, err = os.Stat(path)
			if err == nil && (fi.IsDir() || fi.Mode().Perm()&0o111 == 0) {
				err = errors.New("not an executable file")
			}
		}
		if err != nil {
			return nil, fmt.Errorf("--overlay %s needs %s (%v); it is installed only for the benchmarks: run %s", overlay, b.name, err, installPeers)
		}
		paths[b.name] = path
	}
	return paths, nil
}
