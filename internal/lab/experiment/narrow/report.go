package narrow

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// NarrowMbps is the narrow direct link's rate in the narrow-relay
// scenario, the yardstick of the bulk throughput.
const NarrowMbps = 20

// percentileMs is Percentile for round trips in milliseconds.
func percentileMs(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	k := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// Summary is one overlay's row of the table.
type Summary struct {
	Overlay                  string
	ThroughputMbps, Times    float64 // Times: throughput over the narrow link's rate
	IdleP50, LoadP50, Change float64 // ms, ms, relative change of the p50 (0.05 = +5 %)
	IdleP95, LoadP95         float64
	// AfterP50 is the stream's p50 during the transfer after detour's
	// class change (0 when there was none).
	AfterP50    float64
	Retransmits int
	// Reordered is the frames of a flow East's gateway received out of
	// order during the transfer, -1 when not measured (not detour).
	Reordered int64
	// ProbeBytes is what the agents' probe_bytes counters (the
	// throughput measurement's budget: packet trains) add up to over the
	// whole run, and ProbeDuring during the transfer; -1 when the agents
	// have no such counter (or are not detour's).
	ProbeBytes, ProbeDuring int64
	// PingDuring is the bytes of latency probes and their replies every
	// agent sent during the transfer, -1 when not measured.
	PingDuring int64
}

// Summarize computes an overlay's row.
func (r *OverlayResult) Summarize() Summary {
	s := Summary{Overlay: r.Overlay, ThroughputMbps: r.ThroughputMbps, Times: r.ThroughputMbps / NarrowMbps,
		IdleP50: percentileMs(r.Idle, 50), LoadP50: percentileMs(r.Load, 50),
		IdleP95: percentileMs(r.Idle, 95), LoadP95: percentileMs(r.Load, 95),
		Retransmits: r.Retransmits, Reordered: -1, ProbeBytes: -1, ProbeDuring: -1, PingDuring: -1}
	if s.IdleP50 > 0 {
		s.Change = s.LoadP50/s.IdleP50 - 1
	}
	if r.ChangeAtS >= 0 {
		var after []float64
		for i, at := range r.LoadAtS {
			if at >= r.ChangeAtS && i < len(r.Load) {
				after = append(after, r.Load[i])
			}
		}
		s.AfterP50 = percentileMs(after, 50)
	}
	if r.Counters != nil {
		s.Reordered = int64(r.Counters[East]["flow_reordered"])
		s.PingDuring = 0
		for _, cs := range r.Counters {
			for k, v := range cs {
				if strings.HasPrefix(k, "control_out_bytes_probe") {
					s.PingDuring += int64(v)
				}
			}
		}
	}
	for site, cs := range r.Totals {
		if v, ok := cs["probe_bytes"]; ok {
			s.ProbeBytes = max(s.ProbeBytes, 0) + int64(v)
			s.ProbeDuring = max(s.ProbeDuring, 0) + int64(r.Counters[site]["probe_bytes"])
		}
	}
	return s
}

// WriteTable prints the summary as a Markdown table.
func (res *Result) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| overlay | bulk Mbit/s | × %d Mbit/s | stream p50 idle ms | p50 during ms | change | p95 idle / during ms | p50 after class change ms | TCP retransmits | reordered at East | probe bytes run / during | latency probe bytes during |\n", NarrowMbps)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for i := range res.Overlays {
		s := res.Overlays[i].Summarize()
		after, reord, probe, ping := "–", "–", "–", "–"
		if s.AfterP50 > 0 {
			after = fmt.Sprintf("%.2f", s.AfterP50)
		}
		if s.Reordered >= 0 {
			reord = fmt.Sprint(s.Reordered)
		}
		if s.ProbeBytes >= 0 {
			probe = fmt.Sprintf("%d / %d", s.ProbeBytes, s.ProbeDuring)
		}
		if s.PingDuring >= 0 {
			ping = fmt.Sprint(s.PingDuring)
		}
		fmt.Fprintf(w, "| %s | %.1f | %.1f | %.2f | %.2f | %+.0f %% | %.2f / %.2f | %s | %d | %s | %s | %s |\n",
			s.Overlay, s.ThroughputMbps, s.Times, s.IdleP50, s.LoadP50, 100*s.Change, s.IdleP95, s.LoadP95, after, s.Retransmits, reord, probe, ping)
	}
	for i := range res.Overlays {
		r := &res.Overlays[i]
		if r.Counters == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s, counters during the transfer (class change at %.1f s):\n", r.Overlay, r.ChangeAtS)
		for _, site := range []string{West, Relay, East} {
			fmt.Fprintf(w, "  %s: %s\n", site, pick(r.Counters[site], func(k string) bool { return classCounter(k) || probeCounter(k) }))
		}
		fmt.Fprintf(w, "%s, West's route to East during the transfer:\n", r.Overlay)
		for _, c := range r.Timeline {
			fmt.Fprintf(w, "  %5.2f s  path %v  bulk %v  class changes %d, moves %d, repaths %d\n", c.AtS, c.Path, c.Bulk, c.ClassChanges, c.Moves, c.Repaths)
		}
		fmt.Fprintf(w, "%s, measurement counters over the whole run:\n", r.Overlay)
		for _, site := range []string{West, Relay, East} {
			fmt.Fprintf(w, "  %s: %s\n", site, pick(r.Totals[site], probeCounter))
		}
	}
}

// pick formats the counters of m that keep accepts, sorted by name.
func pick(m map[string]uint64, keep func(string) bool) string {
	var keys []string
	for k := range m {
		if keep(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, " ")
}

// Write stores the result as result.json and the table as summary.md in
// dir.
func (res *Result) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "summary.md"))
	if err != nil {
		return err
	}
	res.WriteTable(f)
	return f.Close()
}
