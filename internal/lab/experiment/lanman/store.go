package lanman

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/etcd"
	"github.com/detour-overlay/detour/internal/lab/experiment/nsnet"
	"github.com/detour-overlay/detour/internal/lab/experiment/store"
	"github.com/detour-overlay/detour/internal/lab/experiment/zoo"
)

// The replicated stores the experiment can run.
const (
	ZooKeeper = "zookeeper"
	Etcd      = "etcd"
)

// replicated is a replicated store deployed on the testbed: one server
// per site in the site's first host, the leader at Leader.
type replicated interface {
	// start deploys the servers and waits until Leader leads.
	start(ctx context.Context) error
	stop()
	// connect opens an untimed session with one server; key names the
	// client's 1 KB item.
	connect(ctx context.Context, server, key string) (doer, error)
}

// doer runs one timed operation through its session with one server.
type doer interface {
	store.Doer
	Close()
}

// newStore returns the store named by kind with servers at Servers.
func (x *run) newStore(kind string) (replicated, error) {
	var servers []store.Server
	for _, name := range Servers {
		s, err := site(x.st, name)
		if err != nil {
			return nil, err
		}
		servers = append(servers, store.Server{Name: name, ID: myid[name], Addr: s.Hosts[0].Addr})
	}
	runIn := func(server string, argv []string) *exec.Cmd {
		return nsnet.Command(x.site(server).Hosts[0].NS, argv...)
	}
	dial := store.Dialer(nsnet.Dialer(x.site(Client).Hosts[0].NS))
	dir := x.cfg.WorkDir + "/" + kind + "-" + x.ov
	switch kind {
	case ZooKeeper, "":
		return &zooStore{x: x, dial: dial, ens: &zoo.Ensemble{Servers: servers, Dir: dir, Run: runIn, Dial: dial}}, nil
	case Etcd:
		return &etcdStore{x: x, dial: dial, c: &etcd.Cluster{Servers: servers, Dir: dir, Run: runIn, Dial: dial}}, nil
	}
	return nil, fmt.Errorf("unknown store %q (want %s or %s)", kind, ZooKeeper, Etcd)
}

// zooStore is ZooKeeper 3.8: CLU leads because it has the highest myid.
type zooStore struct {
	x    *run
	dial store.Dialer
	ens  *zoo.Ensemble
}

func (z *zooStore) start(ctx context.Context) error {
	start := time.Now()
	if err := z.ens.Start(); err != nil {
		return err
	}
	qctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	modes, err := z.ens.WaitQuorum(qctx)
	if err != nil {
		return err
	}
	z.x.logf("ZooKeeper quorum in %.1f s: %v", time.Since(start).Seconds(), modes)
	if n := z.ens.Reelections; n > 0 {
		z.x.logf("ZooKeeper first elected another leader than %s; restarted it %d time(s)", Leader, n)
	}
	if out, err := zoo.FourLetter(z.dial, z.x.site(Leader).Hosts[0].Addr, "srvr"); err == nil {
		z.x.res.StoreVersion = "ZooKeeper " + zoo.ParseVersion(out)
	}
	return nil
}

func (z *zooStore) stop() { z.ens.Stop() }

func (z *zooStore) connect(ctx context.Context, server, key string) (doer, error) {
	return zoo.Connect(ctx, server, z.x.site(server).Hosts[0].Addr, z.dial, "/detour/"+key, 1024)
}

// etcdStore is etcd 3.4 with WAN timing; the leadership is moved to CLU.
type etcdStore struct {
	x    *run
	dial store.Dialer
	c    *etcd.Cluster
}

func (e *etcdStore) start(ctx context.Context) error {
	start := time.Now()
	if err := e.c.Start(); err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := e.c.PlaceLeader(lctx, Leader); err != nil {
		return err
	}
	e.x.logf("etcd leader at %s after %.1f s", Leader, time.Since(start).Seconds())
	return nil
}

func (e *etcdStore) stop() { e.c.Stop() }

func (e *etcdStore) connect(ctx context.Context, server, key string) (doer, error) {
	for _, s := range e.c.Servers {
		if s.Name == server {
			return etcd.Connect(ctx, s, e.dial, "detour/"+key, 1024)
		}
	}
	return nil, fmt.Errorf("etcd: no server %s", server)
}

// collectLogs moves the testbed's logs (agents, emulator, tinc, cross
// traffic) and the store servers' logs and configurations of the current
// overlay into cfg.LogDir/OVERLAY, leaving the stores' data behind, and
// removes the testbed's state directory once it is empty.
func (x *run) collectLogs() {
	if x.cfg.LogDir == "" {
		return
	}
	dst := filepath.Join(x.cfg.LogDir, x.ov)
	if x.cfg.TestbedState != "" {
		moveFiles(x.cfg.TestbedState, filepath.Join(dst, "testbed"))
		_ = os.Remove(x.cfg.TestbedState)
	}
	storeDir := filepath.Join(x.cfg.WorkDir, x.cfg.Store+"-"+x.ov)
	entries, _ := os.ReadDir(storeDir)
	for _, e := range entries {
		if e.IsDir() {
			moveFiles(filepath.Join(storeDir, e.Name()), filepath.Join(dst, x.cfg.Store, e.Name()))
		}
	}
}

// moveFiles moves the regular files of dir (not its sub-directories) into
// dst, copying when a rename across file systems fails.
func moveFiles(dir, dst string) {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		from, to := filepath.Join(dir, e.Name()), filepath.Join(dst, e.Name())
		if os.Rename(from, to) == nil {
			continue
		}
		if b, err := os.ReadFile(from); err == nil && os.WriteFile(to, b, 0o644) == nil {
			_ = os.Remove(from)
		}
	}
}
