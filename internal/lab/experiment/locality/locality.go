// Package locality runs the data-locality experiment of issue 18 (the
// paper "nearby memory can be faster than local disk", Figures 1 and 3)
// on detour's testbed: the locality scenario's client at ZRH reads
// objects of 1 KB to 1 MB from three replicas, a capped local disk
// (memcached with extstore, package tiers), a nearby site's memory and a
// remote site's memory, and compares replica-choice policies side by
// side.
//
// Every policy is a row: a TCP connection the client sends reads on.
// Rows are of three modes: "tier" reads always from one replica (the
// fetch time of each tier, and the local-memory baseline); "client"
// applies a static policy at the client (local-first, static-zone,
// nearest-rtt: the client itself sends each read straight to the
// replica the policy names, through the overlay); "detour" sends reads
// to a replicated pool's virtual address, where the gateway chooses the
// replica (one pool per policy, so "predicted" is a row like the
// others). The client takes one read per row in turn, in an order that
// rotates every round, so all rows see the same conditions. Each
// replica's values begin with a tag naming it, so every read records
// which replica served it.
package locality

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/nsnet"
	"github.com/detour-overlay/detour/internal/lab/kvload"
	"github.com/detour-overlay/detour/internal/lab/testbed"
)

// Replica classes: where the replica that served a read is.
const (
	Local  = "local"
	Nearby = "nearby"
	Remote = "remote"
)

// Row modes.
const (
	ModeTier   = "tier"
	ModeClient = "client"
	ModeDetour = "detour"
)

// Config describes a run.
type Config struct {
	// Bin is the detour-lab binary (for `testbed` commands); Detour the
	// detour binary the agents run.
	Bin, Detour string
	// Scenario is the testbed scenario (default "locality"); Overlay the
	// overlay (default detour).
	Scenario, Overlay string
	// StateDir and Prefix give the testbed its own state and namespaces.
	StateDir, Prefix string
	// Client is the client's site (default ZRH; the client is its host
	// 1), Nearby and Remote the other replicas' sites (MXP, IAD).
	Client, Nearby, Remote string
	// Sizes are the value sizes; Keys the keys per size.
	Sizes []int
	Keys  map[int]int
	// Rounds is the number of reads per row and size.
	Rounds int
	// Pause is the client's think time between two reads (default 20 ms;
	// negative for none). Under the disk's cap, a read issued at once
	// after another read of the same disk completes is let through in
	// the same throttle cycle (docs/locality.md); the pause keeps the
	// reads independent.
	Pause time.Duration
	// ViaDetour adds a row for each replicated pool's virtual address
	// (TCP): detour's own choice. It needs the gateways' replicated pools.
	ViaDetour bool
	// Dynamics runs the dynamics phase (after the static one): see
	// dynamics.go.
	Dynamics     bool
	DynamicsSize int
	DynamicsStep time.Duration
	// Seed makes the key sequence repeatable.
	Seed uint64
	// Log receives progress.
	Log io.Writer
}

// Defaults of a run.
var (
	DefaultSizes = []int{1000, 10000, 100000, 1000000}
	DefaultKeys  = map[int]int{1000: 2000, 10000: 1000, 100000: 200, 1000000: 40}
)

