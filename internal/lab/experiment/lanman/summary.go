package lanman

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/detour-overlay/detour/internal/lab/experiment/results"
)

// PhaseTitles name the static phases in the report and the plots.
var PhaseTitles = map[string]string{
	"a": "idle",
	"b": "loaded",
	"c": "loaded, rerouting free",
}

// plotFiles are the plots scripts/plot_experiment.py writes, with what
// they show; OV stands for each overlay.
var plotFiles = []struct{ name, what string }{
	{"boxplots.png", "latency per server and phase, every overlay (log scale)"},
	{"boxplots-OV.png", "the same for one overlay"},
	{"timeseries-OV.png", "the continuous run: every operation, detour's path, the loaded links' delay"},
}

// dataFiles are the files Write stores, with what they hold.
var dataFiles = []struct{ name, what string }{
	{TableFile, "this report"},
	{SummaryFile, "the long table below as CSV"},
	{SamplesFile, "every operation: overlay, phase, server, latency"},
	{ContinuousFile, "the continuous runs' operations on their own time axis"},
	{RoutesFile, "detour's path changes in the continuous runs"},
	{TruthFile, "the emulator's delay and queue of the loaded links over time"},
	{DelaysFile, "median one-way delays per phase: the model's input and the truth"},
	{VersionsFile, "versions of everything that ran"},
}

// overlays returns the overlays of the records in the order they ran.
func (r *Result) overlays() []string {
	var out []string
	seen := map[string]bool{}
	for _, rec := range r.Records {
		if !seen[rec.Overlay] {
			seen[rec.Overlay] = true
			out = append(out, rec.Overlay)
		}
	}
	return out
}

