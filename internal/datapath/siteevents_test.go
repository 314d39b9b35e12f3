package datapath

import (
	"slices"
	"testing"

	"github.com/detour-overlay/detour/internal/wire"
)

// TestSiteEventsDrainOnceInOrder: each event is drained once, oldest
// first; past the ring's size between two reads only the newest are kept.
func TestSiteEventsDrainOnceInOrder(t *testing.T) {
	var e SiteEvents
	drain := func() []wire.SiteID {
		var got []wire.SiteID
		e.Drain(func(s wire.SiteID) { got = append(got, s) })
		return got
	}
	if got := drain(); got != nil {
		t.Fatalf("an empty ring gave %v", got)
	}
	e.Add(7)
	e.Add(3)
	e.Add(7)
	if got := drain(); !slices.Equal(got, []wire.SiteID{7, 3, 7}) {
		t.Fatalf("drained %v, want [7 3 7]", got)
	}
	if got := drain(); got != nil {
		t.Fatalf("drained again: %v", got)
	}
	var want []wire.SiteID
	for i := range eventRingSize + 10 {
		e.Add(wire.SiteID(100 + i))
		if i >= 10 {
			want = append(want, wire.SiteID(100+i))
		}
	}
	if got := drain(); !slices.Equal(got, want) {
		t.Fatalf("after an overflow drained %d events %v..., want the newest %d from %v", len(got), got[:min(3, len(got))], len(want), want[0])
	}
}
