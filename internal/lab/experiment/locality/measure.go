package locality

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/lab/kvload"
)

// Policies in the order tables list them.
var (
	Policies = []string{"local-first", "static-zone", "nearest-rtt", "predicted"}
	Tiers    = []string{"local-memory", "local-disk", "nearby-memory", "remote-memory"}
)

// ReadTimeout bounds a timed read: one that takes longer counts as an
// error and its connection is opened anew.
const ReadTimeout = 3 * time.Second

// rows opens one connection per row: the tiers, the static policies
// applied by the client, and with ViaDetour every pool's virtual
// address.
func (e *env) rows(ctx context.Context) ([]Row, error) {
	var rows []Row
	add := func(policy, mode, target string) error {
		conn, err := e.dial(ctx, target)
		if err != nil {
			return err
		}
		conn.Timeout = ReadTimeout
		rows = append(rows, Row{Policy: policy, Mode: mode, Target: target, conn: conn})
		return nil
	}
	for _, s := range e.servers {
		name := map[string]string{Local: "local", Nearby: "nearby", Remote: "remote"}[e.class(s.Site)] + "-" + s.Tier
		if err := add(name, ModeTier, s.Address); err != nil {
			return rows, err
		}
	}
	local, near := e.replicaAt(e.c.Client), e.replicaIn(e.near)
	nearest, err := e.nearestRTT()
	if err != nil {
		return rows, err
	}
	for _, p := range []struct {
		policy string
		s      *server
	}{{"local-first", local}, {"static-zone", near}, {"nearest-rtt", nearest}} {
		if p.s == nil {
			fmt.Fprintf(e.c.Log, "locality: no replica for %s at the client; row left out\n", p.policy)
			continue
		}
		if err := add(p.policy, ModeClient, p.s.Address); err != nil {
			return rows, err
		}
	}
	if e.c.ViaDetour {
		for _, p := range Policies {
			if vip, ok := e.vips[p]; ok {
				if err := add(p, ModeDetour, vip); err != nil {
					return rows, err
				}
			}
		}
	}
	for _, r := range rows {
		fmt.Fprintf(e.c.Log, "locality: row %-14s %-6s -> %s\n", r.Policy, r.Mode, r.Target)
	}
	return rows, nil
}

// replicaAt returns the first replica at site, or nil.
func (e *env) replicaAt(site string) *server {
	for _, s := range e.replicas {
		if s.Site == site {
			return s
		}
	}
	return nil
}

// replicaIn returns the first replica at one of sites, or nil.
func (e *env) replicaIn(sites []string) *server {
	for _, s := range e.replicas {
		if slices.Contains(sites, s.Site) {
			return s
		}
	}
	return nil
}

// nearestRTT returns the replica with the lowest round trip, the least
// of five `version` requests each (the client's own measurement, as a
// client library ranking replicas by latency would take it).
func (e *env) nearestRTT() (*server, error) {
	var best *server
	var bestRTT time.Duration
	for _, s := range e.replicas {
		rtt := time.Hour
		for i := 0; i < 5; i++ {
			t0 := time.Now()
			if err := s.conn.Version(); err != nil {
				return nil, err
			}
			rtt = min(rtt, time.Since(t0))
		}
		fmt.Fprintf(e.c.Log, "locality: round trip to %s (%s): %.2f ms\n", s.Address, s.Site, ms(rtt))
		if best == nil || rtt < bestRTT {
			best, bestRTT = s, rtt
		}
	}
	return best, nil
}

// measure takes rounds reads of size bytes on every row, one row after
// the other in an order drawn anew every round: which row's read comes
// right after another read of the same disk changes its wait under the
// disk's cap (docs/locality.md), so no row may always follow the same
// one.
func (e *env) measure(ctx context.Context, rows []Row, size int, phase string, rounds int, rng *rand.Rand) ([]Sample, error) {
	var out []Sample
	for r := 0; r < rounds; r++ {
		for _, j := range rng.Perm(len(rows)) {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			row := &rows[j]
			out = append(out, e.read(ctx, row, size, rng.IntN(e.c.Keys[size]), phase, r))
			if e.c.Pause > 0 {
				time.Sleep(e.c.Pause)
			}
		}
	}
	return out, nil
}

