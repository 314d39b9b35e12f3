package datapath

import (
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// PeerStats counts the data bytes and packets received from each previous
// hop (the site that sent the datagram on the underlay: the source for
// the first hop, a relay after that): the delivery rate of each link into
// this site, which the control plane turns into passive estimates of its
// available throughput (measure.RateEstimator). It is a fixed table of
// peerSlots slots, open addressing on the site ID, lock-free and free of
// allocations: the receive loop counts, the control loop reads.
type PeerStats struct {
	slots [peerSlots]peerSlot
	// Overflow counts the packets of previous hops that found no slot.
	Overflow atomic.Uint64
}

// peerSlots bounds the previous hops counted (a power of two, well above
// the number of sites an overlay has).
const peerSlots = 1024

type peerSlot struct {
	site    atomic.Uint32
	bytes   atomic.Uint64
	packets atomic.Uint64
	// The stamp differences of the packets this site is the first
	// receiver of (see Stamp); nextStamp spaces them.
	stamps    eventRing
	nextStamp atomic.Int64
}

// stampRing is how many in-band samples a slot holds between two reads,
// and StampSpacing the least time between two samples of one previous
// hop: a ring is full after 80 ms of traffic, and the reader drains it
// more often than that.
const (
	stampRing    = eventRingSize
	StampSpacing = 5 * time.Millisecond
)

// peerProbes is how many slots a site's lookup tries.
const peerProbes = 16

// Count records a data packet of n bytes from previous hop from.
func (p *PeerStats) Count(from wire.SiteID, n int) {
	if s := p.slot(from); s != nil {
		s.count(n)
	}
}

// CountStamped is Count and Stamp in one look-up, for a packet with a
// send stamp that this site is the first receiver of.
func (p *PeerStats) CountStamped(from wire.SiteID, n int, rx int64, stamp uint16) {
	if s := p.slot(from); s != nil {
		s.count(n)
		s.stamp(rx, stamp)
	}
}

func (s *peerSlot) count(n int) {
	s.bytes.Add(uint64(n))
	s.packets.Add(1)
}

// slot returns the slot of site from, taking a free one if it has none,
// or nil (counted in Overflow) when the table has no room for it.
func (p *PeerStats) slot(from wire.SiteID) *peerSlot {
	if from == 0 {
		return nil
	}
	h := uint32(from) * 0x9E3779B1
	for i := range uint32(peerProbes) {
		s := &p.slots[(h+i)&(peerSlots-1)]
		id := s.site.Load()
		if id == 0 && s.site.CompareAndSwap(0, uint32(from)) {
			id = uint32(from)
		} else if id == 0 {
			id = s.site.Load()
		}
		if id == uint32(from) {
			return s
		}
	}
	p.Overflow.Add(1)
	return nil
}

// Stamp records the send stamp of an authentic data packet from site from
// that this site is the first receiver of, received at rx (wall clock,
// ns): the difference of the receive and send stamps is a sample of the
// offset-shifted delay of the link from the source, modulo 2^16 units
// (see wire.DataFlagStamped). At most one packet per StampSpacing is
// taken per site. It is for the receive loops, lock-free and free of
// allocations.
func (p *PeerStats) Stamp(from wire.SiteID, rx int64, stamp uint16) {
	if s := p.slot(from); s != nil {
		s.stamp(rx, stamp)
	}
}

func (s *peerSlot) stamp(rx int64, stamp uint16) {
	next := s.nextStamp.Load()
	if rx < next || !s.nextStamp.CompareAndSwap(next, rx+int64(StampSpacing)) {
		return
	}
	s.stamps.put(uint32(wire.StampOf(rx) - stamp))
}

// Stamps hands fn, for each previous hop with samples recorded since the
// last call, the stamp differences of those samples, oldest first (at
// most the newest stampRing; fn must not keep the slice). It is for one
// reader at a time.
func (p *PeerStats) Stamps(fn func(site wire.SiteID, rels []uint16)) {
	var buf [stampRing]uint16
	for i := range p.slots {
		s := &p.slots[i]
		n := 0
		s.stamps.drain(func(v uint32) {
			buf[n] = uint16(v)
			n++
		})
		if n > 0 {
			fn(wire.SiteID(s.site.Load()), buf[:n])
		}
	}
}

// PeerCount is the total received from one previous hop.
type PeerCount struct {
	Site           wire.SiteID
	Bytes, Packets uint64
}

// Snapshot appends the counts of every previous hop seen to out.
func (p *PeerStats) Snapshot(out []PeerCount) []PeerCount {
	for i := range p.slots {
		s := &p.slots[i]
		if id := s.site.Load(); id != 0 {
			out = append(out, PeerCount{Site: wire.SiteID(id), Bytes: s.bytes.Load(), Packets: s.packets.Load()})
		}
	}
	return out
}

// prevHop is the site that sent a data packet with header h on the
// underlay.
func prevHop(h *wire.DataHeader) wire.SiteID {
	if h.Hop == 0 || int(h.Hop) > len(h.Path) {
		return h.Source
	}
	return h.Path[h.Hop-1]
}
