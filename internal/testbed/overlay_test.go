package testbed

import "testing"

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
