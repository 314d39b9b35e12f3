package zoo

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/store"
)

func TestConfigNamesEveryServerAndBindsItsOwnAddress(t *testing.T) {
	e := &Ensemble{Dir: "/tmp/x", Servers: []store.Server{
		{Name: "BOR", ID: 1, Addr: "198.18.1.10"},
		{Name: "LAN", ID: 2, Addr: "198.18.3.10"},
		{Name: "CLU", ID: 3, Addr: "198.18.2.10"},
	}}
	if got := e.Leader().Name; got != "CLU" {
		t.Fatalf("leader = %s, want CLU (highest myid)", got)
	}
	cfg := e.Config(e.Servers[1])
	for _, want := range []string{
		"clientPortAddress=198.18.3.10\n",
		"dataDir=/tmp/x/LAN/data\n",
		"server.1=198.18.1.10:2888:3888\n",
		"server.2=198.18.3.10:2888:3888\n",
		"server.3=198.18.2.10:2888:3888\n",
		"4lw.commands.whitelist=srvr,",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("zoo.cfg lacks %q:\n%s", want, cfg)
		}
	}
}

func TestParseModeAndVersion(t *testing.T) {
	srvr := "Zookeeper version: 3.8.0-debian, built on 2023-01-01\nLatency min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n"
	if m := ParseMode(srvr); m != "follower" {
		t.Errorf("mode = %q", m)
	}
	if v := ParseVersion(srvr); v != "3.8.0-debian, built on 2023-01-01" {
		t.Errorf("version = %q", v)
	}
	if m := ParseMode("This ZooKeeper instance is not currently serving requests\n"); m != "" {
		t.Errorf("mode of a server out of quorum = %q, want empty", m)
	}
}

func TestParentOf(t *testing.T) {
	for in, want := range map[string]string{"/a/b": "/a", "/a": "/", "/a/b/c": "/a/b"} {
		if got := parentOf(in); got != want {
			t.Errorf("parentOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLoopbackEnsemble starts three real ZooKeeper servers on 127.0.0.1-3,
// checks that the highest myid leads, and times reads and writes through
// each server. On loopback both are far below a millisecond or so; the
// check is that every operation succeeds and that writes, which need a
// quorum round, are not faster than reads.
func TestLoopbackEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three JVMs")
	}
	if _, err := os.Stat(DefaultJar); err != nil {
		t.Skip("ZooKeeper package not installed (scripts/install-deps.sh)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("java not installed")
	}
	e := &Ensemble{Dir: t.TempDir(), TickTime: 500 * time.Millisecond, Servers: []store.Server{
		{Name: "BOR", ID: 1, Addr: "127.0.0.1"},
		{Name: "LAN", ID: 2, Addr: "127.0.0.2"},
		{Name: "CLU", ID: 3, Addr: "127.0.0.3"},
	}}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	pids := e.PIDs()
	t.Cleanup(func() {
		e.Stop()
		for _, p := range pids {
			if syscall.Kill(p, 0) == nil {
				t.Errorf("server pid %d still alive after Stop", p)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	modes, err := e.WaitQuorum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("modes: %v", modes)
	for _, s := range e.Servers {
		// The server's own log4j.properties sends its log to LogFile.
		if b, err := os.ReadFile(e.LogFile(s)); err != nil || !strings.Contains(string(b), "QuorumPeer") {
			t.Errorf("%s: log %s missing or without QuorumPeer lines (err %v, %d bytes)", s.Name, e.LogFile(s), err, len(b))
		}
	}
	for _, s := range e.Servers {
		c, err := Connect(ctx, s.Name, s.Addr, nil, "/detour/"+s.Name, 1024)
		if err != nil {
			t.Fatal(err)
		}
		samples := store.Run(ctx, c, []store.Op{store.Read, store.Write}, 20, 5)
		c.Close()
		if len(samples) != 40 {
			t.Fatalf("%s: %d samples, want 40", s.Name, len(samples))
		}
		med := map[store.Op][]time.Duration{}
		for _, x := range samples {
			if x.Err != "" {
				t.Fatalf("%s %s #%d: %s", s.Name, x.Op, x.Seq, x.Err)
			}
			med[x.Op] = append(med[x.Op], x.Latency)
		}
		r, w := median(med[store.Read]), median(med[store.Write])
		t.Logf("%s: read median %v, write median %v", s.Name, r, w)
		if w < r {
			t.Errorf("%s: write median %v below read median %v", s.Name, w, r)
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// TestWrongLeader: a complete quorum led by another server than the one
// with the highest ID is the one WaitQuorum breaks up; a quorum still
// forming, or led by the intended leader, is not.
func TestWrongLeader(t *testing.T) {
	e := &Ensemble{Servers: []store.Server{{Name: "BOR", ID: 1}, {Name: "LAN", ID: 2}, {Name: "CLU", ID: 3}}}
	for _, tc := range []struct {
		modes map[string]string
		want  string
	}{
		{map[string]string{"BOR": "follower", "LAN": "leader", "CLU": "follower"}, "LAN"},
		{map[string]string{"BOR": "follower", "LAN": "follower", "CLU": "leader"}, ""},
		{map[string]string{"BOR": "follower", "LAN": "leader", "CLU": "looking"}, ""},
		{map[string]string{"BOR": "leader", "LAN": "leader", "CLU": "follower"}, ""},
	} {
		s, ok := e.wrongLeader(tc.modes)
		if got := map[bool]string{true: s.Name}[ok]; got != tc.want {
			t.Errorf("%v: wrong leader %q, want %q", tc.modes, got, tc.want)
		}
	}
}
