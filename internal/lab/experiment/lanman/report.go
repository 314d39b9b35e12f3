package lanman

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/results"
	"github.com/detour-overlay/detour/internal/lab/testbed"
)

// Files of the results directory.
const (
	SamplesFile    = "samples.csv"
	SummaryFile    = "summary.csv"
	TableFile      = "summary.txt"
	DelaysFile     = "delays.csv"
	RoutesFile     = "routes.csv"
	TruthFile      = "truth.csv"
	ReactionFile   = "reaction.txt"
	VersionsFile   = "versions.txt"
	ContinuousFile = "continuous.csv"
)

// Summary returns the summary table with the model's predictions.
func (r *Result) Summary() []results.Row {
	rows := results.Summarize(r.Records)
	var out []results.Row
	for _, row := range rows {
		if row.Phase == "continuous" {
			continue
		}
		row.PredictedMs = r.Predicted[row.Key]
		row.TruthPredictedMs = r.PredictedTruth[row.Key]
		out = append(out, row)
	}
	return out
}

// Write stores everything in dir: raw samples, summary (CSV and text),
// delays per phase, the continuous runs' route and delay timelines, the
// reaction figures and the versions.
func (r *Result) Write(dir string, versions string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.dir = dir
	writers := []struct {
		name string
		fn   func(io.Writer) error
	}{
		{SamplesFile, func(w io.Writer) error { return results.WriteCSV(w, r.Records) }},
		{SummaryFile, func(w io.Writer) error { return results.WriteSummaryCSV(w, r.Summary()) }},
		{TableFile, r.WriteReport},
		{DelaysFile, r.writeDelays},
		{RoutesFile, r.writeRoutes},
		{TruthFile, r.writeTruth},
		{ContinuousFile, r.writeContinuous},
		{VersionsFile, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "%sstore as running: %s\n", versions, r.StoreVersion)
			return err
		}},
	}
	for _, x := range writers {
		if err := writeFile(filepath.Join(dir, x.name), x.fn); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// WriteReport prints the short summary and the files written, then the
// long table with its columns explained, the model check and the reaction
// of every continuous run.
func (r *Result) WriteReport(w io.Writer) error {
	rows := r.Summary()
	r.writeSummary(w, rows)
	fmt.Fprintln(w)
	writeColumns(w)
	fmt.Fprintln(w)
	if err := results.PrintTable(w, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	r.writeModelCheck(w, rows)
	r.writeReroutes(w)
	return nil
}

// writeModelCheck reports how many medians are within 10 % of the model.
func (r *Result) writeModelCheck(w io.Writer, rows []results.Row) {
	within, total := 0, 0
	worst, worstRow := 0.0, results.Row{}
	for _, row := range rows {
		if row.PredictedMs <= 0 {
			continue
		}
		total++
		e := math.Abs(row.MedianMs-row.PredictedMs) / row.PredictedMs
		if e <= 0.10 {
			within++
		}
		if e > worst {
			worst, worstRow = e, row
		}
	}
	fmt.Fprintf(w, "model check: %d of %d medians within 10 %% of the prediction (reads through the local server, predicted 0, are not counted)\n", within, total)
	if total > 0 {
		fmt.Fprintf(w, "  largest deviation: %s phase %s %s via %s: measured %.1f ms, predicted %.1f ms (%+.1f%%)\n",
			worstRow.Overlay, worstRow.Phase, worstRow.Op, worstRow.Server, worstRow.MedianMs, worstRow.PredictedMs,
			100*(worstRow.MedianMs-worstRow.PredictedMs)/worstRow.PredictedMs)
	}
}

func (r *Result) writeReroutes(w io.Writer) {
	for _, ov := range sortedKeys(r.Reroute) {
		fmt.Fprintf(w, "%s, phase c: relayed %s<->%s %v after the pins were removed\n", ov, LoadA, LoadB, r.Reroute[ov].Round(time.Millisecond))
	}
	for _, ov := range sortedKeys(r.Continuous) {
		cr := r.Continuous[ov]
		re := cr.React()
		fmt.Fprintf(w, "%s, continuous run (%d operations %s->%s, alternating read/write): ", ov, len(cr.Samples), Client, Leader)
		if !re.Rerouted {
			fmt.Fprintf(w, "no route change; largest latency under load %.1f ms\n", re.MaxMs)
		} else {
			var dirs []string
			for _, d := range sortedKeys(re.After) {
				dir := fmt.Sprintf("%s %v", d, re.After[d].Round(time.Millisecond))
				if a, ok := re.AfterOnsetDir[d]; ok {
					dir += fmt.Sprintf(" (%v after its link's queue began to build)", a.Round(time.Millisecond))
				}
				dirs = append(dirs, dir)
			}
			how := "the agents' times; onsets to the packet: the first of a run that waited 5 ms or more and reached 20 ms"
			if !re.Exact {
				how = fmt.Sprintf("polled: changes up to 100 ms late, onsets (%d ms of queue) up to 200 ms", onsetQueueMs)
			}
			fmt.Fprintf(w, "rerouted after the load was started: %s [%s]", strings.Join(dirs, ", "), how)
			fmt.Fprintf(w, "\n  largest latency: %.1f ms between the start of the load and the change; %.1f ms (%.1f ms above the idle median of its kind) in flight at the change or within 2 s after it; %.1f ms within 2 s either side\n",
				re.BeforeMaxMs, re.SwitchMaxMs, re.SwitchExcessMs, re.MaxMs)
			fmt.Fprintf(w, "  %d path changes between %s and %s while the load ran\n", re.Changes, LoadA, LoadB)
		}
		fmt.Fprintf(w, "  medians idle: read %.1f, write %.1f ms; after: read %.1f, write %.1f ms\n",
			re.IdleMedian["read"], re.IdleMedian["write"], re.SettledMedian["read"], re.SettledMedian["write"])
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// writeDelays writes, per overlay and phase, the median one-way delay of
// every pair used by the model and the ground truth.
func (r *Result) writeDelays(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"overlay", "phase", "from", "to", "model_ms", "truth_ms"})
	var keys [][2]string
	for k := range r.TruthDelays {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+keys[i][1] < keys[j][0]+keys[j][1] })
	for _, k := range keys {
		truth, used := r.TruthDelays[k], r.Delays[k]
		var pairs [][2]string
		for p := range truth {
			pairs = append(pairs, p)
		}
		sort.Slice(pairs, func(i, j int) bool { return pairs[i][0]+pairs[i][1] < pairs[j][0]+pairs[j][1] })
		for _, p := range pairs {
			_ = cw.Write([]string{k[0], k[1], p[0], p[1], f3(used[p]), f3(truth[p])})
		}
	}
	cw.Flush()
	return cw.Error()
}

func (r *Result) writeRoutes(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"overlay", "t_s", "from", "to", "path", "relayed"})
	for _, ov := range sortedKeys(r.Continuous) {
		cr := r.Continuous[ov]
		for _, e := range cr.Routes {
			_ = cw.Write([]string{ov, f3(e.Time.Sub(cr.Start).Seconds()), e.From, e.To,
				strings.Join(fullPath(e.From, e.To, e.Path), ">"), strconv.FormatBool(e.Relayed())})
		}
	}
	cw.Flush()
	return cw.Error()
}

