package linkstate

import (
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// TestRateThroughTheWire: site 2 reports the rate of 1 → 2 in its own row
// (the reverse direction of its entry for 1); every site reads it as the
// rate of 1 → 2, aged by the time since.
func TestRateThroughTheWire(t *testing.T) {
	o := NewOriginator(DefaultOriginatorConfig(), 2, 1)
	links := []Link{{From: 2, To: 1, Up: true, RevRate: 19.6e6, RevRateKind: wire.RateKindTrain, RevRateAge: 3 * time.Second, At: t0}}
	msgs := o.Build(t0, links)
	if len(msgs) != 1 {
		t.Fatalf("a row of one link in %d messages", len(msgs))
	}
	b, err := wire.AppendLinkState(nil, &msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	var got wire.LinkState
	if err := wire.ParseLinkState(b, &got); err != nil || !got.Rates {
		t.Fatalf("parse: %v, rates %v", err, got.Rates)
	}
	db := NewDB(time.Minute)
	db.Apply(t0, &got)
	rate, kind, age, ok := db.Rate(t0.Add(2*time.Second), 1, 2)
	if !ok || kind != wire.RateKindTrain || rate != 19.6e6 || age != 5*time.Second {
		t.Fatalf("rate of 1 → 2: %v %v %v %v", rate, kind, age, ok)
	}
	if _, _, _, ok := db.Rate(t0, 2, 1); ok {
		t.Fatal("the rate of 2 → 1, which nobody reported, is known")
	}
}

// TestRateChangeIsSignificant: a new rate kind or a change of a fifth is
// sent at once; a smaller change waits for the refresh.
func TestRateChangeIsSignificant(t *testing.T) {
	o := NewOriginator(DefaultOriginatorConfig(), 2, 1)
	base := Link{From: 2, To: 1, Up: true, At: t0}
	o.Build(t0, []Link{base})
	now := t0.Add(200 * time.Millisecond)
	l := base
	l.RevRate, l.RevRateKind = 20e6, wire.RateKindTrain
	if !o.Due(now, []Link{l}) {
		t.Fatal("a first rate is not sent at once")
	}
	o.Build(now, []Link{l})
	now = now.Add(200 * time.Millisecond)
	l.RevRate = 22e6
	if o.Due(now, []Link{l}) {
		t.Fatal("a 10 % change is sent at once")
	}
	l.RevRate = 26e6
	if !o.Due(now, []Link{l}) {
		t.Fatal("a 30 % change waits")
	}
}

// TestLargeRowsKeepTheRateSection: delta messages split at
// MaxRatedLinkEntries and all carry rates.
func TestLargeRowsKeepTheRateSection(t *testing.T) {
	cfg := DefaultOriginatorConfig()
	cfg.Delta = true
	o := NewOriginator(cfg, 1, 1)
	var links []Link
	for i := range 60 {
		links = append(links, Link{From: 1, To: wire.SiteID(100 + i), Up: true, At: t0})
	}
	msgs := o.Full(links)
	if len(msgs) != 2 {
		t.Fatalf("%d messages for 60 links", len(msgs))
	}
	for _, m := range msgs {
		if _, err := wire.AppendLinkState(nil, &m); err != nil || !m.Rates {
			t.Fatalf("message of %d entries: rates %v, %v", len(m.Entries), m.Rates, err)
		}
	}
}
