package datapath

import (
	"sync/atomic"

	"github.com/detour-overlay/detour/internal/wire"
)

// SiteEvents is a ring of rare events, each naming a site, that the data
// path records and the control loop drains: lock-free and free of
// allocations for the writers (the device loops), for one reader. When
// more than siteEventRing events come between two reads, the oldest are
// lost.
type SiteEvents struct {
	// Each entry holds its index plus one in the high 32 bits and the
	// site in the low 32, so that the reader tells an entry of this lap
	// from an older one or one being written.
	ring [siteEventRing]atomic.Uint64
	head atomic.Uint32
	// read is the index of the next entry to read; only the reader
	// touches it.
	read uint32
}

// siteEventRing is how many events SiteEvents keeps between two reads.
const siteEventRing = 64

// Add records an event of site.
func (e *SiteEvents) Add(site wire.SiteID) {
	i := e.head.Add(1) - 1
	e.ring[i%siteEventRing].Store(uint64(i+1)<<32 | uint64(site))
}

// Drain calls fn for each event recorded since the last call, oldest
// first (at most the newest siteEventRing). It is for one reader at a
// time.
func (e *SiteEvents) Drain(fn func(site wire.SiteID)) {
	head := e.head.Load()
	from := e.read
	if head-from > siteEventRing {
		from = head - siteEventRing
	}
	for j := from; j != head; j++ {
		if v := e.ring[j%siteEventRing].Load(); uint32(v>>32) == j+1 {
			fn(wire.SiteID(uint32(v)))
		}
	}
	e.read = head
}