func (r *Result) writeTruth(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"overlay", "t_s", "from", "to", "expected_ms", "queue_ms"})
	for _, ov := range sortedKeys(r.Continuous) {
		cr := r.Continuous[ov]
		for _, p := range cr.Truth {
			_ = cw.Write([]string{ov, f3(p.Time.Sub(cr.Start).Seconds()), p.From, p.To, f3(p.ExpectedMS), f3(p.Queue)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeContinuous writes the continuous runs' samples on their own time
// axis (seconds from the run's start) with the load's start.
func (r *Result) writeContinuous(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"overlay", "t_s", "op", "latency_ms", "load_start_s", "error"})
	for _, ov := range sortedKeys(r.Continuous) {
		cr := r.Continuous[ov]
		ls := f3(cr.LoadStart.Sub(cr.Start).Seconds())
		for _, s := range cr.Samples {
			_ = cw.Write([]string{ov, f3(s.Start.Sub(cr.Start).Seconds()), string(s.Op), f3(float64(s.Latency) / 1e6), ls, s.Err})
		}
	}
	cw.Flush()
	return cw.Error()
}

func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// Versions describes everything that ran: detour-lab, detour, java, the
// ZooKeeper package, the kernel, iperf3, tinc and the peers wireguard-go
// and EasyTier (when scripts/install-peers.sh installed them).
func Versions(labBin, detourBin string) string {
	var b strings.Builder
	item := func(name string, argv ...string) {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		v := strings.TrimSpace(string(out))
		if err != nil && v == "" {
			v = "unavailable: " + err.Error()
		}
		fmt.Fprintf(&b, "%s: %s\n", name, strings.ReplaceAll(firstLines(v, 2), "\n", " | "))
	}
	item("detour-lab", labBin, "version")
	item("detour", detourBin, "version")
	item("java", "java", "-version")
	item("zookeeper (Debian package)", "dpkg-query", "-W", "-f=${Version}", "zookeeper")
	item("zookeeper jar", "sh", "-c", "ls /usr/share/java/zookeeper-3*.jar | head -1")
	item("etcd", "etcd", "--version")
	item("kernel", "uname", "-sr")
	item("iperf3", "dpkg-query", "-W", "-f=${Version}", "iperf3")
	item("tinc", "dpkg-query", "-W", "-f=${Version}", "tinc")
	peers := os.Getenv(testbed.PeersEnv)
	if peers == "" {
		peers = testbed.DefaultPeersDir
	}
	item("wireguard-go", "cat", filepath.Join(peers, "peers/bin/wireguard-go.version"))
	item("easytier-core", filepath.Join(peers, "easytier/bin/easytier-core"), "--version")
	item("go client", "echo", "github.com/go-zookeeper/zk v1.0.4")
	item("cpus", "nproc")
	fmt.Fprintf(&b, "date: %s\n", time.Now().UTC().Format(time.RFC3339))
	return b.String()
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return string(bytes.TrimSpace([]byte(strings.Join(lines, "\n"))))
}
