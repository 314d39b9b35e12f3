package linkstate

import (
	"slices"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func msg(inc uint64, seq uint32, delay time.Duration) *wire.LinkState {
	return &wire.LinkState{Origin: 1, Incarnation: inc, Seq: seq,
		Entries: []wire.LinkEntry{ToWire(Link{To: 2, Up: true, Delay: delay, RTT: 10 * time.Millisecond})}}
}

func TestApplyOrdersByIncarnationAndSeq(t *testing.T) {
	db := NewDB(3 * time.Second)
	if db.Apply(t0, msg(5, 10, time.Millisecond)) != Accepted {
		t.Fatal("first message rejected")
	}
	if db.Apply(t0, msg(5, 10, 2*time.Millisecond)) != Stale || db.Apply(t0, msg(5, 9, 0)) != Stale {
		t.Fatal("duplicate or older accepted")
	}
	if db.Apply(t0, msg(5, 11, -4*time.Second)) != Accepted {
		t.Fatal("newer rejected")
	}
	if l, _ := db.Link(1, 2); l.Delay != -4*time.Second || !l.Up {
		t.Fatalf("link %+v", l)
	}
	if db.Apply(t0, msg(6, 1, 0)) != Accepted || db.Apply(t0, msg(5, 99, 0)) != Stale {
		t.Fatal("restart ordering")
	}
	if db.Apply(t0, msg(7, 0xFFFFFFFE, 0)) != Accepted || db.Apply(t0, msg(7, 3, 0)) != Accepted {
		t.Fatal("serial-number wrap-around")
	}
}

func TestExpire(t *testing.T) {
	db := NewDB(3 * time.Second)
	db.Apply(t0, msg(1, 1, 0))
	db.SetOwn(t0, 9, 1, nil)
	if got := db.Expire(t0.Add(2*time.Second), 9); len(got) != 0 {
		t.Fatalf("expired early: %v", got)
	}
	if got := db.Expire(t0.Add(4*time.Second), 9); len(got) != 1 || got[0] != 1 {
		t.Fatalf("expired %v", got)
	}
	if _, ok := db.Origin(9); !ok {
		t.Fatal("own report expired")
	}
}

// TestVouchedReportStaysFresh: a report whose origin is heard directly
// (its probes and replies) stays fresh though no newer report comes, and
// expires ExpireAfter after the origin was last heard.
func TestVouchedReportStaysFresh(t *testing.T) {
	db := NewDB(3 * time.Second)
	db.Apply(t0, msg(1, 1, 0))
	db.Vouch(2, t0) // no report of 2: nothing to keep
	for s := 1; s <= 5; s++ {
		db.Vouch(1, t0.Add(time.Duration(s)*time.Second))
	}
	at := t0.Add(7 * time.Second) // the report 7 s old, its origin heard 2 s ago
	if !db.Fresh(at, 1) || len(db.Expire(at, 9)) != 0 {
		t.Fatal("the report of an origin heard 2 s ago expired")
	}
	if got := db.Expire(t0.Add(8100*time.Millisecond), 9); len(got) != 1 || got[0] != 1 {
		t.Fatalf("expired %v 3.1 s after the origin was last heard, want [1]", got)
	}
	if _, ok := db.Origin(2); ok {
		t.Fatal("vouching created an origin")
	}
}

func TestOriginatorSendsSignificantChangesOnly(t *testing.T) {
	o := NewOriginator(DefaultOriginatorConfig(), 1, 1)
	links := []Link{{From: 1, To: 2, Up: true, Delay: 5 * time.Second, RTT: 100 * time.Millisecond}}
	if !o.Due(t0, links) {
		t.Fatal("first message not due")
	}
	o.Build(t0, links)
	now := t0.Add(100 * time.Millisecond)
	links[0].Delay += 800 * time.Microsecond
	links[0].RTT += 4 * time.Millisecond
	if o.Due(now, links) {
		t.Fatal("small change sent at once")
	}
	links[0].Delay += 300 * time.Microsecond
	if !o.Due(now, links) {
		t.Fatal("1.1 ms delay change not sent")
	}
	o.Build(now, links)
	links[0].Up = false
	if o.Due(now.Add(50*time.Millisecond), links) {
		t.Fatal("MinInterval not respected")
	}
	if !o.Due(now.Add(100*time.Millisecond), links) {
		t.Fatal("link down not sent")
	}
	o.Build(now, links)
	if o.Due(now.Add(999*time.Millisecond), links) || !o.Due(now.Add(time.Second), links) {
		t.Fatal("refresh interval")
	}
	if o.Seq() != 3 {
		t.Fatalf("seq %d", o.Seq())
	}
}

// msgUp is a report of origin 1 with its link to 2 up or down.
func msgUp(seq uint32, up bool) *wire.LinkState {
	m := msg(1, seq, time.Millisecond)
	if !up {
		m.Entries[0].Flags = 0
	}
	return m
}

// A link keeps the time it came up across reports; one that comes back up
// within FlapWindow of going down is flapping, one that comes back later
// is not.
func TestUpSinceAndFlapping(t *testing.T) {
	db := NewDB(time.Hour)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	db.Apply(at(0), msgUp(1, true))
	db.Apply(at(5), msgUp(2, true))
	if l, _ := db.Link(1, 2); !l.UpSince.Equal(at(0)) || l.Flapping {
		t.Fatalf("after two reports: up since %v, flapping %v; want since %v, not flapping", l.UpSince, l.Flapping, at(0))
	}
	db.Apply(at(10), msgUp(3, false))
	db.Apply(at(20), msgUp(4, true))
	if l, _ := db.Link(1, 2); !l.UpSince.Equal(at(20)) || !l.Flapping {
		t.Fatalf("back up 10 s after going down: since %v, flapping %v; want since %v, flapping", l.UpSince, l.Flapping, at(20))
	}
	db.Apply(at(30), msgUp(5, false))
	db.Apply(at(30+61), msgUp(6, true))
	if l, _ := db.Link(1, 2); !l.UpSince.Equal(at(91)) || l.Flapping {
		t.Fatalf("back up 61 s after going down: since %v, flapping %v; want since %v, not flapping", l.UpSince, l.Flapping, at(91))
	}
	db.DropAt(at(100), 1)
	db.Apply(at(110), msgUp(7, true))
	if l, _ := db.Link(1, 2); !l.Flapping {
		t.Fatal("a link of an origin dropped 10 s ago and back is not flapping")
	}
}

// A row longer than one message goes out as delta messages that together
// carry every link, so that receivers hold the whole row (a message cut
// short dropped the links beyond wire.MaxLinkEntries at every receiver);
// a row that fits again is sent whole and replaces it.
func TestLongRowSplit(t *testing.T) {
	o := NewOriginator(DefaultOriginatorConfig(), 1, 1)
	var links []Link
	for to := wire.SiteID(2); to < 2+100; to++ {
		links = append(links, Link{From: 1, To: to, Up: true, Delay: time.Duration(to) * time.Millisecond, RTT: 20 * time.Millisecond})
	}
	msgs := o.Build(t0, links)
	carried := 0
	for _, m := range msgs {
		carried += len(m.Entries)
	}
	if len(msgs) != (100+wire.MaxRatedLinkEntries-1)/wire.MaxRatedLinkEntries || carried != 100 {
		t.Fatalf("100 links in %d messages carrying %d", len(msgs), carried)
	}
	db := NewDB(time.Hour)
	for i := range msgs {
		if !msgs[i].Delta || !msgs[i].Rates || msgs[i].Seq != uint32(i+1) {
			t.Fatalf("message %d: delta %v, rates %v, seq %d", i, msgs[i].Delta, msgs[i].Rates, msgs[i].Seq)
		}
		b, err := wire.AppendLinkState(nil, &msgs[i])
		if err != nil || len(b) > 1400 {
			t.Fatalf("message %d encodes to %d bytes: %v", i, len(b), err)
		}
		db.Apply(t0, &msgs[i])
	}
	for _, l := range links {
		if got, ok := db.Link(1, l.To); !ok || got.Delay != l.Delay {
			t.Fatalf("link 1->%d: held %v (%v), sent %v", l.To, got.Delay, ok, l.Delay)
		}
	}
	short := o.Build(t0.Add(time.Second), links[:3])
	if len(short) != 1 || short[0].Delta || !short[0].Rates {
		t.Fatalf("a row of 3 links: %d messages, delta %v", len(short), short[0].Delta)
	}
	db.Apply(t0.Add(time.Second), &short[0])
	if _, ok := db.Link(1, links[50].To); ok {
		t.Fatal("a whole row did not replace the long one")
	}
}

// A report's links are kept sorted by destination whatever order the
// message lists them in, a destination listed twice keeps its last entry,
// and a delta inserts a new destination in order.
func TestReportKeepsLinksSortedByDestination(t *testing.T) {
	db := NewDB(3 * time.Second)
	entry := func(to wire.SiteID, d time.Duration) wire.LinkEntry {
		return ToWire(Link{To: to, Up: true, Delay: d})
	}
	full := &wire.LinkState{Origin: 1, Incarnation: 1, Seq: 1, Entries: []wire.LinkEntry{
		entry(9, 1*time.Millisecond), entry(3, 2*time.Millisecond), entry(7, 3*time.Millisecond), entry(3, 4*time.Millisecond)}}
	if db.Apply(t0, full) != Accepted {
		t.Fatal("report rejected")
	}
	delta := &wire.LinkState{Origin: 1, Incarnation: 1, Seq: 2, Delta: true, Entries: []wire.LinkEntry{entry(5, 5*time.Millisecond), entry(2, 6*time.Millisecond)}}
	if db.Apply(t0, delta) != Accepted {
		t.Fatal("delta rejected")
	}
	o, _ := db.Origin(1)
	var got []wire.SiteID
	for _, l := range o.Links {
		got = append(got, l.To)
	}
	if want := []wire.SiteID{2, 3, 5, 7, 9}; !slices.Equal(got, want) {
		t.Fatalf("links to %v, want %v", got, want)
	}
	if l, _ := db.Link(1, 3); l.Delay != 4*time.Millisecond {
		t.Fatalf("1→3 is %v, want the last entry's 4 ms", l.Delay)
	}
	for _, to := range []wire.SiteID{1, 4, 6, 8, 10} {
		if _, ok := db.Link(1, to); ok {
			t.Errorf("a link 1→%d that no entry names", to)
		}
	}
}

// TestCursorAnswersAsReportsUp: a cursor over an origin's report answers
// as ReportsUp for destinations asked in ascending order, and still does
// when asked out of order or about links the report does not name.
func TestCursorAnswersAsReportsUp(t *testing.T) {
	db := NewDB(3 * time.Second)
	var entries []wire.LinkEntry
	for to := wire.SiteID(2); to <= 40; to += 3 {
		entries = append(entries, ToWire(Link{To: to, Up: to%2 == 0, Delay: time.Millisecond}))
	}
	if db.Apply(t0, &wire.LinkState{Origin: 1, Incarnation: 1, Seq: 1, Entries: entries}) != Accepted {
		t.Fatal("report rejected")
	}
	asks := []wire.SiteID{}
	for to := wire.SiteID(0); to <= 45; to++ {
		asks = append(asks, to)
	}
	asks = append(asks, 8, 8, 3, 44, 20, 14, 14, 2)
	c := db.Cursor(1)
	for _, to := range asks {
		if got, want := c.Up(to), db.ReportsUp(1, to); got != want {
			t.Fatalf("1→%d: cursor %v, ReportsUp %v", to, got, want)
		}
	}
	none := db.Cursor(7)
	if none.Up(2) {
		t.Fatal("a cursor over an unknown origin reports a link up")
	}
}
