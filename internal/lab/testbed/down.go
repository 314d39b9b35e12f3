package testbed

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/detour-overlay/detour/internal/api"
)

// Down removes the testbed recorded in dir: it stops every process it
// started (cross traffic, overlay daemons, the emulator), deletes every
// namespace (and with them every link and device inside), and removes the
// state files. Logs are kept. It carries on past errors and returns the
// first one.
func Down(dir string) error {
	if err := CheckRoot(); err != nil {
		return err
	}
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, p := range trafficProcs(dir) {
		p.Kill(2 * time.Second)
	}
	// Overlay daemons first, the emulator last, so that nothing is left
	// writing to a TUN device that disappears.
	for i := len(st.Procs) - 1; i >= 0; i-- {
		st.Procs[i].Kill(3 * time.Second)
	}
	keep(removeDisks(st))
	for _, ns := range append(st.Namespaces(), listNamespaces(st.Prefix)...) {
		keep(deleteNamespace(ns))
	}
	// An agent removes its API socket when it stops; one that was killed
	// leaves it behind.
	for _, site := range st.Sites {
		keep(removeSocket(api.NetnsSocket(site.Gateway)))
	}
	keep(removeWireGuardSockets(st))
	for _, f := range []string{trafficPath(dir), socketPath(dir), filepath.Join(dir, "scenario.yaml"), statePath(dir)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			keep(err)
		}
	}
	for _, sub := range []string{"tinc", "detour", "wireguard", "easytier"} {
		keep(os.RemoveAll(filepath.Join(dir, sub)))
	}
	if first != nil {
		return fmt.Errorf("down: %w", first)
	}
	return nil
}

// trafficProcs returns the cross-traffic processes the emulator recorded.
func trafficProcs(dir string) []Proc {
	b, err := os.ReadFile(trafficPath(dir))
	if err != nil {
		return nil
	}
	var procs []Proc
	json.Unmarshal(b, &procs)
	return procs
}

// removeSocket removes a unix socket file, if there is one at path.
func removeSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket {
		return nil
	}
	return os.Remove(path)
}
