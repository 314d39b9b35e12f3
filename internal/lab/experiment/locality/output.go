package locality

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"
)

// SummaryRow is one line of summary.csv: a row's reads of one size in
// the static phase.
type SummaryRow struct {
	Policy, Mode                string
	Size                        int
	P50, P99, Mean              float64 // ms
	Local, Nearby, Remote, Errs int
	Reads                       int
}

// SummaryHeader is the first line of summary.csv.
var SummaryHeader = []string{"policy", "size_bytes", "p50_ms", "p99_ms", "reads_local", "reads_nearby", "reads_remote", "mode", "reads", "errors", "mean_ms"}

// Summarize reduces the static phase's samples to one line per row and
// size, rows in the order of Tiers then Policies.
func Summarize(samples []Sample) []SummaryRow {
	type k struct {
		policy, mode string
		size         int
	}
	lat := map[k][]float64{}
	rows := map[k]*SummaryRow{}
	for _, s := range samples {
		if s.Phase != "static" {
			continue
		}
		kk := k{s.Policy, s.Mode, s.Size}
		r := rows[kk]
		if r == nil {
			r = &SummaryRow{Policy: s.Policy, Mode: s.Mode, Size: s.Size}
			rows[kk] = r
		}
		r.Reads++
		if s.Err != "" {
			r.Errs++
			continue
		}
		lat[kk] = append(lat[kk], ms(s.Latency))
		switch s.Class {
		case Local:
			r.Local++
		case Nearby:
			r.Nearby++
		default:
			r.Remote++
		}
	}
	var out []SummaryRow
	for kk, r := range rows {
		l := lat[kk]
		sort.Float64s(l)
		r.P50, r.P99 = Quantile(l, 0.50), Quantile(l, 0.99)
		sum := 0.0
		for _, v := range l {
			sum += v
		}
		if len(l) > 0 {
			r.Mean = sum / float64(len(l))
		}
		out = append(out, *r)
	}
	order := func(r SummaryRow) int {
		if i := slices.Index(Tiers, r.Policy); i >= 0 && r.Mode == ModeTier {
			return i
		}
		i := slices.Index(Policies, r.Policy)
		if r.Mode == ModeDetour {
			i += len(Policies)
		}
		return len(Tiers) + i
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Size != out[j].Size {
			return out[i].Size < out[j].Size
		}
		return order(out[i]) < order(out[j])
	})
	return out
}

// Quantile is the nearest-rank quantile q of sorted values (NaN when
// empty).
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Move is how long a row took to change replicas after a dynamics event.
type Move struct {
	Policy, Mode, Event string
	// Before is the class most reads went to in the 2 s before the
	// event; After the class of the first read that left it for good
	// (at least 1 s); AfterMS the time from the event to that read, or
	// -1 when the row stayed.
	Before, After string
	AfterMS       float64
}

// Moves finds, for every row and dynamics event, when its reads moved.
func Moves(samples []Sample, events []Event) []Move {
	byRow := map[string][]Sample{}
	var keys []string
	for _, s := range samples {
		if s.Phase == "static" || s.Err != "" {
			continue
		}
		k := s.Policy + "/" + s.Mode
		if _, ok := byRow[k]; !ok {
			keys = append(keys, k)
		}
		byRow[k] = append(byRow[k], s)
	}
	var out []Move
	for _, k := range keys {
		ss := byRow[k]
		for _, ev := range events {
			out = append(out, moveAfter(ss, ev))
		}
	}
	return out
}

func moveAfter(ss []Sample, ev Event) Move {
	m := Move{Policy: ss[0].Policy, Mode: ss[0].Mode, Event: ev.What, AfterMS: -1}
	count := map[string]int{}
	for _, s := range ss {
		if s.Start.Before(ev.At) && s.Start.After(ev.At.Add(-2*time.Second)) {
			count[s.Class]++
		}
	}
	for c, n := range count {
		if n > count[m.Before] || m.Before == "" {
			m.Before = c
		}
	}
	for i, s := range ss {
		if s.Start.Before(ev.At) || s.Class == m.Before {
			continue
		}
		stays := true
		for _, t := range ss[i:] {
			if t.Start.Sub(s.Start) > time.Second {
				break
			}
			if t.Class == m.Before {
				stays = false
				break
			}
		}
		if stays {
			m.After, m.AfterMS = s.Class, ms(s.Start.Sub(ev.At))
			return m
		}
	}
	return m
}