// writeSummary prints the short summary that opens the report: the median
// latency per overlay, phase, operation and server; the effect on the
// operations that cross the loaded link; detour's reroute times and the
// largest latency around the switch; and the files of the results
// directory.
func (r *Result) writeSummary(w io.Writer, rows []results.Row) {
	med := map[results.Key]float64{}
	for _, row := range rows {
		med[row.Key] = row.MedianMs
	}
	cell := func(k results.Key) string {
		if v, ok := med[k]; ok {
			return fmt.Sprintf("%7.1f", v)
		}
		return fmt.Sprintf("%7s", "-")
	}
	fmt.Fprintf(w, "SUMMARY: median latency in ms of the client's operations at %s through each server\n", Client)
	fmt.Fprintf(w, "(leader %s; the load is TCP cross traffic filling %s<->%s, the leader's link to the client)\n\n", Leader, LoadA, LoadB)
	line := func(b *strings.Builder) {
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		b.Reset()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-26s %-23s %s", "", "", "read via", "write via")
	line(&b)
	fmt.Fprintf(&b, "%-8s %-26s", "overlay", "phase")
	for range 2 {
		for _, s := range Servers {
			fmt.Fprintf(&b, "%7s", s)
		}
		b.WriteString("  ")
	}
	line(&b)
	for _, ov := range r.overlays() {
		for _, ph := range Phases {
			fmt.Fprintf(&b, "%-8s %-26s", ov, "("+ph+") "+PhaseTitles[ph])
			for _, op := range []string{"read", "write"} {
				for _, s := range Servers {
					b.WriteString(cell(results.Key{Overlay: ov, Phase: ph, Op: op, Server: s}))
				}
				b.WriteString("  ")
			}
			line(&b)
		}
	}
	fmt.Fprintf(w, "phases: (a) idle WAN; (b) the load, detour held on the direct paths; (c) the same load,\n")
	fmt.Fprintf(w, "detour free to reroute (vxlan, tinc and wireguard have no other path: (c) repeats (b) for them;\n")
	fmt.Fprintf(w, "easytier is never held: it is free to reroute in (b) and (c) alike)\n\n")
	// The operations the load degrades, phase by phase.
	for _, c := range [][2]string{{"read", LoadA}, {"write", LoadA}} {
		var parts []string
		for _, ov := range r.overlays() {
			var v []string
			for _, ph := range Phases {
				v = append(v, strings.TrimSpace(cell(results.Key{Overlay: ov, Phase: ph, Op: c[0], Server: c[1]})))
			}
			parts = append(parts, ov+" "+strings.Join(v, " -> "))
		}
		fmt.Fprintf(w, "%s via %s, phases a -> b -> c: %s ms\n", c[0], c[1], strings.Join(parts, "; "))
	}
	r.writeSwitchSummary(w)
	r.writeFiles(w)
}

// writeSwitchSummary prints detour's reroute times and the largest
// latency around each continuous run's switch.
func (r *Result) writeSwitchSummary(w io.Writer) {
	for _, ov := range sortedKeys(r.Reroute) {
		fmt.Fprintf(w, "%s rerouted %s<->%s through a relay %.2f s after its direct paths were unpinned in phase (c)\n",
			ov, LoadA, LoadB, r.Reroute[ov].Seconds())
	}
	for _, ov := range sortedKeys(r.Continuous) {
		re := r.Continuous[ov].React()
		if !re.Rerouted {
			fmt.Fprintf(w, "%s, continuous run: no reroute; largest latency under load %.1f ms\n", ov, re.MaxMs)
			continue
		}
		var dirs []string
		for _, d := range sortedKeys(re.After) {
			dir := fmt.Sprintf("%s %.1f s", d, re.After[d].Seconds())
			if a, ok := re.AfterOnsetDir[d]; ok {
				dir += fmt.Sprintf(" (%.0f ms after its queue began to build)", float64(a)/1e6)
			}
			dirs = append(dirs, dir)
		}
		fmt.Fprintf(w, "%s, continuous run: rerouted %s after the load started\n", ov, strings.Join(dirs, ", "))
		fmt.Fprintf(w, "  largest latency from 2 s before to 2 s after the switch: %.1f ms (%.1f ms above the idle median of its kind)\n",
			re.MaxMs, re.ExcessMs)
	}
}

// writeFiles lists the files of the results directory, when Write has
// been given one.
func (r *Result) writeFiles(w io.Writer) {
	if r.dir == "" {
		return
	}
	fmt.Fprintf(w, "\nfiles in %s:\n", r.dir)
	for _, f := range dataFiles {
		fmt.Fprintf(w, "  %-24s %s\n", f.name, f.what)
	}
	var cont []string
	for ov := range r.Continuous {
		cont = append(cont, ov)
	}
	sort.Strings(cont)
	for _, f := range plotFiles {
		names := []string{f.name}
		if strings.Contains(f.name, "OV") {
			names = nil
			list := r.overlays()
			if strings.HasPrefix(f.name, "timeseries") {
				list = cont
			}
			for _, ov := range list {
				names = append(names, strings.Replace(f.name, "OV", ov, 1))
			}
		}
		for _, n := range names {
			fmt.Fprintf(w, "  %-24s %s\n", n, f.what)
		}
	}
	if fi, err := os.Stat(filepath.Join(r.dir, "logs")); err == nil && fi.IsDir() {
		fmt.Fprintf(w, "  %-24s %s\n", "logs/", "the testbed's, agents' and servers' logs per overlay")
	}
}

// writeColumns explains the long table's columns.
func writeColumns(w io.Writer) {
	fmt.Fprint(w, `THE LONG TABLE: one line per overlay, phase, operation and server.
  n              timed operations (failed ones in brackets)
  median, p95    of their latency, ms
  predicted      the latency model's median (docs/experiment-lanman2017.md) fed the
                 one-way delays measured while the operations ran: detour's own
                 measurements for detour, the emulator's for vxlan and tinc; "-"
                 for reads through the client's own server, which cross no link
  error          the measured median's deviation from that prediction
  from truth     the same model fed the emulator's true delays, for every overlay
  error          the measured median's deviation from it
`)
}
