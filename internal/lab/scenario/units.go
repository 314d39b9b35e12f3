package scenario

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time span written like Go durations ("30ms", "1.5ms",
// "2s"). A bare "0" is accepted; negative values are rejected by Validate,
// not by the parser, so that the error can name the field.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ParseDuration parses a duration such as "30ms"; a bare "0" means zero.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a duration (e.g. 30ms, 1.5ms, 2s)", ErrMalformed, s)
	}
	return Duration(d), nil
}

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses the scalar with ParseDuration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDuration(n.Value)
	if err != nil {
		return lineError(n, err)
	}
	*d = v
	return nil
}

// MarshalYAML writes the duration in Go notation.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalText parses the text with ParseDuration (used by JSON).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	*d = v
	return err
}

// MarshalText writes the duration in Go notation (used by JSON).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Rate is a link capacity in bits per second; zero means unlimited.
type Rate uint64

var rateUnits = []struct {
	suffix string
	mult   float64
}{
	{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
	{"gbps", 1e9}, {"mbps", 1e6}, {"kbps", 1e3}, {"bps", 1},
}

// ParseRate parses a rate such as "20mbit", "1.5gbit", "800kbit" or
// "unlimited" (or "0"). Units are bits per second; "mbps" is accepted as a
// synonym of "mbit".
func ParseRate(s string) (Rate, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "/s")
	if t == "0" || t == "unlimited" {
		return 0, nil
	}
	for _, u := range rateUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			break
		}
		if f < 0 {
			return 0, fmt.Errorf("%w: rate %q is negative", ErrNegative, s)
		}
		return Rate(math.Round(f * u.mult)), nil
	}
	return 0, fmt.Errorf("%w: %q is not a rate (e.g. 20mbit, 1gbit, 800kbit, unlimited)", ErrMalformed, s)
}

func (r Rate) String() string {
	switch {
	case r == 0:
		return "unlimited"
	case r%1e9 == 0:
		return fmt.Sprintf("%dgbit", r/1e9)
	case r%1e6 == 0:
		return fmt.Sprintf("%dmbit", r/1e6)
	case r%1e3 == 0:
		return fmt.Sprintf("%dkbit", r/1e3)
	}
	return fmt.Sprintf("%dbit", uint64(r))
}

// UnmarshalYAML parses the scalar with ParseRate.
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseRate(n.Value)
	if err != nil {
		return lineError(n, err)
	}
	*r = v
	return nil
}

// MarshalYAML writes the rate with the largest exact unit.
func (r Rate) MarshalYAML() (any, error) { return r.String(), nil }

// UnmarshalText parses the text with ParseRate (used by JSON).
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	*r = v
	return err
}

// MarshalText writes the rate with the largest exact unit (used by JSON).
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Percent is a probability written as a percentage ("0.5%" or 0.5).
type Percent float64

// ParsePercent parses "1.5%" or "1.5" as 1.5 percent.
func ParsePercent(s string) (Percent, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%w: %q is not a percentage (e.g. 0.5%%)", ErrMalformed, s)
	}
	return Percent(f), nil
}

// Fraction returns the probability as a number between 0 and 1.
func (p Percent) Fraction() float64 { return float64(p) / 100 }

func (p Percent) String() string { return strconv.FormatFloat(float64(p), 'g', -1, 64) + "%" }

// UnmarshalYAML parses the scalar with ParsePercent.
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParsePercent(n.Value)
	if err != nil {
		return lineError(n, err)
	}
	*p = v
	return nil
}

// MarshalYAML writes the percentage with a % sign.
func (p Percent) MarshalYAML() (any, error) { return p.String(), nil }

// UnmarshalText parses the text with ParsePercent (used by JSON).
func (p *Percent) UnmarshalText(b []byte) error {
	v, err := ParsePercent(string(b))
	*p = v
	return err
}

// MarshalText writes the percentage with a % sign (used by JSON).
func (p Percent) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Queue is the size of a drop-tail queue, either in bytes ("64KB", "1MB",
// "96000") or as the longest queueing delay it allows at the link's rate
// ("50ms"). Exactly one of Bytes and Time is non-zero when it is set.
type Queue struct {
	Bytes int64
	Time  time.Duration
}

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1024}, {"mib", 1 << 20}, {"kb", 1e3}, {"mb", 1e6}, {"k", 1e3}, {"m", 1e6}, {"b", 1},
}

// ParseQueue parses a queue size in bytes or as a duration.
func ParseQueue(s string) (Queue, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if strings.HasSuffix(t, "s") && !strings.HasSuffix(t, "bs") {
		d, err := ParseDuration(t)
		if err != nil {
			return Queue{}, fmt.Errorf("%w: %q is not a queue size (bytes like 64KB, or a delay like 50ms)", ErrMalformed, s)
		}
		if d < 0 {
			return Queue{}, fmt.Errorf("%w: queue %q is negative", ErrNegative, s)
		}
		return Queue{Time: d.D()}, nil
	}
	mult := 1.0
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return Queue{}, fmt.Errorf("%w: %q is not a queue size (bytes like 64KB, or a delay like 50ms)", ErrMalformed, s)
	}
	if f < 0 {
		return Queue{}, fmt.Errorf("%w: queue %q is negative", ErrNegative, s)
	}
	return Queue{Bytes: int64(math.Round(f * mult))}, nil
}

// IsZero reports whether the queue size is unset.
func (q Queue) IsZero() bool { return q.Bytes == 0 && q.Time == 0 }

// Limit returns the queue's capacity in bytes on a link of the given rate.
// An unset queue holds DefaultQueueTime worth of traffic, and never less
// than MinQueueBytes.
func (q Queue) Limit(rate Rate) int64 {
	var b int64
	switch {
	case q.Bytes > 0:
		b = q.Bytes
	case q.Time > 0:
		b = int64(float64(rate) / 8 * q.Time.Seconds())
	default:
		b = int64(float64(rate) / 8 * DefaultQueueTime.Seconds())
	}
	return max(b, MinQueueBytes)
}

func (q Queue) String() string {
	if q.Time > 0 {
		return q.Time.String()
	}
	return strconv.FormatInt(q.Bytes, 10)
}

// UnmarshalYAML parses the scalar with ParseQueue.
func (q *Queue) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseQueue(n.Value)
	if err != nil {
		return lineError(n, err)
	}
	*q = v
	return nil
}

// MarshalYAML writes the queue as bytes or as a delay.
func (q Queue) MarshalYAML() (any, error) { return q.String(), nil }

// UnmarshalText parses the text with ParseQueue (used by JSON).
func (q *Queue) UnmarshalText(b []byte) error {
	v, err := ParseQueue(string(b))
	*q = v
	return err
}

// MarshalText writes the queue as bytes or as a delay (used by JSON).
func (q Queue) MarshalText() ([]byte, error) { return []byte(q.String()), nil }

// lineError attaches the node's line to a parse error; the field path is
// filled in later by Parse, which knows the whole document.
func lineError(n *yaml.Node, err error) error {
	fe := &FieldError{Line: n.Line, col: n.Column, Msg: err.Error()}
	if !errors.Is(err, ErrNegative) {
		fe.Err = ErrMalformed
	} else {
		fe.Err = ErrNegative
	}
	fe.Msg = strings.TrimPrefix(strings.TrimPrefix(fe.Msg, ErrMalformed.Error()+": "), ErrNegative.Error()+": ")
	return fe
}
