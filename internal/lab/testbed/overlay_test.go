package testbed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDaemonLogsQuoteTheOverlaysLogs: an overlay that does not come up
// quotes the end of its daemons' logs on both sites; kernel VXLAN has none.
func TestDaemonLogsQuoteTheOverlaysLogs(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"tinc-fujisawa.log":  "tincd 1.0.36 starting\nReady\n",
		"tinc-us_east.log":   "Error while connecting to fujisawa: Connection refused\n",
		"agent-fujisawa.log": "agent: up\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := daemonLogs(Options{Overlay: "tinc", StateDir: dir}, "Fujisawa", "US-East")
	for _, want := range []string{"end of tinc-fujisawa.log:\ntincd 1.0.36 starting\nReady", "end of tinc-us_east.log:\nError while connecting"} {
		if !strings.Contains(got, want) {
			t.Errorf("tinc logs %q lack %q", got, want)
		}
	}
	if got := daemonLogs(Options{Overlay: "detour", StateDir: dir}, "Fujisawa"); !strings.Contains(got, "agent: up") {
		t.Errorf("detour logs %q lack the agent's", got)
	}
	if got := daemonLogs(Options{Overlay: "vxlan", StateDir: dir}, "Fujisawa"); got != "" {
		t.Errorf("vxlan has no daemon, got %q", got)
	}
}
