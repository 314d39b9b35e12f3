package labcli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/cli/command"
	"github.com/detour-overlay/detour/internal/lab/topo"
	"github.com/detour-overlay/detour/internal/sim"
)

func init() {
	lab.Register(command.Command{Name: "sim", Summary: "run a whole overlay of N sites in the simulator and measure its control traffic and routes",
		Run: runSim, Usage: strings.TrimPrefix(simUsage, "usage: detour-lab ")})
}

const simUsage = `usage: detour-lab sim [--sites N] [--minutes M] [--topology azure|aws|geometric] [--seed S]
                     [--scheme old|new] [--warm D] [--jitter D] [--loss PCT] [--events] [--json]

Runs N sites (each the site core the agent runs) in the deterministic
simulator, on a topology generated from the Azure or AWS inter-region
matrices or at random (docs/scaling.md), all started at once, with
clocks ±5 s apart and ±50 ppm of skew. After
--warm it counts, for M simulated minutes, the control traffic each site
sends on the wire (payload and UDP/IPv4 headers) and the route changes,
then checks every ordered pair against the offline optimum (within
max(0.5 ms, 2 %) of the best path of at most 3 links). With --events it
then slows 5 links that carry direct routes by 100 ms, then 5 others
that carry a flow of stamped data (measured in-band as well as by
probes), and kills the site that relays the most routes, and reports
how long the routes took to leave them. No network, no root: it runs in this process.

`

func runSim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sites := fs.Int("sites", 16, "number of sites")
	minutes := fs.Float64("minutes", 1, "simulated minutes measured after the warm-up")
	kind := fs.String("topology", "azure", "topology generator: "+strings.Join(topo.Kinds, ", "))
	seed := fs.Uint64("seed", 1, "seed of the topology, the clocks and the network")
	scheme := fs.String("scheme", "new", "measurement scheme: old or new")
	warm := fs.Duration("warm", 40*time.Second, "simulated time from the start to the measured window (the new scheme estimates clock drift over 20 s spans)")
	jitter := fs.Duration("jitter", time.Millisecond, "jitter on every link (uniform)")
	loss := fs.Float64("loss", 0, "random loss on every link, percent")
	events := fs.Bool("events", false, "after the window, slow 5 idle links, then 5 busy ones, and kill the busiest relay")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write a heap profile at the end of the run to this file (go tool pprof)")
	if _, _, err := parseArgs(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return fail(stderr, "sim", err)
	}
	if *sites < 2 || *minutes <= 0 || *warm < 0 {
		return fail(stderr, "sim", fmt.Errorf("%w: want --sites ≥ 2, --minutes > 0, --warm ≥ 0", errUsage))
	}
	if _, ok := sim.Scheme(*scheme); !ok {
		return fail(stderr, "sim", fmt.Errorf("%w: --scheme %q: want old or new", errUsage, *scheme))
	}
	t, err := topo.Generate(*kind, *sites, *seed)
	if err != nil {
		return fail(stderr, "sim", fmt.Errorf("%w: %v", errUsage, err))
	}
	opt := sim.ScaleOptions{Topology: t, Seed: *seed, Scheme: *scheme, Warm: *warm,
		Steady: time.Duration(*minutes * float64(time.Minute)), Jitter: *jitter, Offset: 5 * time.Second, Skew: 50e-6, Events: *events, Loss: *loss / 100}
	if !*quiet {
		start := time.Now()
		opt.Progress = func(el time.Duration) {
			fmt.Fprintf(stderr, "sim: %s, %s: %v simulated in %v\n", t.Name, *scheme, el, time.Since(start).Round(time.Second))
		}
	}
	if *cpuProfile != "" {
		stop, err := command.StartCPUProfile(*cpuProfile)
		if err != nil {
			return fail(stderr, "sim", err)
		}
		defer stop()
	}
	if *memProfile != "" {
		opt.Done = func() {
			if err := writeHeapProfile(*memProfile); err != nil {
				fmt.Fprintf(stderr, "sim: %v\n", err)
			}
		}
	}
	rep := sim.RunScale(opt)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fail(stderr, "sim", err)
		}
		return 0
	}
	printSim(stdout, rep)
	return 0
}

// writeHeapProfile writes the live heap to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	return nil
}

// printSim prints a report for people.
func printSim(w io.Writer, r sim.ScaleReport) {
	fmt.Fprintf(w, "%s, scheme %s: %d sites, %.0f s simulated (window %.0f s after %.0f s) in %.1f s\n",
		r.Topology, r.Scheme, r.Sites, r.SimulatedS, r.WindowS, r.WarmS, r.WallS)
	fmt.Fprintf(w, "control traffic per site on the wire: mean %.1f kbit/s, max %.1f kbit/s, %.0f datagrams/s\n",
		r.ControlKbit, r.ControlKbitMax, r.DatagramsPerSite)
	types := make([]string, 0, len(r.ControlByType))
	for k := range r.ControlByType {
		types = append(types, k)
	}
	sort.Strings(types)
	for _, k := range types {
		fmt.Fprintf(w, "  %-12s %8.1f kbit/s\n", k, r.ControlByType[k])
	}
	fmt.Fprintf(w, "pairs: %d, relayed %d, outside max(0.5 ms, 2 %%) of the optimum: %d after the warm-up, %d at the end; worst: %s\n",
		r.Pairs, r.PairsRelayed, r.PairsOutsideAfterWarm, r.PairsOutsideBound, r.Worst)
	for _, d := range r.Outside {
		fmt.Fprintf(w, "  outside: %s\n", d)
	}
	fmt.Fprintf(w, "route changes in the window: %d (%d not to a truly shorter path); probe interval %.0f ms, %.1f members per site probed at the full rate\n",
		r.RouteChanges, r.RouteChangesNoise, r.ProbeIntervalMs, r.HotPerSite)
	slowed := func(what string, s, b *sim.Durations) {
		if s == nil || b == nil {
			return
		}
		fmt.Fprintf(w, "%s rerouted: %d, p50 %.0f ms, p95 %.0f ms, max %.0f ms (beyond the slowed link's round trip: p50 %.0f, p95 %.0f, max %.0f ms), not within 10 s: %d\n",
			what, s.Count, s.P50ms, s.P95ms, s.MaxMs, b.P50ms, b.P95ms, b.MaxMs, s.Missed)
	}
	slowed("slowed links", r.SlowedReroute, r.SlowedRerouteBeyondRTT)
	slowed("slowed links carrying traffic", r.SlowedBusyReroute, r.SlowedBusyRerouteBeyondRTT)
	if r.KilledRelayCover != nil {
		k := r.KilledRelayCover
		fmt.Fprintf(w, "killed relay %s: %d routes covered, p50 %.0f ms, p95 %.0f ms, max %.0f ms, not within 5 s: %d\n",
			r.KilledRelay, k.Count, k.P50ms, k.P95ms, k.MaxMs, k.Missed)
	}
}
