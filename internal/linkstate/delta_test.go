package linkstate

import (
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

func deltaConfig() OriginatorConfig {
	c := DefaultOriginatorConfig()
	c.Delta, c.DeltaDelay, c.Repeats, c.Refresh, c.FullRefresh = true, 250*time.Microsecond, 2, 2*time.Second, 20*time.Second
	return c
}

// row returns k links from site 1 with the given delay.
func row(k int, delay time.Duration) []Link {
	var out []Link
	for i := range k {
		out = append(out, Link{From: 1, To: wire.SiteID(100 + i), Up: true, Delay: delay, RTT: 2 * delay})
	}
	return out
}

// entries counts the entries of a set of messages.
func entries(ms []wire.LinkState) int {
	k := 0
	for _, m := range ms {
		k += len(m.Entries)
	}
	return k
}

// A delta originator sends the whole row first (in as many datagrams as
// it takes, and twice more), then only the links that moved, each repeated twice, plus a
// share of the others; a receiver applying the deltas holds the row.
func TestDeltaOriginator(t *testing.T) {
	o := NewOriginator(deltaConfig(), 1, 7)
	db := NewDB(7 * time.Second)
	links := row(120, 10*time.Millisecond)
	apply := func(ms []wire.LinkState) {
		for i := range ms {
			if !ms[i].Delta {
				t.Fatal("a delta originator sent a whole-row message")
			}
			db.Apply(t0, &ms[i])
		}
	}
	first := o.BuildDelta(t0, links)
	if len(first) != 3 || entries(first) != 120 {
		t.Fatalf("first row: %d messages, %d entries; want 3 and 120", len(first), entries(first))
	}
	apply(first)
	// New links are repeated too.
	for i := range 2 {
		if m := o.BuildDelta(t0, links); entries(m) != 120 {
			t.Fatalf("repeat %d of the first row: %d entries", i+1, entries(m))
		}
	}
	// Below the threshold nothing is pending; a message 500 ms after the
	// last carries the moved link and a share of 120 × 0.5 s / 20 s = 3.
	links[5].Delay += 200 * time.Microsecond
	if o.Due(t0.Add(500*time.Millisecond), links) {
		t.Fatal("a move below the threshold is due")
	}
	links[7].Delay += time.Millisecond
	if !o.Due(t0.Add(500*time.Millisecond), links) {
		t.Fatal("a 1 ms move is not due")
	}
	m := o.BuildDelta(t0.Add(500*time.Millisecond), links)
	if entries(m) != 1+3 || m[0].Entries[0].Peer != 107 && m[0].Entries[len(m[0].Entries)-1].Peer != 107 {
		t.Fatalf("delta: %d entries %+v; want the moved link and a share of 3", entries(m), m)
	}
	apply(m)
	if l, _ := db.Link(1, 107); l.Delay != 11*time.Millisecond {
		t.Fatalf("receiver holds %v for the moved link", l.Delay)
	}
	// The change is repeated in the next two messages, then not.
	for i, want := range []bool{true, true, false} {
		m := o.BuildDelta(t0.Add(time.Duration(2+2*i)*time.Second), links)
		has := false
		for _, e := range m[0].Entries {
			has = has || e.Peer == 107
		}
		if has != want {
			t.Fatalf("message %d after the change carries it: %v, want %v", i+1, has, want)
		}
		apply(m)
	}
	// Within FullRefresh every link has been sent again.
	seen := map[wire.SiteID]bool{}
	for s := 8; s <= 28; s += 2 {
		for _, m := range o.BuildDelta(t0.Add(time.Duration(s)*time.Second), links) {
			for _, e := range m.Entries {
				seen[e.Peer] = true
			}
		}
	}
	if len(seen) != 120 {
		t.Fatalf("%d of 120 links sent again within the full refresh", len(seen))
	}
}

// A delta updates only the entries it carries, never rolls one back
// (reordered messages), and a new incarnation starts the row afresh.
func TestApplyDelta(t *testing.T) {
	db := NewDB(7 * time.Second)
	full := &wire.LinkState{Origin: 1, Incarnation: 5, Seq: 10, Delta: true, Entries: []wire.LinkEntry{
		ToWire(Link{To: 2, Up: true, Delay: time.Millisecond}), ToWire(Link{To: 3, Up: true, Delay: 2 * time.Millisecond})}}
	if db.Apply(t0, full) != Accepted {
		t.Fatal("first delta rejected")
	}
	newer := &wire.LinkState{Origin: 1, Incarnation: 5, Seq: 12, Delta: true, Entries: []wire.LinkEntry{
		ToWire(Link{To: 3, Up: false})}}
	older := &wire.LinkState{Origin: 1, Incarnation: 5, Seq: 11, Delta: true, Entries: []wire.LinkEntry{
		ToWire(Link{To: 3, Up: true, Delay: 9 * time.Millisecond}), ToWire(Link{To: 2, Up: true, Delay: 4 * time.Millisecond})}}
	if db.Apply(t0, newer) != Accepted || db.Apply(t0, older) != Accepted {
		t.Fatal("deltas rejected")
	}
	if l, _ := db.Link(1, 3); l.Up {
		t.Fatalf("an older delta rolled 1→3 back to %+v", l)
	}
	if l, _ := db.Link(1, 2); l.Delay != 4*time.Millisecond {
		t.Fatalf("1→2 is %v, want the update of seq 11", l.Delay)
	}
	if db.Apply(t0, older) != Stale {
		t.Fatal("a copy was applied twice")
	}
	restart := &wire.LinkState{Origin: 1, Incarnation: 6, Seq: 1, Delta: true, Entries: []wire.LinkEntry{
		ToWire(Link{To: 4, Up: true})}}
	if db.Apply(t0, restart) != Accepted {
		t.Fatal("a new incarnation was rejected")
	}
	if _, ok := db.Link(1, 2); ok {
		t.Fatal("the old incarnation's links survived a restart")
	}
}
