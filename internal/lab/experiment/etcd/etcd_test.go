package etcd

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/store"
)

func TestArgsCarryWANTimingAndTheWholeCluster(t *testing.T) {
	c := &Cluster{Dir: "/d", Servers: []store.Server{{Name: "CLU", Addr: "198.19.2.1"}, {Name: "LAN", Addr: "198.19.3.1"}}}
	args := strings.Join(c.Args(c.Servers[1]), " ")
	for _, want := range []string{
		"--heartbeat-interval 150", "--election-timeout 1500",
		"--initial-cluster CLU=http://198.19.2.1:2380,LAN=http://198.19.3.1:2380",
		"--listen-client-urls http://198.19.3.1:2379", "--data-dir /d/LAN/data",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("etcd args lack %q: %s", want, args)
		}
	}
}

func TestAgreedLeader(t *testing.T) {
	st := map[string]status{"a": {Leader: "7"}, "b": {Leader: "7"}}
	if l, ok := agreedLeader(st); !ok || l != "7" {
		t.Errorf("agreedLeader = %q, %v", l, ok)
	}
	st["c"] = status{Leader: "9"}
	if _, ok := agreedLeader(st); ok {
		t.Error("members disagreeing on the leader reported as agreed")
	}
	if _, ok := agreedLeader(map[string]status{"a": {Leader: "0"}}); ok {
		t.Error("no leader reported as agreed")
	}
}

// TestLoopbackCluster starts three real etcd members on 127.0.0.1-3,
// moves the leadership to the third and times puts and serializable reads
// through each member.
func TestLoopbackCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd servers")
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd not installed (scripts/install-deps.sh)")
	}
	c := &Cluster{Dir: t.TempDir(), Servers: []store.Server{
		{Name: "BOR", Addr: "127.0.0.1"}, {Name: "LAN", Addr: "127.0.0.2"}, {Name: "CLU", Addr: "127.0.0.3"},
	}}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pids := c.PIDs()
	t.Cleanup(func() {
		c.Stop()
		for _, p := range pids {
			if syscall.Kill(p, 0) == nil {
				t.Errorf("etcd pid %d still alive after Stop", p)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.PlaceLeader(ctx, "CLU"); err != nil {
		t.Fatal(err)
	}
	st, err := c.statuses()
	if err != nil {
		t.Fatal(err)
	}
	if st["BOR"].Leader != st["CLU"].Header.MemberID {
		t.Fatalf("leader %s, want CLU's id %s", st["BOR"].Leader, st["CLU"].Header.MemberID)
	}
	for _, s := range c.Servers {
		cl, err := Connect(ctx, s, nil, "k-"+s.Name, 1024)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []store.Op{store.Write, store.Read} {
			for i := 0; i < 10; i++ {
				if x := cl.Do(op); x.Err != "" {
					t.Fatalf("%s %s: %s", s.Name, op, x.Err)
				}
			}
		}
		cl.Close()
	}
}
