package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBulkDefaults(t *testing.T) {
	a, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	b := a.Bulk
	if !b.On() || b.Threshold != DefaultBulkThreshold || b.LatencyBound != DefaultBulkBound || b.LatencyBoundFraction != DefaultBulkBoundFraction ||
		b.MinGain != DefaultBulkMinGain || b.IdleTimeout != DefaultBulkIdle || len(b.DSCP) != 0 {
		t.Errorf("bulk defaults not applied: %+v", b)
	}
}

func TestBulkSection(t *testing.T) {
	a, err := Parse([]byte(good + "bulk:\n  enabled: false\n  threshold: 2MiB\n  dscp: [8, 10]\n  latency_bound: 5ms\n  latency_bound_fraction: 0.5\n  min_gain: 3\n  idle_timeout: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := a.Bulk
	if b.On() || b.Threshold != 2<<20 || len(b.DSCP) != 2 || b.DSCP[1] != 10 || b.LatencyBound != 5*time.Millisecond ||
		b.LatencyBoundFraction != 0.5 || b.MinGain != 3 || b.IdleTimeout != 30*time.Second {
		t.Errorf("bulk section read as %+v", b)
	}
	out, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out)
	if err != nil {
		t.Fatalf("marshalled bulk section does not parse: %v\n%s", err, out)
	}
	if again.Bulk.On() || again.Bulk.Threshold != b.Threshold || again.Bulk.MinGain != 3 {
		t.Errorf("bulk section changed in a round trip: %+v", again.Bulk)
	}
}

func TestBulkErrorsNameTheField(t *testing.T) {
	cases := map[string]string{
		"  dscp: [8, 64]\n":              "bulk.dscp[1]",
		"  dscp: [8, 8]\n":               "bulk.dscp[1]",
		"  latency_bound: 2s\n":          "bulk.latency_bound",
		"  latency_bound_fraction: 11\n": "bulk.latency_bound_fraction",
		"  min_gain: 0.5\n":              "bulk.min_gain",
		"  idle_timeout: 10ms\n":         "bulk.idle_timeout",
		"  threshold: 80mbit\n":          "not a size",
		"  threshold: 10mb\n":            "not a size",
		"  threshold: -5\n":              "not a size",
		"  treshold: 5MB\n":              "treshold",
	}
	for body, want := range cases {
		_, err := Parse([]byte(good + "bulk:\n" + body))
		if err == nil {
			t.Errorf("%q accepted", body)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "line") {
			t.Errorf("%q: error %q does not name %s with its line", body, err, want)
		}
		if !strings.Contains(want, " ") && want != "treshold" && !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: not ErrInvalid", body)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]Size{"10MB": 10_000_000, "512kB": 512_000, "1GiB": 1 << 30, "4096": 4096, "1.5 MB": 1_500_000, "7 bytes": 7} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if s := Size(10_000_000).String(); s != "10MB" {
		t.Errorf("10 MB prints as %s", s)
	}
}
