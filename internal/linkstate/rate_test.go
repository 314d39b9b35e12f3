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

// TestRowsBetween49And57LinksCarryRatesWhenDue: a whole row too long for
// one datagram with its rates (53 links, azure-54) but not without them
// goes as one message without rates, except the first, every rateResend,
// and after a rate moved; receivers keep the rates, aging, in between.
func TestRowsBetween49And57LinksCarryRatesWhenDue(t *testing.T) {
	o := NewOriginator(DefaultOriginatorConfig(), 1, 1)
	db := NewDB(3 * time.Second)
	row := func(now time.Time, rate float64) []Link {
		var links []Link
		for i := range 53 {
			links = append(links, Link{From: 1, To: wire.SiteID(100 + i), Up: true, Delay: time.Millisecond, At: now,
				RevRate: rate, RevRateKind: wire.RateKindTrain})
		}
		return links
	}
	send := func(now time.Time, rate float64) (msgs int, rates bool) {
		for _, m := range o.Build(now, row(now, rate)) {
			b, err := wire.AppendLinkState(nil, &m)
			if err != nil {
				t.Fatal(err)
			}
			var got wire.LinkState
			if err := wire.ParseLinkState(b, &got); err != nil {
				t.Fatal(err)
			}
			db.Apply(now, &got)
			msgs, rates = msgs+1, got.Rates
		}
		return msgs, rates
	}
	if n, rates := send(t0, 100e6); n != 2 || !rates {
		t.Fatalf("first row: %d messages, rates %v; want the row and its rates in 2", n, rates)
	}
	for i := 1; i < 10; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		if n, rates := send(now, 100e6); n != 1 || rates {
			t.Fatalf("row at %v: %d messages, rates %v; want one without rates", now.Sub(t0), n, rates)
		}
		rate, kind, age, ok := db.Rate(now, 120, 1)
		if !ok || rate != 100e6 || kind != wire.RateKindTrain || age != time.Duration(i)*time.Second {
			t.Fatalf("at %v the receiver holds rate %v kind %d age %v (%v); want 100 Mbit/s by train, %ds old", now.Sub(t0), rate, kind, age, ok, i)
		}
	}
	if n, rates := send(t0.Add(9500*time.Millisecond), 150e6); n != 2 || !rates {
		t.Fatalf("a rate that moved by half: %d messages, rates %v", n, rates)
	}
	if n, rates := send(t0.Add(19*time.Second), 150e6); n != 1 || rates {
		t.Fatalf("9.5 s later: %d messages, rates %v", n, rates)
	}
	if n, rates := send(t0.Add(19500*time.Millisecond), 150e6); n != 2 || !rates {
		t.Fatalf("10 s later: %d messages, rates %v; want the rates again", n, rates)
	}
}
