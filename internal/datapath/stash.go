package datapath

import (
	"slices"
	"sync/atomic"

	"github.com/detour-overlay/detour/internal/wire"
)

// The neighbour stash. A host asks for a neighbour's address (an ARP
// request, an IPv6 neighbour solicitation) with a flooded frame, and asks
// again only after a second (the kernel's retrans_time_ms). A site that
// has just started, or that just learned of a new site, has no route to
// some sites yet, so the first request reaches only part of the overlay,
// or its answer (a unicast ARP reply or neighbour advertisement) finds no
// route back, and the host waits that second. The egress keeps each such
// request for stashAge with the sites it reached, and each answer that
// found no route, and when the routes change (the engine wakes the device
// loop, SetRoutes) sends them to the sites that have become reachable
// since. A late copy is harmless: a neighbour answers a request whether
// it was asked before or not, and a host takes an answer whether it still
// waits for it or not.
const (
	stashAge  = 900e6 // ns: less than the kernel's retry, one second
	stashSize = 16
)

// stashed is one kept frame: a copy, when it was read (monotonic ns), and
// the sites it was sent to (a request) or the one site it is for (an
// answer, to != 0).
type stashed struct {
	frame []byte
	at    int64
	sent  []wire.SiteID
	to    wire.SiteID
}

// neighbourStash is a ring of the last stashSize frames kept. It belongs to
// the port's device loop; live counts its entries for the engine.
type neighbourStash struct {
	ring [stashSize]stashed
	next int
	live *atomic.Int32
}

// keep stashes a request read at now and sent to the sites in sent, or
// (to != 0) an answer for to, which has no route.
func (s *neighbourStash) keep(b []byte, now int64, sent []wire.SiteID, to wire.SiteID) {
	e := &s.ring[s.next]
	if e.frame == nil {
		s.live.Add(1)
	}
	e.frame = append(e.frame[:0], b...)
	e.at, e.sent, e.to = now, append(e.sent[:0], sent...), to
	s.next = (s.next + 1) % stashSize
}

// drop forgets entry e.
func (s *neighbourStash) drop(e *stashed) {
	e.frame = nil
	s.live.Add(-1)
}

// replay sends every live request to the sites of the current routes it
// has not reached, and every live answer whose site has a route now, and
// forgets what is older than stashAge or was answered.
func (g *egress) replay() {
	s := &g.stash
	r := g.e.routes.Load().r
	for i := range s.ring {
		e := &s.ring[i]
		switch {
		case e.frame == nil:
			continue
		case g.now-e.at >= stashAge:
			s.drop(e)
			continue
		case e.to != 0:
			if _, ok := r.Lookup(e.to); ok && g.floodTo(r, e.to, e.frame) {
				g.e.stats.FloodReplayed.Add(1)
				s.drop(e)
			}
			continue
		}
		for _, site := range r.Sites() {
			if site == g.e.self || slices.Contains(e.sent, site) {
				continue
			}
			if g.floodTo(r, site, e.frame) {
				e.sent = append(e.sent, site)
				g.e.stats.FloodReplayed.Add(1)
			}
		}
	}
}
