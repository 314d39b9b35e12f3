// Package results holds the per-operation samples of an experiment, writes
// them as CSV, and reduces them to the summary table: median and 95th
// percentile per overlay, phase, operation and server.
package results

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Record is one timed operation of the experiment.
type Record struct {
	Overlay string
	// Phase is "a", "b", "c" for the static runs and "continuous" for the
	// run of the paper's Figure 7.
	Phase  string
	Server string
	Op     string
	Seq    int
	Start  time.Time
	// Latency of the operation; Err is empty if it succeeded.
	Latency time.Duration
	Err     string
}

// CSVHeader is the first line of the samples file.
var CSVHeader = []string{"overlay", "phase", "server", "op", "seq", "start_unix_ns", "latency_ms", "error"}

// WriteCSV writes the records with a header line.
func WriteCSV(w io.Writer, recs []Record) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, r := range recs {
		row := []string{r.Overlay, r.Phase, r.Server, r.Op, strconv.Itoa(r.Seq),
			strconv.FormatInt(r.Start.UnixNano(), 10),
			strconv.FormatFloat(ms(r.Latency), 'f', 3, 64), r.Err}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadCSV parses what WriteCSV wrote.
func ReadCSV(r io.Reader) ([]Record, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || strings.Join(rows[0], ",") != strings.Join(CSVHeader, ",") {
		return nil, fmt.Errorf("results: not a samples file (header %v)", rows[0:min(1, len(rows))])
	}
	var out []Record
	for i, row := range rows[1:] {
		rec, err := parseRow(row)
		if err != nil {
			return nil, fmt.Errorf("results: line %d: %w", i+2, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

func parseRow(row []string) (Record, error) {
	if len(row) != len(CSVHeader) {
		return Record{}, fmt.Errorf("%d fields, want %d", len(row), len(CSVHeader))
	}
	seq, err := strconv.Atoi(row[4])
	if err != nil {
		return Record{}, err
	}
	ns, err := strconv.ParseInt(row[5], 10, 64)
	if err != nil {
		return Record{}, err
	}
	lat, err := strconv.ParseFloat(row[6], 64)
	if err != nil {
		return Record{}, err
	}
	return Record{Overlay: row[0], Phase: row[1], Server: row[2], Op: row[3], Seq: seq,
		Start: time.Unix(0, ns), Latency: time.Duration(lat * float64(time.Millisecond)), Err: row[7]}, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Key identifies one cell of the summary.
type Key struct {
	Overlay, Phase, Op, Server string
}

// Row is one line of the summary table.
type Row struct {
	Key
	N, Errors   int
	MedianMs    float64
	P95Ms       float64
	PredictedMs float64 // zero when no prediction was made
	// TruthPredictedMs is the prediction from the emulator's ground truth
	// rather than from the overlay's own measurements (zero if none).
	TruthPredictedMs float64
}

// Summarize groups successful records by overlay, phase, operation and
// server and returns the median and 95th percentile of each group, in a
// stable order (overlays and phases as first seen, then op, then server).
func Summarize(recs []Record) []Row {
	groups := map[Key][]float64{}
	errs := map[Key]int{}
	var keys []Key
	for _, r := range recs {
		k := Key{r.Overlay, r.Phase, r.Op, r.Server}
		if _, seen := groups[k]; !seen {
			keys = append(keys, k)
			groups[k] = nil
		}
		if r.Err != "" {
			errs[k]++
			continue
		}
		groups[k] = append(groups[k], ms(r.Latency))
	}
	var rows []Row
	for _, k := range keys {
		v := groups[k]
		sort.Float64s(v)
		rows = append(rows, Row{Key: k, N: len(v), Errors: errs[k], MedianMs: Quantile(v, 0.5), P95Ms: Quantile(v, 0.95)})
	}
	return rows
}

// Quantile returns the q-quantile of sorted values by linear interpolation
// between closest ranks; NaN for no values.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

// Find returns the row for k, if any.
func Find(rows []Row, k Key) (Row, bool) {
	for _, r := range rows {
		if r.Key == k {
			return r, true
		}
	}
	return Row{}, false
}

// PrintTable writes the summary as an aligned text table; the predicted
// column and its error appear when predictions were made.
func PrintTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "overlay\tphase\top\tserver\tn\tmedian ms\tp95 ms\tpredicted ms\terror\tfrom truth ms\terror\t")
	for _, r := range rows {
		pred, diff := predCells(r.MedianMs, r.PredictedMs)
		tpred, tdiff := predCells(r.MedianMs, r.TruthPredictedMs)
		n := strconv.Itoa(r.N)
		if r.Errors > 0 {
			n += fmt.Sprintf(" (%d failed)", r.Errors)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t\n", r.Overlay, r.Phase, r.Op, r.Server, n, r.MedianMs, r.P95Ms, pred, diff, tpred, tdiff)
	}
	return tw.Flush()
}

// predCells formats a prediction and the measured median's deviation from
// it; "-" when there is none.
func predCells(measured, predicted float64) (string, string) {
	if predicted <= 0 {
		return "-", "-"
	}
	return fmt.Sprintf("%.1f", predicted), fmt.Sprintf("%+.1f%%", 100*(measured-predicted)/predicted)
}

// WriteSummaryCSV writes the summary table as CSV.
func WriteSummaryCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"overlay", "phase", "op", "server", "n", "errors", "median_ms", "p95_ms", "predicted_ms", "predicted_truth_ms"})
	for _, r := range rows {
		_ = cw.Write([]string{r.Overlay, r.Phase, r.Op, r.Server, strconv.Itoa(r.N), strconv.Itoa(r.Errors),
			f3(r.MedianMs), f3(r.P95Ms), f3(r.PredictedMs), f3(r.TruthPredictedMs)})
	}
	cw.Flush()
	return cw.Error()
}

func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// ReadSummaryCSV parses what WriteSummaryCSV wrote.
func ReadSummaryCSV(r io.Reader) ([]Row, error) {
	lines, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(lines) == 0 || lines[0][0] != "overlay" {
		return nil, fmt.Errorf("results: not a summary file")
	}
	var rows []Row
	for i, l := range lines[1:] {
		if len(l) != 10 {
			return nil, fmt.Errorf("results: summary line %d: %d fields, want 10", i+2, len(l))
		}
		var row Row
		row.Key = Key{Overlay: l[0], Phase: l[1], Op: l[2], Server: l[3]}
		var errs [6]error
		row.N, errs[0] = strconv.Atoi(l[4])
		row.Errors, errs[1] = strconv.Atoi(l[5])
		row.MedianMs, errs[2] = strconv.ParseFloat(l[6], 64)
		row.P95Ms, errs[3] = strconv.ParseFloat(l[7], 64)
		row.PredictedMs, errs[4] = strconv.ParseFloat(l[8], 64)
		row.TruthPredictedMs, errs[5] = strconv.ParseFloat(l[9], 64)
		for _, e := range errs {
			if e != nil {
				return nil, fmt.Errorf("results: summary line %d: %w", i+2, e)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}