// read times one get on a row; a connection that failed is opened anew
// for the next read.
func (e *env) read(ctx context.Context, row *Row, size, i int, phase string, round int) Sample {
	s := Sample{Policy: row.Policy, Mode: row.Mode, Size: size, Round: round, Phase: phase, Start: time.Now()}
	if row.conn == nil {
		c, err := e.dial(ctx, row.Target)
		if err != nil {
			s.Err = err.Error()
			return s
		}
		c.Timeout = ReadTimeout
		row.conn = c
	}
	v, ok, err := row.conn.Get(key(size, i))
	s.Latency = time.Since(s.Start)
	switch {
	case err != nil:
		s.Err = err.Error()
		row.conn.Close()
		row.conn = nil
	case !ok:
		s.Err = "miss"
	case len(v) != size:
		s.Err = fmt.Sprintf("value of %d bytes, want %d", len(v), size)
	}
	if ok {
		s.Site, s.Tier = parseTag(v)
		s.Class = e.class(s.Site)
	}
	return s
}

// parseTag reads the replica tag a value starts with.
func parseTag(v []byte) (site, tier string) {
	rest, ok := bytes.CutPrefix(v, []byte("replica="))
	if !ok {
		return "", ""
	}
	tag, _, ok := bytes.Cut(rest, []byte(";"))
	if !ok {
		return "", ""
	}
	site, tier, _ = strings.Cut(string(tag), "/")
	return site, tier
}

// DiskReport shows that the disk tier's reads reached the device: the
// memcached counters of extstore and the bytes the process read from
// storage (/proc/PID/io read_bytes, the page-cache misses), over the
// static phase, against the reads the client sent there.
type DiskReport struct {
	Server string `json:"server"`
	// Caps as configured.
	ReadMBps int `json:"read_mbps"`
	ReadIOPS int `json:"read_iops"`
	// ClientReads and ClientBytes are the reads the disk replica served
	// to the client, by the samples' tags.
	ClientReads int64 `json:"client_reads"`
	ClientBytes int64 `json:"client_bytes"`
	// Counters are after-minus-before of the named memcached statistics
	// and of read_bytes.
	Counters map[string]int64 `json:"counters"`
}

// diskCounterNames are the statistics the report takes.
var diskCounterNames = []string{"get_hits", "get_extstore", "extstore_objects_read", "extstore_bytes_read",
	"recache_from_extstore", "miss_from_extstore", "get_misses"}

// diskCounters reads the disk server's counters and its process's
// read_bytes.
func (e *env) diskCounters() (map[string]int64, error) {
	st, err := e.disk.conn.Stats()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, n := range diskCounterNames {
		out[n] = kvload.StatInt(st, n)
	}
	out["process_read_bytes"] = e.processReadBytes()
	return out, nil
}

// processReadBytes reads the disk memcached's read_bytes (-1 when
// unknown).
func (e *env) processReadBytes() int64 {
	for _, p := range e.st.Procs {
		if p.Name != "memcached-"+e.disk.NS || !p.Alive() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", p.PID))
		if err != nil {
			return -1
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "read_bytes: "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return -1
}

func diskReport(disk *server, st diskConfig, before, after map[string]int64, samples []Sample) DiskReport {
	r := DiskReport{Server: disk.Address, ReadMBps: st.mbps, ReadIOPS: st.iops, Counters: map[string]int64{}}
	for k, v := range after {
		r.Counters[k] = v - before[k]
	}
	for _, s := range samples {
		if s.Err == "" && s.Site == disk.Site && s.Tier == "disk" {
			r.ClientReads++
			r.ClientBytes += int64(s.Size)
		}
	}
	return r
}

// diskConfig is the disk's caps, for the report.
type diskConfig struct{ mbps, iops int }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
