package testbed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FindDetour takes the path given, else $DETOUR_BIN, else detour beside
// the running executable, and refuses a missing or non-executable file
// with an error that says how to name another.
func TestFindDetour(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "detour")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(DetourEnv, "")
	if got, err := FindDetour(bin); err != nil || got != bin {
		t.Errorf("FindDetour(%s) = %q, %v; want the path", bin, got, err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), plain, dir} {
		if _, err := FindDetour(bad); err == nil || !strings.Contains(err.Error(), "--detour-bin") {
			t.Errorf("FindDetour(%s) = %v; want an error naming --detour-bin", bad, err)
		}
	}
	t.Setenv(DetourEnv, bin)
	if got, err := FindDetour(""); err != nil || got != bin {
		t.Errorf("with $%s: %q, %v; want %s", DetourEnv, got, err, bin)
	}
	// The test binary has no detour beside it.
	t.Setenv(DetourEnv, "")
	self, _ := os.Executable()
	_, err := FindDetour("")
	if want := filepath.Join(filepath.Dir(self), "detour"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("without a path: %v; want an error naming %s", err, want)
	}
}
