package wire

import (
	"errors"
	"testing"
)

func TestTrainRoundTrip(t *testing.T) {
	in := Train{Sender: 1, Receiver: 2, ID: 77, Index: 5, Count: 24}
	b := AppendTrainPacket(nil, &in, 1200)
	if len(b) != 1200 {
		t.Fatalf("train packet of %d bytes, want 1200", len(b))
	}
	var got Train
	if err := ParseTrain(b, &got); err != nil || got != in {
		t.Fatalf("parsed %+v, %v; want %+v", got, err, in)
	}
	rep := Train{Report: true, Sender: 2, Receiver: 1, ID: 77, Index: 23, Count: 24, Rate: 19876}
	b = AppendTrainReport(nil, &rep)
	if err := ParseTrain(b, &got); err != nil || got != rep {
		t.Fatalf("parsed report %+v, %v; want %+v", got, err, rep)
	}
	if err := ParseTrain(b[:len(b)-1], &got); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated report: %v", err)
	}
}

func TestTrainRejects(t *testing.T) {
	for _, tr := range []Train{
		{Sender: 1, Receiver: 1, Count: 2},
		{Sender: 0, Receiver: 1, Count: 2},
		{Sender: 1, Receiver: 2, Index: 2, Count: 2},
		{Sender: 1, Receiver: 2, Count: 0},
		{Sender: 1, Receiver: 2, Count: MaxTrainPackets + 1},
	} {
		if err := ParseTrain(AppendTrainPacket(nil, &tr, 64), new(Train)); !errors.Is(err, ErrMalformed) {
			t.Errorf("train %+v: %v, want malformed", tr, err)
		}
	}
}

func TestRateToWire(t *testing.T) {
	for _, c := range []struct{ in, want uint32 }{
		{0, 0}, {1, 1}, {4095, 4095}, {4096, 4096}, {4097, 4098}, {20000, 20000}, {200000, 200000},
		{1 << 40 >> 10, 4095 << 15},
	} {
		if got := RateFromWire(RateToWire(c.in)); got != c.want {
			t.Errorf("rate %d → %d, want %d", c.in, got, c.want)
		}
	}
	// Within 1/2048 everywhere below the largest value.
	for v := uint32(1); v < 4095<<15; v = v*3 + 1 {
		got := RateFromWire(RateToWire(v))
		if d := int64(got) - int64(v); d*2048 > int64(v) || -d*2048 > int64(v) {
			t.Fatalf("rate %d → %d", v, got)
		}
	}
}

func TestLinkStateRates(t *testing.T) {
	ls := LinkState{Origin: 5, Seq: 2, Rates: true, Entries: []LinkEntry{
		{Peer: 6, Flags: LinkFlagUp, RevRate: 20000, RevRateKind: RateKindTrain, RevRateAge: 4},
		{Peer: 7, Flags: LinkFlagUp},
	}}
	b, err := AppendLinkState(nil, &ls)
	if err != nil || len(b) != LinkStateLen(2)+2*LinkRateLen {
		t.Fatalf("encoded %d bytes, %v", len(b), err)
	}
	var got LinkState
	if err := ParseLinkState(b, &got); err != nil || !got.Rates || got.Entries[0] != ls.Entries[0] || got.Entries[1] != ls.Entries[1] {
		t.Fatalf("parsed %+v, %v", got, err)
	}
	// A message whose section is cut short is truncated.
	if err := ParseLinkState(b[:len(b)-1], &got); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short rate section: %v", err)
	}
	// An older parser's view: the same message without the flag parses
	// with no rates (the section is trailing bytes).
	old := append([]byte(nil), b...)
	old[3] &^= FlagRates
	if err := ParseLinkState(old, &got); err != nil || got.Rates || got.Entries[0].RevRate != 0 {
		t.Fatalf("without the flag: %+v, %v", got, err)
	}
	// An unknown kind reads as nothing known.
	b[LinkStateLen(2)+2] = 9
	if err := ParseLinkState(b, &got); err != nil || got.Entries[0].RevRateKind != RateKindNone || got.Entries[0].RevRate != 0 {
		t.Fatalf("unknown kind: %+v, %v", got.Entries[0], err)
	}
	ls.Entries = make([]LinkEntry, MaxRatedLinkEntries+1)
	for i := range ls.Entries {
		ls.Entries[i].Peer = SiteID(100 + i)
	}
	if _, err := AppendLinkState(nil, &ls); err == nil {
		t.Fatal("too many entries for a rate section encoded")
	}
	ls.Entries = ls.Entries[:MaxRatedLinkEntries]
	if b, err := AppendLinkState(nil, &ls); err != nil || len(b) > 1400 {
		t.Fatalf("full rated message: %d bytes, %v", len(b), err)
	}
}
