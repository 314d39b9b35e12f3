package testbed

import (
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMissingPeerNamesTheInstallStep: without the peers' programs, the
// error names the missing one and the step that installs it.
func TestMissingPeerNamesTheInstallStep(t *testing.T) {
	t.Setenv(PeersEnv, t.TempDir())
	for overlay, missing := range map[string]string{"wireguard": "wireguard-go", "easytier": "easytier-core"} {
		_, err := findPeerBinaries(overlay)
		if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "scripts/install-peers.sh") {
			t.Errorf("%s: error %v does not name %s and scripts/install-peers.sh", overlay, err, missing)
		}
	}
}

// TestPeerBinariesFound: an executable in the peers' directory is found
// by its absolute path; a file that is not executable is refused.
func TestPeerBinariesFound(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(PeersEnv, dir)
	path := filepath.Join(dir, "easytier/bin/easytier-core")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := findPeerBinaries("easytier"); err == nil {
		t.Error("a file that is not executable was accepted")
	}
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := findPeerBinaries("easytier")
	if err != nil || got["easytier-core"] != path {
		t.Errorf("got %v, %v; want easytier-core at %s", got, err, path)
	}
}

// TestEasyTierStaysInTheTestbed: every address easytier-core is told to
// listen on or dial is a testbed underlay address, it routes by latency,
// and it is given no public node.
func TestEasyTierStaysInTheTestbed(t *testing.T) {
	st := &State{HostMTU: 1380}
	for i, name := range []string{"Fujisawa", "Inagi", "Seoul"} {
		st.Sites = append(st.Sites, SiteState{Name: name, Underlay: UnderlayAddr(i).String()})
	}
	underlay := netip.MustParsePrefix("198.18.0.0/16")
	for i := range st.Sites {
		args := easyTierArgs(st, i, "secret")
		if !slices.Contains(args, "--latency-first") {
			t.Errorf("site %d: no --latency-first in %v", i, args)
		}
		for _, a := range args {
			if strings.Contains(a, "external") {
				t.Errorf("site %d: %q", i, a)
			}
			if !strings.Contains(a, "://") {
				continue
			}
			u, err := url.Parse(a)
			if err != nil {
				t.Fatal(err)
			}
			if addr, err := netip.ParseAddr(u.Hostname()); err != nil || !underlay.Contains(addr) {
				t.Errorf("site %d: %s is not a testbed underlay address", i, a)
			}
		}
		// Site i dials the i sites before it: one connection per pair.
		if n := strings.Count(strings.Join(args, " "), "udp://") - 1; n != i {
			t.Errorf("site %d dials %d peers, want %d", i, n, i)
		}
	}
}

// TestWireGuardNamesFit: the WireGuard interface names fit IFNAMSIZ (15
// bytes) for the longest prefix and the largest testbed, and differ
// between sites (their UAPI sockets share one directory).
func TestWireGuardNamesFit(t *testing.T) {
	seen := map[string]bool{}
	for i := range 54 {
		name := wgName("abcdef-", i)
		if len(name) > 15 || seen[name] {
			t.Errorf("site %d: %q too long or repeated", i, name)
		}
		seen[name] = true
	}
}
