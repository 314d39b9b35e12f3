package wire

import (
	"errors"
	"testing"
)

// TestUnwrapStamp: a stamp difference taken modulo 2^16 units comes back
// as the delay nearest the known one, whatever the clocks' offset (large,
// negative, across a wrap of the stamps) and for delays up to a second
// away from it.
func TestUnwrapStamp(t *testing.T) {
	const unit = int64(1) << StampShift
	for _, offset := range []int64{0, 5e9, -5e9, 1<<StampShift*65535 + 17, -123456789} {
		for _, probe := range []int64{20e6, 32e6} {
			near := offset + probe
			for _, delay := range []int64{20e6, 32e6, 65e6, 500e6, 1000e6, 1e3} {
				for _, tx := range []int64{1_700_000_000_123_456_789, 1_700_000_002_000_000_000} {
					rx := tx + offset + delay
					got := UnwrapStamp(near, StampOf(rx)-StampOf(tx))
					if d := got - (offset + delay); d <= -unit || d >= unit {
						t.Errorf("offset %d, probe %d, delay %d: unwrapped %d, %d ns off", offset, probe, delay, got, d)
					}
				}
			}
		}
	}
}

// TestInbandRoundTrip: a report encodes and parses back sample for sample;
// an empty one, one of too many samples or one spanning more than an
// int32 of nanoseconds does not encode, and a truncated one does not parse.
func TestInbandRoundTrip(t *testing.T) {
	in := Inband{Sender: 7, Receiver: 9, Count: 3, Samples: [MaxInbandSamples]int64{-4_999_968_000, -4_999_935_232, -5_000_100_000}}
	b, err := AppendInband(nil, &in)
	if err != nil || len(b) != InbandLen(3) {
		t.Fatalf("encoded %d bytes, %v; want %d", len(b), err, InbandLen(3))
	}
	var out Inband
	if err := ParseInband(b, &out); err != nil || out != in {
		t.Fatalf("parsed %+v, %v; want %+v", out, err, in)
	}
	if err := ParseInband(b[:len(b)-1], &out); !errors.Is(err, ErrTruncated) {
		t.Errorf("truncated report: %v", err)
	}
	for name, r := range map[string]Inband{
		"empty":    {Sender: 7, Receiver: 9},
		"too many": {Sender: 7, Receiver: 9, Count: MaxInbandSamples + 1},
		"span":     {Sender: 7, Receiver: 9, Count: 2, Samples: [MaxInbandSamples]int64{0, 1 << 31}},
	} {
		if b, err := AppendInband([]byte{1}, &r); err == nil || len(b) != 1 {
			t.Errorf("%s: encoded %x, %v", name, b, err)
		}
	}
	zero := append([]byte(nil), b...)
	zero[12] = 0
	if err := ParseInband(zero, &out); !errors.Is(err, ErrMalformed) {
		t.Errorf("report of no samples: %v", err)
	}
}
