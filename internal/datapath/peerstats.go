package datapath

import (
	"sync/atomic"

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
}

// peerProbes is how many slots a site's lookup tries.
const peerProbes = 16

// Count records a data packet of n bytes from previous hop from.
func (p *PeerStats) Count(from wire.SiteID, n int) {
	if from == 0 {
		return
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
			s.bytes.Add(uint64(n))
			s.packets.Add(1)
			return
		}
	}
	p.Overflow.Add(1)
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
