package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/transport"
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

// TestStampsSampleTheFirstLink: data packets carry their source's send
// stamp; the first receiver of each (a relay or the destination) records
// it as a sample of the link from the source, at most one per
// StampSpacing, and a later receiver of a relayed packet records none.
// The receive clock here runs 5 s ahead of the senders'.
func TestStampsSampleTheFirstLink(t *testing.T) {
	const offset = 5 * time.Second
	nw := transport.NewFakeNetwork()
	nw.Clock = func() time.Time { return time.Now().Add(offset) }
	a, b, c := threeSitesOn(t, nw, nil)
	// c and b announce their hosts, so that a sends unicast to them.
	c.dev.Inject(frame(0xff, 0xc, "c"))
	expect(t, a, frame(0xff, 0xc, "c"))
	expect(t, b, frame(0xff, 0xc, "c"))
	b.dev.Inject(frame(0xff, 0xe, "b"))
	expect(t, a, frame(0xff, 0xe, "b"))
	expect(t, c, frame(0xff, 0xe, "b"))
	drain := func(s *site) map[wire.SiteID][]uint16 {
		got := map[wire.SiteID][]uint16{}
		s.eng.Stats().Peers.Stamps(func(id wire.SiteID, rels []uint16) { got[id] = append(got[id], rels...) })
		return got
	}
	drain(b)
	drain(c)
	const frames = 4
	for i := range frames {
		a.dev.Inject(frame(0xc, 0xa, "to c through b"))
		expect(t, c, frame(0xc, 0xa, "to c through b"))
		a.dev.Inject(frame(0xe, 0xa, "to b"))
		expect(t, b, frame(0xe, 0xa, "to b"))
		if i < frames-1 {
			time.Sleep(StampSpacing + time.Millisecond)
		}
	}
	atB, atC := drain(b), drain(c)
	if n := len(atB[1]); n < frames-1 || n > 2*(frames-1) {
		// The first packet on each path is not stamped; of the two
		// stamped packets of a later round one is taken, or both when
		// a busy machine delays the second past the spacing (which
		// TestStampRingKeepsTheNewest checks exactly).
		t.Fatalf("b took %d samples of the link from a (%v); want %d to %d", n, atB, frames-1, 2*(frames-1))
	}
	for _, rel := range atB[1] {
		if d := time.Duration(wire.UnwrapStamp(int64(offset), rel)) - offset; d < -time.Millisecond || d > 100*time.Millisecond {
			t.Errorf("sample %v from the 5 s offset; want the fake network's near-zero delay", d)
		}
	}
	if len(atC) != 0 {
		t.Errorf("c, the second receiver of a's packets, took samples %v", atC)
	}
	if again := drain(b); len(again) != 0 {
		t.Errorf("samples handed out twice: %v", again)
	}
}

// TestStampRingKeepsTheNewest: a reader that comes late gets the newest
// stampRing samples of a site, oldest first, and each sample once.
func TestStampRingKeepsTheNewest(t *testing.T) {
	var p PeerStats
	rx := int64(1_700_000_000_000_000_000)
	for i := range stampRing + 5 {
		p.Stamp(7, rx, wire.StampOf(rx)-uint16(i))
		p.Stamp(7, rx+1, 0) // within the spacing: not taken
		rx += int64(StampSpacing)
	}
	var got []uint16
	p.Stamps(func(id wire.SiteID, rels []uint16) {
		if id != 7 {
			t.Errorf("samples for site %v", id)
		}
		got = append(got, rels...)
	})
	if len(got) != stampRing || got[0] != 5 || got[stampRing-1] != stampRing+4 {
		t.Fatalf("read %v; want %d samples, 5 to %d", got, stampRing, stampRing+4)
	}
	p.Stamps(func(wire.SiteID, []uint16) { t.Error("samples read twice") })
}

// TestStampsReadTheAgentsClock: the receive time of a sample is the
// kernel's, moved onto the clock the site stamps with (Config.Wall, which
// may be offset from the kernel's, as probes read it): a receiver whose
// clock runs 7 s ahead of the kernel's and a sender on the kernel's clock
// give a sample of 7 s plus the (here nil) delay.
func TestStampsReadTheAgentsClock(t *testing.T) {
	const offset = 7 * time.Second
	e := benchEngine()
	e.wall = func() int64 { return time.Now().Add(offset).UnixNano() }
	in := newIngress(e)
	in.clockShift()
	now := time.Now()
	h := wire.DataHeader{Source: 2, Network: testNet, PathLen: 1, Flags: wire.DataFlagStamped, Stamp: wire.StampOf(now.UnixNano())}
	h.Path[0] = 1
	buf := make([]byte, 200)
	n := h.Put(buf)
	n += copy(buf[n:], frame(0xa, 0xb, "stamped"))
	in.handle(&transport.Message{Buf: buf, N: n, Addr: netip.MustParseAddrPort("198.18.0.2:1"), At: now})
	var got []uint16
	e.stats.Peers.Stamps(func(id wire.SiteID, rels []uint16) { got = append(got, rels...) })
	if len(got) != 1 {
		t.Fatalf("samples %v, want one", got)
	}
	if d := time.Duration(wire.UnwrapStamp(int64(offset), got[0])) - offset; d < -time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("sample %v off the receiver's 7 s clock offset", d)
	}
}
