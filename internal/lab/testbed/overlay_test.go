package testbed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A /proc/net/tcp table as Linux 6.18 prints it: a header, a socket
// listening on 198.18.0.1:655, one connected to that port from elsewhere
// and one listening on port 6550.
const tcpTable = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 010012C6:028F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41211 1 0000000000000000 100 0 0 10 0
   1: 020012C6:9D2F 010012C6:028F 01 00000000:00000000 00:00000000 00000000     0        0 41302 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1996 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41377 1 0000000000000000 100 0 0 10 0
`

func TestTCPListens(t *testing.T) {
	for _, c := range []struct {
		table string
		port  int
		want  bool
	}{
		{tcpTable, 655, true},
		{tcpTable, 6550, true},
		{tcpTable, 40239, false}, // 9D2F is a connected socket's local port, not a listener
		{tcpTable, 22, false},
		{"  sl  local_address rem_address   st\n", 655, false},
		{"", 655, false},
	} {
		if got := tcpListens(c.table, c.port); got != c.want {
			t.Errorf("tcpListens(port %d) = %v, want %v", c.port, got, c.want)
		}
	}
}

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