func (c *Config) defaults() {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&c.Scenario, "locality")
	def(&c.Overlay, "detour")
	def(&c.Client, "ZRH")
	def(&c.Nearby, "MXP")
	def(&c.Remote, "IAD")
	if len(c.Sizes) == 0 {
		c.Sizes = DefaultSizes
	}
	if c.Keys == nil {
		c.Keys = DefaultKeys
	}
	if c.Rounds <= 0 {
		c.Rounds = 100
	}
	if c.Pause == 0 {
		c.Pause = 20 * time.Millisecond
	}
	if c.DynamicsSize == 0 {
		c.DynamicsSize = 10000
	}
	if c.DynamicsStep == 0 {
		c.DynamicsStep = 15 * time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Row is one way of choosing the replica of a read.
type Row struct {
	// Policy names the row: a policy (local-first, static-zone,
	// nearest-rtt, predicted) or a tier (local-disk, nearby-memory,
	// remote-memory, local-memory).
	Policy string `json:"policy"`
	Mode   string `json:"mode"`
	// Target is the address reads go to (a replica or a virtual
	// address).
	Target string `json:"target"`
	conn   *kvload.Conn
}

// Key names the row in tables: policy, with the mode when it is not the
// policy's only one.
func (r Row) Key() string { return r.Policy + "/" + r.Mode }

// Sample is one timed read.
type Sample struct {
	Policy, Mode string
	Size         int
	Round        int
	// Phase is "static" or a dynamics step.
	Phase   string
	Start   time.Time
	Latency time.Duration
	// Site and Tier name the replica that served the read (from the
	// value's tag); Class is Local, Nearby or Remote.
	Site, Tier, Class string
	Err               string
}

// Result is what a run measured.
type Result struct {
	Config   Config
	Rows     []Row
	Samples  []Sample
	Disk     DiskReport
	Events   []Event
	Versions string
}

// Event is a change made during the dynamics phase.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Run brings the testbed up, fills the replicas, measures every row at
// every size, optionally runs the dynamics phase, and tears the testbed
// down. A partial result comes back with an error when a later step
// fails.
func Run(ctx context.Context, c Config) (*Result, error) {
	c.defaults()
	res := &Result{Config: c}
	tb := &tb{c: c}
	fmt.Fprintf(c.Log, "locality: testbed %s over %s\n", c.Scenario, c.Overlay)
	if err := tb.run(ctx, 3*time.Minute, "testbed", "up", c.Scenario, "--overlay", c.Overlay); err != nil {
		tb.down()
		return nil, err
	}
	defer tb.down()
	st, err := testbed.LoadState(c.StateDir)
	if err != nil {
		return nil, err
	}
	e, err := newEnv(ctx, c, st)
	if err != nil {
		return nil, err
	}
	defer e.close()
	fmt.Fprintf(c.Log, "locality: filling %d servers\n", len(e.servers))
	if err := e.fill(ctx); err != nil {
		return nil, err
	}
	if err := e.settle(ctx); err != nil {
		return nil, err
	}
	rows, err := e.rows(ctx)
	if err != nil {
		return nil, err
	}
	res.Rows = rows
	before, err := e.diskCounters()
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 18))
	for _, size := range c.Sizes {
		fmt.Fprintf(c.Log, "locality: %d-byte reads, %d rounds over %d rows\n", size, c.Rounds, len(rows))
		s, err := e.measure(ctx, rows, size, "static", c.Rounds, rng)
		res.Samples = append(res.Samples, s...)
		if err != nil {
			return res, err
		}
	}
	after, err := e.diskCounters()
	if err != nil {
		return res, err
	}
	res.Disk = diskReport(e.disk, e.diskCaps(), before, after, res.Samples)
	if c.Dynamics {
		s, ev, err := e.dynamics(ctx, tb, rows, rng)
		res.Samples = append(res.Samples, s...)
		res.Events = ev
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// tb drives `detour-lab testbed` commands for this run's testbed.
type tb struct{ c Config }

func (t *tb) run(ctx context.Context, timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.c.Bin, args...)
	cmd.Env = append(os.Environ(), "DETOUR_TESTBED_STATE="+t.c.StateDir, "DETOUR_TESTBED_PREFIX="+t.c.Prefix)
	if t.c.Detour != "" {
		cmd.Env = append(cmd.Env, testbed.DetourEnv+"="+t.c.Detour)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("detour-lab %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// down tears the testbed down with a fresh context, so that it also runs
// after an interruption.
func (t *tb) down() {
	if err := t.run(context.Background(), 2*time.Minute, "testbed", "down"); err != nil {
		fmt.Fprintf(t.c.Log, "locality: %v\n", err)
	}
}

// server is one memcached the client fills and reads.
type server struct {
	Site, Tier, Address, NS string
	// Baseline marks the local-memory server outside the replicated
	// pools.
	Baseline bool
	conn     *kvload.Conn
}

// tag is the start of every value a server holds.
func (s *server) tag() string { return fmt.Sprintf("replica=%s/%s;", s.Site, s.Tier) }

// env is a running testbed seen from the client.
type env struct {
	c        Config
	st       *testbed.State
	clientNS string
	servers  []*server
	// replicas are the replicated pools' replicas (the same in every
	// pool); vips the pools' virtual addresses by policy.
	replicas []*server
	vips     map[string]string
	near     []string
	disk     *server
}

func newEnv(ctx context.Context, c Config, st *testbed.State) (*env, error) {
	e := &env{c: c, st: st, vips: map[string]string{}}
	for _, s := range st.Sites {
		if s.Name == c.Client && len(s.Hosts) > 0 {
			e.clientNS = s.Hosts[0].NS
		}
	}
	if e.clientNS == "" {
		return nil, fmt.Errorf("locality: no site %s with a host in the testbed", c.Client)
	}
	seen := map[string]*server{}
	add := func(sv testbed.KVServerState, baseline bool) *server {
		if s, ok := seen[sv.Address]; ok {
			return s
		}
		s := &server{Site: sv.Site, Tier: sv.Tier, Address: sv.Address, NS: sv.NS, Baseline: baseline}
		seen[sv.Address] = s
		e.servers = append(e.servers, s)
		if sv.Tier == "disk" && e.disk == nil {
			e.disk = s
		}
		return s
	}
	for _, p := range st.KVPools {
		if len(p.Shards) == 0 {
			for _, sv := range p.Servers {
				if sv.Site == c.Client {
					add(sv, true)
				}
			}
			continue
		}
		if len(p.Shards) != 1 {
			return nil, fmt.Errorf("locality: pool %s has %d shards; the experiment reads one", p.Name, len(p.Shards))
		}
		var reps []*server
		for _, sv := range p.Shards[0].Replicas {
			reps = append(reps, add(sv, false))
		}
		if e.replicas == nil {
			e.replicas = reps
		}
		e.vips[p.Policy] = fmt.Sprintf("%s:%d", p.Address, p.Port)
		if p.Policy == "static-zone" {
			e.near = p.NearSites
		}
	}
	if len(e.replicas) == 0 {
		return nil, errors.New("locality: the scenario has no replicated pool")
	}
	if e.disk == nil {
		return nil, errors.New("locality: no replica has tier disk")
	}
	for _, s := range e.servers {
		conn, err := e.dial(ctx, s.Address)
		if err != nil {
			e.close()
			return nil, err
		}
		s.conn = conn
	}
	return e, nil
}

// dial opens a TCP connection from the client's namespace.
func (e *env) dial(ctx context.Context, addr string) (*kvload.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := nsnet.DialContext(ctx, e.clientNS, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("locality: dial %s from %s: %w", addr, e.clientNS, err)
	}
	return kvload.NewConn(c), nil
}

func (e *env) close() {
	for _, s := range e.servers {
		if s.conn != nil {
			s.conn.Close()
		}
	}
}

// class returns where a site is from the client.
func (e *env) class(site string) string {
	switch site {
	case e.c.Client:
		return Local
	case e.c.Nearby:
		return Nearby
	}
	return Remote
}

// key names object i of a size.
func key(size, i int) string { return fmt.Sprintf("obj:%d:%d", size, i) }

// value is object i of a size as server s holds it: its tag, then
// filler.
func value(s *server, size int) []byte {
	v := make([]byte, size)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	copy(v, s.tag())
	return v
}

// diskCaps returns the disk tier's caps as built.
func (e *env) diskCaps() diskConfig {
	if d := e.st.DiskOf(e.disk.Address); d != nil {
		return diskConfig{mbps: d.Config.ReadMBps, iops: d.Config.ReadIOPS}
	}
	return diskConfig{}
}
