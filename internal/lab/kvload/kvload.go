// Package kvload is the lab's memcached load generator: a closed loop
// that keeps a fixed number of requests outstanding against one address
// (a memcached server, a twemproxy, or a detour pool's virtual address)
// for a fixed time, with a chosen get/set mix over a key space, and
// reports latency percentiles and throughput from HDR histograms.
//
// Three protocols are offered: the binary protocol over UDP (AppSwitch's
// case; one request per datagram behind memcached's 8-byte frame header),
// and the ASCII and meta protocols over TCP (requests pipelined on each
// connection, replies read in order).
//
// Run is the whole API; the lab CLI and the benchmarks call it and print
// Result as JSON.
package kvload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Protocol is how requests are sent.
type Protocol string

// The protocols.
const (
	BinaryUDP Protocol = "binary-udp"
	ASCIITCP  Protocol = "ascii-tcp"
	MetaTCP   Protocol = "meta-tcp"
)

// Config describes a run.
type Config struct {
	// Target is the host:port requests go to.
	Target string `json:"target"`
	// Servers, for binary-udp, replaces Target by a pool the generator
	// hashes keys over itself (client-side weighted ketama with equal
	// weights, as libmemcached does): each request goes straight to its
	// key's server.
	Servers []string `json:"servers,omitempty"`
	// Protocol is binary-udp, ascii-tcp or meta-tcp.
	Protocol Protocol `json:"protocol"`
	// Outstanding is the number of requests kept in flight in all
	// (default 16).
	Outstanding int `json:"outstanding"`
	// Connections is the number of TCP connections or UDP sockets the
	// outstanding requests are spread over (default 1).
	Connections int `json:"connections"`
	// GetRatio is the share of gets, the rest being sets: 0.5 for
	// AppSwitch's mix, 0.9 for a read-heavy one.
	GetRatio float64 `json:"get_ratio"`
	// Keys is the size of the key space, drawn uniformly (default 10000).
	Keys int `json:"keys"`
	// KeyPrefix starts every key (default "kvload:").
	KeyPrefix string `json:"key_prefix"`
	// ValueSize is the size of a set's value in bytes (default 32); over
	// UDP a set must fit one datagram, so at most MaxUDPValue, unless
	// the run only gets (GetRatio 1): the prefill then sets the values
	// over TCP, and each get's reply is reassembled from its datagrams.
	ValueSize int `json:"value_size"`
	// Duration is how long requests are sent (default 1 s).
	Duration time.Duration `json:"duration_ns"`
	// Timeout is how long a UDP request waits for its reply before it
	// counts as lost and its slot sends anew; over TCP a connection that
	// stays silent this long fails the run (default 1 s).
	Timeout time.Duration `json:"timeout_ns"`
	// Prefill sets every key once before the measured run, so gets hit.
	Prefill bool `json:"prefill"`
	// Seed makes the key and operation sequence repeatable.
	Seed uint64 `json:"seed"`
}

// MaxUDPValue is the largest value a set over UDP may carry: a 1400-byte
// datagram less the frame header, the binary header, extras and a key.
const MaxUDPValue = 1400 - 8 - 24 - 8 - 250