// Write writes the results to dir: samples.csv, summary.csv, disk.json,
// rows.json, events.csv, moves.csv and versions.txt.
func (r *Result) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	var samples [][]string
	for _, s := range r.Samples {
		samples = append(samples, []string{s.Policy, s.Mode, s.Phase, strconv.Itoa(s.Size), strconv.Itoa(s.Round),
			strconv.FormatInt(s.Start.UnixNano(), 10), f(ms(s.Latency)), s.Site, s.Tier, s.Class, s.Err})
	}
	var summary [][]string
	for _, s := range Summarize(r.Samples) {
		summary = append(summary, []string{s.Policy, strconv.Itoa(s.Size), f(s.P50), f(s.P99),
			strconv.Itoa(s.Local), strconv.Itoa(s.Nearby), strconv.Itoa(s.Remote), s.Mode, strconv.Itoa(s.Reads), strconv.Itoa(s.Errs), f(s.Mean)})
	}
	var events [][]string
	for _, e := range r.Events {
		events = append(events, []string{strconv.FormatInt(e.At.UnixNano(), 10), e.What})
	}
	var moves [][]string
	for _, m := range Moves(r.Samples, r.Events) {
		moves = append(moves, []string{m.Policy, m.Mode, m.Event, m.Before, m.After, f(m.AfterMS)})
	}
	for _, t := range []struct {
		name   string
		header []string
		rows   [][]string
	}{
		{"samples.csv", []string{"policy", "mode", "phase", "size_bytes", "round", "start_unix_ns", "latency_ms", "site", "tier", "class", "error"}, samples},
		{"summary.csv", SummaryHeader, summary},
		{"events.csv", []string{"at_unix_ns", "event"}, events},
		{"moves.csv", []string{"policy", "mode", "event", "before", "after", "moved_after_ms"}, moves},
	} {
		if err := writeCSV(filepath.Join(dir, t.name), t.header, t.rows); err != nil {
			return err
		}
	}
	for name, v := range map[string]any{"disk.json": r.Disk, "rows.json": r.Rows} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "versions.txt"), []byte(r.Versions), 0o644)
}

func writeCSV(path string, header []string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(header)
	_ = w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteReport prints the summary table, the disk's counters and the
// dynamics' moves.
func (r *Result) WriteReport(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tpolicy\tmode\tp50 ms\tp99 ms\tlocal\tnearby\tremote\terrors\t")
	for _, s := range Summarize(r.Samples) {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t\n", s.Size, s.Policy, s.Mode, s.P50, s.P99, s.Local, s.Nearby, s.Remote, s.Errs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	d := r.Disk
	fmt.Fprintf(w, "disk tier %s (cap %d MB/s, %d IOPS): %d reads served to the client (%.1f MB); memcached get_extstore +%d, extstore_bytes_read +%.1f MB, recache_from_extstore +%d; process read_bytes +%.1f MB\n",
		d.Server, d.ReadMBps, d.ReadIOPS, d.ClientReads, float64(d.ClientBytes)/1e6, d.Counters["get_extstore"],
		float64(d.Counters["extstore_bytes_read"])/1e6, d.Counters["recache_from_extstore"], float64(d.Counters["process_read_bytes"])/1e6)
	for _, m := range Moves(r.Samples, r.Events) {
		if m.Mode == ModeTier {
			continue
		}
		if m.AfterMS < 0 {
			fmt.Fprintf(w, "dynamics: %s/%s after %s: stayed %s\n", m.Policy, m.Mode, m.Event, m.Before)
			continue
		}
		fmt.Fprintf(w, "dynamics: %s/%s after %s: %s -> %s in %.0f ms\n", m.Policy, m.Mode, m.Event, m.Before, m.After, m.AfterMS)
	}
	return nil
}
