package datapath

import (
	"testing"

	"github.com/detour-overlay/detour/internal/wire"
)

func TestPeerStatsCounts(t *testing.T) {
	var p PeerStats
	for i := range 3000 {
		p.Count(wire.SiteID(1+i%1500), 100)
	}
	p.Count(0, 100) // no site: not counted
	got := map[wire.SiteID]PeerCount{}
	for _, c := range p.Snapshot(nil) {
		got[c.Site] = c
	}
	over := p.Overflow.Load()
	if len(got) > peerSlots || len(got) < peerSlots/2 {
		t.Fatalf("%d sites counted", len(got))
	}
	var packets uint64
	for id, c := range got {
		if c.Bytes != 100*c.Packets || c.Packets != 2 || id == 0 {
			t.Fatalf("site %v: %+v", id, c)
		}
		packets += c.Packets
	}
	if packets+over != 3000 {
		t.Fatalf("%d counted and %d overflowed of 3000", packets, over)
	}
}

func TestPrevHop(t *testing.T) {
	h := wire.DataHeader{Source: 1, PathLen: 3, Path: [wire.MaxPath]wire.SiteID{2, 3, 4}}
	for hop, want := range []wire.SiteID{1, 2, 3} {
		h.Hop = uint8(hop)
		if got := prevHop(&h); got != want {
			t.Errorf("hop %d: previous %v, want %v", hop, got, want)
		}
	}
}

func TestPeerStatsCountDoesNotAllocate(t *testing.T) {
	var p PeerStats
	if a := testing.AllocsPerRun(1000, func() { p.Count(7, 1400) }); a != 0 {
		t.Fatalf("%v allocations per count", a)
	}
}