// Summary is a latency or throughput distribution.
type Summary struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// Result is what a run measured. Latencies are in microseconds,
// throughput in requests per second.
type Result struct {
	Config   Config        `json:"config"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Requests int64         `json:"requests"`
	Gets     int64         `json:"gets"`
	Sets     int64         `json:"sets"`
	Hits     int64         `json:"hits"`
	Misses   int64         `json:"misses"`
	// Errors are replies that report an error (ERROR, CLIENT_ERROR,
	// SERVER_ERROR, a binary error status).
	Errors int64 `json:"errors"`
	// Timeouts are UDP requests without a reply within Timeout.
	Timeouts int64 `json:"timeouts"`
	// Throughput is completed requests per second over the run.
	Throughput float64 `json:"throughput"`
	// Latency covers every completed request, GetLatency and SetLatency
	// each kind.
	Latency    Summary `json:"latency_us"`
	GetLatency Summary `json:"get_latency_us"`
	SetLatency Summary `json:"set_latency_us"`
	// Interval is the throughput measured over each 100 ms of the run.
	Interval Summary `json:"interval_throughput"`
}

// interval is the length of the throughput samples.
const interval = 100 * time.Millisecond

// withDefaults checks c and fills its defaults.
func withDefaults(c Config) (Config, error) {
	if len(c.Servers) > 0 && c.Protocol == BinaryUDP && c.Target == "" {
		c.Target = c.Servers[0]
	}
	if c.Target == "" {
		return c, errors.New("kvload: no target")
	}
	if len(c.Servers) > 0 && c.Protocol != BinaryUDP {
		return c, errors.New("kvload: client-side hashing over servers is offered for binary-udp only")
	}
	if _, _, err := net.SplitHostPort(c.Target); err != nil {
		return c, fmt.Errorf("kvload: target %q: %v", c.Target, err)
	}
	switch c.Protocol {
	case BinaryUDP, ASCIITCP, MetaTCP:
	case "":
		c.Protocol = ASCIITCP
	default:
		return c, fmt.Errorf("kvload: unknown protocol %q (want binary-udp, ascii-tcp or meta-tcp)", c.Protocol)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Outstanding, 16)
	def(&c.Connections, 1)
	def(&c.Keys, 10000)
	def(&c.ValueSize, 32)
	if c.Connections > c.Outstanding {
		c.Connections = c.Outstanding
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = "kvload:"
	}
	if c.Duration <= 0 {
		c.Duration = time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.GetRatio < 0 || c.GetRatio > 1 {
		return c, fmt.Errorf("kvload: get ratio %v outside [0, 1]", c.GetRatio)
	}
	if len(c.KeyPrefix)+20 > 250 {
		return c, errors.New("kvload: key prefix too long for memcached's 250-byte keys")
	}
	if c.Protocol == BinaryUDP && c.ValueSize > MaxUDPValue && c.GetRatio < 1 {
		return c, fmt.Errorf("kvload: value size %d does not fit one datagram (at most %d); larger values only with get ratio 1 (prefilled over TCP)", c.ValueSize, MaxUDPValue)
	}
	if c.Protocol == BinaryUDP && c.Outstanding/c.Connections > 1<<15 {
		return c, errors.New("kvload: too many outstanding requests per UDP socket")
	}
	return c, nil
}

// stats is one worker's measurements, merged at the end.
type stats struct {
	all, get, set                                *hdrhistogram.Histogram
	requests, gets, sets, hits, misses, errs, to int64
	intervals                                    []int64
}

// Latencies are recorded in nanoseconds, 1 ns to 100 s, 3 digits.
func newStats(d time.Duration) *stats {
	h := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(100*time.Second), 3) }
	return &stats{all: h(), get: h(), set: h(), intervals: make([]int64, int(d/interval)+2)}
}

// record notes one completed request.
func (s *stats) record(start, now time.Time, begin time.Time, isGet bool) {
	ns := now.Sub(start).Nanoseconds()
	if ns < 1 {
		ns = 1
	}
	_ = s.all.RecordValue(ns)
	s.requests++
	if isGet {
		s.gets++
		_ = s.get.RecordValue(ns)
	} else {
		s.sets++
		_ = s.set.RecordValue(ns)
	}
	if i := int(now.Sub(begin) / interval); i >= 0 && i < len(s.intervals) {
		s.intervals[i]++
	}
}

// merge adds o into s.
func (s *stats) merge(o *stats) {
	s.all.Merge(o.all)
	s.get.Merge(o.get)
	s.set.Merge(o.set)
	s.requests += o.requests
	s.gets += o.gets
	s.sets += o.sets
	s.hits += o.hits
	s.misses += o.misses
	s.errs += o.errs
	s.to += o.to
	for i := range s.intervals {
		s.intervals[i] += o.intervals[i]
	}
}

// summary turns a histogram of nanoseconds into microseconds.
func summary(h *hdrhistogram.Histogram) Summary {
	us := func(v int64) float64 { return float64(v) / 1e3 }
	return Summary{
		Count: h.TotalCount(), Mean: h.Mean() / 1e3,
		P50: us(h.ValueAtQuantile(50)), P90: us(h.ValueAtQuantile(90)),
		P99: us(h.ValueAtQuantile(99)), P999: us(h.ValueAtQuantile(99.9)), Max: us(h.Max()),
	}
}

// workload draws keys and operations and builds keys without allocating.
type workload struct {
	cfg   Config
	rng   *rand.Rand
	key   []byte
	value []byte
	// fill, when set, hands out keys 0, 1, … for the prefill.
	fill *fillCounter
}

// fillCounter is the shared next key of a prefill.
type fillCounter struct {
	mu   sync.Mutex
	next int
	end  int
}

// take returns the next key index to fill, or false when all are done.
func (f *fillCounter) take() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next >= f.end {
		return 0, false
	}
	f.next++
	return f.next - 1, true
}

func newWorkload(cfg Config, seed uint64, fill *fillCounter) *workload {
	v := make([]byte, cfg.ValueSize)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return &workload{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, seed)), value: v, fill: fill}
}

// next returns the next operation's key and whether it is a get; ok is
// false when a prefill has handed out every key.
func (w *workload) next() (key []byte, isGet, ok bool) {
	var i int
	if w.fill != nil {
		if i, ok = w.fill.take(); !ok {
			return nil, false, false
		}
	} else {
		i = w.rng.IntN(w.cfg.Keys)
		isGet = w.rng.Float64() < w.cfg.GetRatio
	}
	w.key = append(w.key[:0], w.cfg.KeyPrefix...)
	w.key = strconv.AppendInt(w.key, int64(i), 10)
	return w.key, isGet, true
}

// Run runs the load described by cfg and returns its measurements. It
// stops early, with an error, when ctx ends or a connection fails.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Prefill {
		fc := &fillCounter{end: cfg.Keys}
		pc := cfg
		if pc.Protocol == BinaryUDP && pc.ValueSize > MaxUDPValue {
			// memcached drops a request of several datagrams: large
			// values are set over TCP (ASCII) on the same address.
			pc.Protocol, pc.Servers = ASCIITCP, nil
		}
		if _, err := runPhase(ctx, pc, fc, 10*time.Minute); err != nil {
			return nil, fmt.Errorf("kvload: prefill: %w", err)
		}
	}
	begin := time.Now()
	total, err := runPhase(ctx, cfg, nil, cfg.Duration)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(begin)
	res := &Result{
		Config: cfg, Elapsed: elapsed, Requests: total.requests, Gets: total.gets, Sets: total.sets,
		Hits: total.hits, Misses: total.misses, Errors: total.errs, Timeouts: total.to,
		Throughput: float64(total.requests) / elapsed.Seconds(),
		Latency:    summary(total.all), GetLatency: summary(total.get), SetLatency: summary(total.set),
	}
	th := hdrhistogram.New(1, 1<<40, 3)
	full := int(cfg.Duration / interval)
	for i := 0; i < full && i < len(total.intervals); i++ {
		_ = th.RecordValue(max(1, total.intervals[i]*int64(time.Second/interval)))
	}
	res.Interval = Summary{
		Count: th.TotalCount(), Mean: th.Mean(), P50: float64(th.ValueAtQuantile(50)),
		P90: float64(th.ValueAtQuantile(90)), P99: float64(th.ValueAtQuantile(99)),
		P999: float64(th.ValueAtQuantile(99.9)), Max: float64(th.Max()),
	}
	return res, nil
}

// runPhase runs the workers for d (or until a prefill ends) and merges
// their measurements.
func runPhase(ctx context.Context, cfg Config, fill *fillCounter, d time.Duration) (*stats, error) {
	begin := time.Now()
	deadline := begin.Add(d)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(cfg.Timeout+time.Second))
	defer cancel()
	var wg sync.WaitGroup
	results := make([]*stats, cfg.Connections)
	errs := make([]error, cfg.Connections)
	for c := 0; c < cfg.Connections; c++ {
		depth := cfg.Outstanding / cfg.Connections
		if c < cfg.Outstanding%cfg.Connections {
			depth++
		}
		wg.Add(1)
		go func(c, depth int) {
			defer wg.Done()
			s := newStats(d)
			results[c] = s
			wl := newWorkload(cfg, uint64(c)+1, fill)
			if cfg.Protocol == BinaryUDP {
				errs[c] = runUDP(ctx, cfg, wl, s, depth, begin, deadline)
			} else {
				errs[c] = runTCP(ctx, cfg, wl, s, depth, begin, deadline)
			}
		}(c, depth)
	}
	wg.Wait()
	total := newStats(d)
	for c := range results {
		if errs[c] != nil {
			return nil, errs[c]
		}
		total.merge(results[c])
	}
	return total, nil
}
