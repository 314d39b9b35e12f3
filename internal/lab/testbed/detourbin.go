package testbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DetourEnv names the environment variable that gives the path of the
// detour binary the testbed runs as each site's agent.
const DetourEnv = "DETOUR_BIN"

// FindDetour returns the path of the detour binary: path when it is not
// empty, else $DETOUR_BIN, else the file detour next to the running
// executable (make build puts bin/detour next to bin/detour-lab). The
// file must exist and be executable; the error says how to name another.
func FindDetour(path string) (string, error) {
	how := "--detour-bin"
	if path == "" {
		path, how = os.Getenv(DetourEnv), "$"+DetourEnv
	}
	if path == "" {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding the detour binary next to this one: %w", err)
		}
		path, how = filepath.Join(filepath.Dir(self), "detour"), "the file next to "+filepath.Base(self)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err == nil && (fi.IsDir() || fi.Mode().Perm()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return "", fmt.Errorf("the detour binary %s (%s): %w; build it with 'make build' (bin/detour beside bin/detour-lab) or name it with --detour-bin or $%s",
			abs, how, err, DetourEnv)
	}
	return abs, nil
}

// usesDetour reports whether an overlay runs detour agents.
func usesDetour(overlay string) bool { return overlay == "detour" || overlay == "detour-plain" }
