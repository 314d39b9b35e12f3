package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/detour-overlay/detour/internal/lab/scenario"
	"github.com/detour-overlay/detour/internal/lab/wanem"
)

// RunEmulator is the body of the hidden `detour-lab testbed wanem` process:
// it creates one TUN device per site in the root namespace, moves each
// into its site's gateway namespace as wan0 with the site's underlay
// address, carries packets between them, and answers the control socket
// (truth, link set, cross traffic, timeline) until SIGTERM or SIGINT.
func RunEmulator(dir string) error {
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, "scenario.yaml"))
	if err != nil {
		return err
	}
	sc, err := scenario.Parse(b)
	if err != nil {
		return fmt.Errorf("scenario.yaml: %w", err)
	}
	ports, err := makeUnderlay(st)
	if err != nil {
		return err
	}
	em, err := wanem.New(sc, ports)
	if err != nil {
		return err
	}
	// Every site has a reader and a scheduler that spend their time
	// blocked in read and ppoll. A thread returning from a system call
	// needs a P to go on; with fewer Ps than such threads it may wait
	// for the runtime's monitor to take one back from a thread still
	// blocked, which it does only every 10 ms when the process is
	// otherwise quiet: a packet then arrives 10 ms late. One P per
	// thread (and two for the control socket and traffic) removes the
	// wait; the threads still need CPU only when packets move.
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), 2*len(ports)+2))
	em.Start()
	tm := newTrafficManager(dir, st, sc)
	defer tm.stopAll()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	tl := &timeline{em: em, tm: tm, sc: sc, ctx: ctx}
	os.Remove(socketPath(dir))
	ln, err := net.Listen("unix", socketPath(dir))
	if err != nil {
		return err
	}
	go wanem.Serve(ln, func(r wanem.Request) (any, error) {
		switch r.Op {
		case "traffic":
			return tm.handle(r)
		case "timeline":
			return tl.start()
		}
		return em.Handle(r)
	})
	log.Printf("wanem: %d sites up", len(ports))
	<-ctx.Done()
	log.Printf("wanem: stopping")
	ln.Close()
	em.Stop()
	return nil
}

// makeUnderlay creates the TUN devices and configures them in the
// gateway namespaces.
func makeUnderlay(st *State) ([]wanem.Port, error) {
	tag := make([]byte, 2)
	rand.Read(tag)
	var ports []wanem.Port
	for i, site := range st.Sites {
		// A temporary name unique on the machine; it becomes wan0 inside
		// the gateway namespace.
		name := fmt.Sprintf("dtw%s%d", hex.EncodeToString(tag), i)
		fd, err := wanem.OpenTUN(name)
		if err != nil {
			return nil, err
		}
		if err := ip("link", "set", name, "netns", site.Gateway); err != nil {
			unix.Close(fd)
			return nil, err
		}
		err = ipBatch(site.Gateway, append([]string{
			fmt.Sprintf("link set %s name wan0", name),
			fmt.Sprintf("link set wan0 mtu %d txqueuelen 1000", st.UnderlayMTU),
			fmt.Sprintf("addr add %s/%d dev wan0", site.Underlay, underlayBits),
			"link set wan0 up",
		}, underlay6Lines(st, site)...))
		if err != nil {
			return nil, err
		}
		ports = append(ports, wanem.Port{FD: fd, Addr: netip.MustParseAddr(site.Underlay)})
	}
	return ports, nil
}

// timeline runs the scenario's timed events once Up has finished.
type timeline struct {
	once sync.Once
	em   *wanem.Emulator
	tm   *trafficManager
	sc   *scenario.Scenario
	ctx  context.Context
}

func (t *timeline) start() (any, error) {
	started := false
	t.once.Do(func() {
		started = true
		t0 := time.Now()
		for _, ev := range t.sc.Timeline {
			go t.run(t0, ev)
		}
	})
	return map[string]any{"started": started, "events": len(t.sc.Timeline)}, nil
}

func (t *timeline) run(t0 time.Time, ev scenario.Event) {
	select {
	case <-t.ctx.Done():
		return
	case <-time.After(time.Until(t0.Add(ev.At.D()))):
	}
	var err error
	switch {
	case ev.Set != nil:
		_, err = t.em.Handle(wanem.Request{Op: "set", From: ev.Set.From, To: ev.Set.To, Both: ev.Set.Both, Patch: ev.Set.Patch})
	case ev.Start != "":
		err = t.tm.start(ev.Start)
	case ev.Stop != "":
		err = t.tm.stop(ev.Stop)
	}
	if err != nil {
		log.Printf("timeline at %v: %v", ev.At, err)
	} else {
		log.Printf("timeline at %v: done", ev.At)
	}
}

// errUnknownFlow is returned for a traffic flow the scenario lacks.
var errUnknownFlow = errors.New("unknown traffic flow")
