package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Defaults of the bulk section (docs/bulk.md explains the choices).
const (
	// DefaultBulkThreshold is how many bytes a flow sends before it is
	// bulk: 10 MB is far more than a request or a reply, far less than a
	// backup copy or a replica's catch-up, and, with the count halving
	// every 10 s, takes a sustained 4 Mbit/s or more. On a path narrower
	// than about 50 Mbit/s it is sent slowly enough to fill that path's
	// queue first: a lower threshold or DSCP marks serve better there
	// (docs/bulk.md).
	DefaultBulkThreshold = Size(10_000_000)
	// DefaultBulkBound and DefaultBulkBoundFraction: a bulk path may be
	// max(10 ms, 25 % of the fastest path's round trip) slower than the
	// fastest path.
	DefaultBulkBound         = 10 * time.Millisecond
	DefaultBulkBoundFraction = 0.25
	// DefaultBulkMinGain: a bulk path must offer 1.5 times the available
	// throughput of the fastest path.
	DefaultBulkMinGain = 1.5
	// DefaultBulkIdle is how long a flow may be silent before it ends.
	DefaultBulkIdle = 15 * time.Second
)

// Bulk configures flow classes: a TCP or UDP flow that has sent more
// than Threshold bytes, or whose packets carry a DSCP value of DSCP, is
// bulk and takes the path with the most available throughput among the
// paths at most LatencyBound (or LatencyBoundFraction of the fastest
// path's round trip, if larger) slower than the fastest; other traffic
// takes the fastest path. A zero field takes its default.
//
//	bulk:
//	  enabled: true
//	  threshold: 10MB
//	  dscp: [8]               # CS1, "lower effort"
//	  latency_bound: 10ms
//	  latency_bound_fraction: 0.25
//	  min_gain: 1.5
//	  idle_timeout: 15s
type Bulk struct {
	// Enabled turns flow classes on (the default) or off (nil: on).
	Enabled *bool `yaml:"enabled,omitempty"`
	// Threshold is the bytes a flow sends before it is bulk. The data
	// path's count of a flow's bytes halves every 10 s, so a flow must
	// send them at more than about Threshold / 20 s on average: a
	// long-lived connection of small requests never becomes bulk.
	Threshold Size `yaml:"threshold,omitempty"`
	// DSCP lists the DSCP values (0..63) that make a flow bulk at once.
	DSCP []int `yaml:"dscp,omitempty"`
	// LatencyBound and LatencyBoundFraction bound how much slower than
	// the fastest path a bulk path may be.
	LatencyBound         time.Duration `yaml:"latency_bound,omitempty"`
	LatencyBoundFraction float64       `yaml:"latency_bound_fraction,omitempty"`
	// MinGain is the factor by which a bulk path's available throughput
	// must exceed the fastest path's.
	MinGain float64 `yaml:"min_gain,omitempty"`
	// IdleTimeout is how long a flow may be silent before it ends (and
	// loses its class and path).
	IdleTimeout time.Duration `yaml:"idle_timeout,omitempty"`
}

// On reports whether flow classes are enabled.
func (b *Bulk) On() bool { return b.Enabled == nil || *b.Enabled }

// applyDefaults fills the fields left out.
func (b *Bulk) applyDefaults() {
	if b.Threshold == 0 {
		b.Threshold = DefaultBulkThreshold
	}
	if b.LatencyBound == 0 {
		b.LatencyBound = DefaultBulkBound
	}
	if b.LatencyBoundFraction == 0 {
		b.LatencyBoundFraction = DefaultBulkBoundFraction
	}
	if b.MinGain == 0 {
		b.MinGain = DefaultBulkMinGain
	}
	if b.IdleTimeout == 0 {
		b.IdleTimeout = DefaultBulkIdle
	}
}

// SameRouting reports whether b and o give the same bulk path choice
// (the fields the routing uses, as opposed to those only the data path
// uses: threshold, dscp and idle_timeout).
func (b *Bulk) SameRouting(o *Bulk) bool {
	return b.On() == o.On() && b.LatencyBound == o.LatencyBound && b.LatencyBoundFraction == o.LatencyBoundFraction && b.MinGain == o.MinGain
}

// validateBulk checks the bulk section.
func validateBulk(b *Bulk, pr *Problems) {
	if b.Threshold < 0 {
		pr.add("bulk.threshold", "%v is negative", b.Threshold)
	}
	seen := map[int]bool{}
	for i, d := range b.DSCP {
		field := fmt.Sprintf("bulk.dscp[%d]", i)
		switch {
		case d < 0 || d > 63:
			pr.add(field, "%d is not a DSCP value (0..63; CS1, lower effort, is 8)", d)
		case seen[d]:
			pr.add(field, "%d is listed twice", d)
		}
		seen[d] = true
	}
	if b.LatencyBound < 0 || b.LatencyBound > time.Second {
		pr.add("bulk.latency_bound", "%v is outside 0..1s", b.LatencyBound)
	}
	if b.LatencyBoundFraction < 0 || b.LatencyBoundFraction > 10 {
		pr.add("bulk.latency_bound_fraction", "%v is outside 0..10 (a fraction of the fastest path's round trip)", b.LatencyBoundFraction)
	}
	if b.MinGain < 1 || b.MinGain > 1000 {
		pr.add("bulk.min_gain", "%v is outside 1..1000 (how many times the fastest path's available throughput a bulk path must offer)", b.MinGain)
	}
	if b.IdleTimeout < time.Second || b.IdleTimeout > time.Hour {
		pr.add("bulk.idle_timeout", "%v is outside 1s..1h", b.IdleTimeout)
	}
}

// Size is an amount of bytes, written in YAML as "10MB", "512kB",
// "1GiB" or a plain number of bytes. k, M and G are powers of 1000, Ki,
// Mi and Gi of 1024; sizes in bits ("80mbit") and a lower-case b ("10mb",
// megabits or megabytes?) are refused rather than guessed.
type Size int64

// sizeRE splits a size into its number and its unit.
var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([kKmMgG]i?)?(B|bytes?)?$`)

// sizeHelp is the reminder every size error ends with.
const sizeHelp = "give bytes with a unit: 10MB, 512kB, 1GiB, or a plain number of bytes"

// ParseSize parses a size such as "10MB".
func ParseSize(s string) (Size, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size: %s", s, sizeHelp)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %s", s, sizeHelp)
	}
	mult := map[string]float64{"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30}[strings.ToLower(m[2])]
	if v*mult > 1<<62 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return Size(v * mult), nil
}

// UnmarshalYAML reads a size; a bad one is reported with its line.
func (z *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		if err == nil {
			err = fmt.Errorf("not a single value: %s", sizeHelp)
		}
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*z = v
	return nil
}

// MarshalYAML writes the size as a plain number of bytes.
func (z Size) MarshalYAML() (any, error) { return int64(z), nil }

// String formats the size in the largest decimal unit that divides it.
func (z Size) String() string {
	switch {
	case z != 0 && z%1_000_000_000 == 0:
		return strconv.FormatInt(int64(z/1_000_000_000), 10) + "GB"
	case z != 0 && z%1_000_000 == 0:
		return strconv.FormatInt(int64(z/1_000_000), 10) + "MB"
	case z != 0 && z%1000 == 0:
		return strconv.FormatInt(int64(z/1000), 10) + "kB"
	}
	return strconv.FormatInt(int64(z), 10) + "B"
}
