package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Rate is a bit rate in bits per second, written in YAML as "20mbit",
// "1.5gbit", "800kbit" or a plain number of bits per second. "bps" means
// bits per second too ("10mbps" is 10 megabits); rates in bytes ("MB/s",
// "MBps") are refused rather than guessed.
type Rate float64

// rateHelp is the reminder every rate error ends with.
const rateHelp = "give bits per second with a unit: 20mbit, 1.5gbit, 800kbit (mbps also means megabits)"

// ParseRate parses a rate such as "20mbit" or "1gbit/s".
func ParseRate(s string) (Rate, error) {
	if bytesUnit.MatchString(strings.TrimSpace(s)) {
		return 0, fmt.Errorf("%q is a rate in bytes: %s", s, rateHelp)
	}
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "/s")
	if strings.HasSuffix(t, "bps") {
		t = strings.TrimSuffix(t, "ps") + "it" // "mbps" is megabits per second
	}
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a rate: %s", s, rateHelp)
	}
	return Rate(v * mult), nil
}

// bytesUnit matches a unit in bytes: a capital B ("MB", "MBps", "KB/s")
// or the word byte.
var bytesUnit = regexp.MustCompile(`(?i:[kmgt]?i?)B(ps|/s)?$|(?i)bytes?(/s)?$`)

// UnmarshalYAML reads a rate; a bad one is reported with its line and the
// rest of the file is still read, so every mistake shows at once.
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseRate(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		if err == nil {
			err = fmt.Errorf("not a single value: %s", rateHelp)
		}
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*r = v
	return nil
}

// UnmarshalText implements encoding.TextUnmarshaler for YAML and JSON.
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// String formats the rate with the largest unit that keeps it readable.
func (r Rate) String() string {
	switch v := float64(r); {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', -1, 64) + "gbit"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "mbit"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "kbit"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64) + "bit"
	}
}
