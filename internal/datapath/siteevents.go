package datapath

import (
	"sync/atomic"

	"github.com/detour-overlay/detour/internal/wire"
)

// eventRing keeps the last eventRingSize 32-bit values that the data
// path's loops put into it, for one reader to drain: lock-free and free
// of allocations. When more values come between two drains, the oldest
// are lost.
type eventRing struct {
	// Each entry holds its index plus one in the high 32 bits and the
	// value in the low 32, so that the reader tells an entry of this lap
	// from an older one or one being written.
	entries [eventRingSize]atomic.Uint64
	head    atomic.Uint32
	// read is the index of the next entry to read; only the reader
	// touches it.
	read uint32
}

// eventRingSize is how many values an eventRing keeps between two
// drains.
const eventRingSize = 16

// put records v.
func (r *eventRing) put(v uint32) {
	i := r.head.Add(1) - 1
	r.entries[i%eventRingSize].Store(uint64(i+1)<<32 | uint64(v))
}

// drain calls fn for each value put since the last drain, oldest first
// (at most the newest eventRingSize). It is for one reader at a time.
func (r *eventRing) drain(fn func(v uint32)) {
	head := r.head.Load()
	if head == r.read {
		return
	}
	from := r.read
	if head-from > eventRingSize {
		from = head - eventRingSize
	}
	for j := from; j != head; j++ {
		// An entry being written (its index not yet stored) or already
		// overwritten by a newer one is skipped.
		if e := r.entries[j%eventRingSize].Load(); uint32(e>>32) == j+1 {
			fn(uint32(e))
		}
	}
	r.read = head
}

// SiteEvents records rare events, each naming a site, that the data path
// notes and the control loop drains (an eventRing: the oldest are lost
// when more than eventRingSize come between two drains).
type SiteEvents struct{ r eventRing }

// Add records an event of site.
func (e *SiteEvents) Add(site wire.SiteID) { e.r.put(uint32(site)) }

// Drain calls fn for each event recorded since the last call, oldest
// first. It is for one reader at a time.
func (e *SiteEvents) Drain(fn func(site wire.SiteID)) {
	e.r.drain(func(v uint32) { fn(wire.SiteID(v)) })
}
