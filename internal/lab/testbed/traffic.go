package testbed

import (
	"fmt"
	"log"
	"strconv"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/lab/scenario"
	"github.com/detour-overlay/detour/internal/lab/wanem"
)

// trafficManager starts and stops the scenario's cross-traffic flows:
// iperf3 TCP between gateway namespaces over the underlay, outside any
// overlay. Every process is recorded in traffic.json so that Down can
// stop it even if the emulator died.
type trafficManager struct {
	mu      sync.Mutex
	dir     string
	st      *State
	sc      *scenario.Scenario
	running map[string][]Proc
}

func newTrafficManager(dir string, st *State, sc *scenario.Scenario) *trafficManager {
	return &trafficManager{dir: dir, st: st, sc: sc, running: map[string][]Proc{}}
}

// TrafficResult answers a "traffic" request.
type TrafficResult struct {
	Running []string `json:"running"`
}

func (tm *trafficManager) handle(r wanem.Request) (any, error) {
	var err error
	switch r.Action {
	case "start":
		err = tm.start(r.Name)
	case "stop":
		err = tm.stop(r.Name)
	case "", "list":
	default:
		err = fmt.Errorf("traffic action %q: want start, stop or list", r.Action)
	}
	if err != nil {
		return nil, err
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	res := TrafficResult{Running: []string{}}
	for name := range tm.running {
		res.Running = append(res.Running, name)
	}
	return res, nil
}

// start launches a flow (both directions when the flow says so).
func (tm *trafficManager) start(name string) error {
	idx := tm.sc.FlowIndex(name)
	if idx < 0 {
		return fmt.Errorf("%w %q (the scenario defines %d flows)", errUnknownFlow, name, len(tm.sc.Traffic))
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if _, on := tm.running[name]; on {
		return fmt.Errorf("flow %q is already running", name)
	}
	fl := tm.sc.Traffic[idx]
	a, b := tm.sc.SiteIndex(fl.From), tm.sc.SiteIndex(fl.To)
	dirs := [][2]int{{a, b}}
	if fl.Both {
		dirs = append(dirs, [2]int{b, a})
	}
	var procs []Proc
	for k, d := range dirs {
		ps, err := tm.startOne(fmt.Sprintf("traffic-%s-%d", name, k), d[0], d[1], 5201+2*idx+k, fl.Rate)
		procs = append(procs, ps...)
		if err != nil {
			killAll(procs)
			return err
		}
	}
	tm.running[name] = procs
	log.Printf("traffic %s: started", name)
	return tm.save()
}

// startOne starts an iperf3 server at site b and a client at site a. The
// emulator, which starts them, has real-time threads (startEmulator), and
// a child inherits the priority of the thread that started it: both run
// at normal priority whatever it was (chrt --other 0). An iperf3 client
// that inherited real-time priority and spun once its server had gone
// held a core for minutes, starving the experiment that was to stop it.
func (tm *trafficManager) startOne(name string, a, b, port int, rate scenario.Rate) ([]Proc, error) {
	srv, err := startDetached(tm.dir, name+"-server", "chrt", normalPriority("ip", "netns", "exec", tm.st.Sites[b].Gateway,
		"iperf3", "-s", "-p", strconv.Itoa(port))...)
	if err != nil {
		return nil, err
	}
	// iperf3 needs a moment to listen; the client fails at once if not.
	var cli Proc
	for try := 0; try < 20; try++ {
		time.Sleep(50 * time.Millisecond)
		args := []string{"ip", "netns", "exec", tm.st.Sites[a].Gateway, "iperf3", "-c", tm.st.Sites[b].Underlay,
			"-p", strconv.Itoa(port), "-t", "86400", "-i", "0"}
		if rate > 0 {
			args = append(args, "-b", strconv.FormatUint(uint64(rate), 10))
		}
		if cli, err = startDetached(tm.dir, name+"-client", "chrt", normalPriority(args...)...); err != nil {
			return []Proc{srv}, err
		}
		time.Sleep(100 * time.Millisecond)
		if cli.Alive() {
			return []Proc{srv, cli}, nil
		}
	}
	return []Proc{srv}, fmt.Errorf("iperf3 client %s did not start: %s", name, logTail(tm.dir, name+"-client"))
}

// normalPriority returns chrt's arguments that run argv at normal
// priority (SCHED_OTHER), whatever the caller's.
func normalPriority(argv ...string) []string { return append([]string{"--other", "0"}, argv...) }

// stop ends a running flow.
func (tm *trafficManager) stop(name string) error {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	procs, on := tm.running[name]
	if !on {
		return fmt.Errorf("flow %q is not running", name)
	}
	killAll(procs)
	delete(tm.running, name)
	log.Printf("traffic %s: stopped", name)
	return tm.save()
}

func (tm *trafficManager) stopAll() {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for name, procs := range tm.running {
		killAll(procs)
		delete(tm.running, name)
	}
	tm.save()
}

// save records the running processes; the caller holds mu.
func (tm *trafficManager) save() error {
	all := []Proc{}
	for _, procs := range tm.running {
		all = append(all, procs...)
	}
	return writeJSON(trafficPath(tm.dir), all)
}

// killAll stops processes, clients before servers.
func killAll(procs []Proc) {
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Kill(2 * time.Second)
	}
}
