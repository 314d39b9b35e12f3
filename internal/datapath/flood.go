package datapath

import (
	"sync/atomic"
)

// Storm protection for flooded frames (broadcast, multicast and unknown
// unicast read from a site's device), which cost one copy per site: a rate
// limit per network, and a loop detector.
//
// The loop detector looks for the symptom every L2 loop through the
// overlay has, whatever its topology (a second bridge between two sites'
// segments, a cable between two ports of one bridge, a hypervisor
// reflecting frames): the same flooded frame, byte for byte, is read from
// the device again and again, each time within loopGap of the last.
// Bridges do not change a frame and Ethernet has no hop limit, so a
// looping frame comes back unchanged once per trip round the loop (under
// a millisecond on a LAN, at most a few hundred on a WAN path), forever.
// Hosts do repeat identical broadcasts (ARP retries, arping, gratuitous
// ARP), but a second or more apart, or a few times in a burst; a frame
// seen loopRepeats times in a row with gaps under loopGap is taken for a
// loop. Its later copies are not flooded (the loop is cut at this site,
// the frame dies), and the network is reported as looping until loopHold
// after the last copy. While it is, the loop is still there (the second
// path has not gone), so any frame that comes back even once within
// loopGap is cut at its second copy rather than its eighth. Frames are told apart by a 64-bit FNV-1a hash of
// their first loopHashBytes bytes and their length, in a table of
// loopSlots entries indexed by the hash: a collision can only reset a
// count, never invent a loop.

const (
	// DefaultFloodRate is a network's flooded frames per second when its
	// configuration gives none: far above what ARP, ND, DHCP and mDNS
	// need, far below what saturates a gateway.
	DefaultFloodRate = 2000
	loopGap          = 500e6 // ns
	loopRepeats      = 8
	loopHold         = 10e9 // ns
	loopSlots        = 256
	loopHashBytes    = 128
)

// FloodGuard limits the frames a network floods and detects loops. Its
// rate may be changed at any time (SetRate); its bucket and loop table are
// used by the network's device loop alone.
type FloodGuard struct {
	rate atomic.Int64 // frames per second; 0: DefaultFloodRate

	tokens float64
	last   int64 // when tokens were counted (monotonic ns)
	slots  [loopSlots]loopSlot

	// What the agent reads: the last loop seen (monotonic ns) and its
	// source address, and how many loops began.
	loopLast  atomic.Int64
	loopSrc   atomic.Uint64
	loopCount atomic.Uint64
}

type loopSlot struct {
	hash  uint64
	seen  int64
	count uint32
}

// NewFloodGuard returns a guard allowing rate flooded frames per second
// (0: DefaultFloodRate).
func NewFloodGuard(rate int) *FloodGuard {
	g := &FloodGuard{}
	g.SetRate(rate)
	return g
}

// SetRate changes the rate (0: DefaultFloodRate).
func (g *FloodGuard) SetRate(rate int) { g.rate.Store(int64(rate)) }

// Rate is the rate in force.
func (g *FloodGuard) Rate() int {
	if r := g.rate.Load(); r > 0 {
		return int(r)
	}
	return DefaultFloodRate
}

// LoopReport says whether a loop was seen within loopHold of now, how many
// loops began so far, and the source address of the last looping frame.
func (g *FloodGuard) LoopReport(now int64) (active bool, count uint64, src [6]byte) {
	last := g.loopLast.Load()
	s := g.loopSrc.Load()
	for i := range src {
		src[i] = byte(s >> (8 * (5 - i)))
	}
	return last != 0 && now-last < loopHold, g.loopCount.Load(), src
}

// verdict is what the guard decides for one flooded frame.
type verdict int

const (
	floodOK verdict = iota
	floodLimited
	floodLoop
)

// admit decides whether a frame read at now may be flooded.
func (g *FloodGuard) admit(frame []byte, now int64) verdict {
	if g.loop(frame, now) {
		return floodLoop
	}
	rate := float64(g.Rate())
	burst := rate/10 + 16 // a tenth of a second's worth
	if g.last == 0 {
		g.tokens = burst
	} else if dt := now - g.last; dt > 0 {
		g.tokens = min(burst, g.tokens+rate*float64(dt)/1e9)
	}
	g.last = now
	if g.tokens < 1 {
		return floodLimited
	}
	g.tokens--
	return floodOK
}

// loop records a flooded frame and reports whether it is looping.
func (g *FloodGuard) loop(frame []byte, now int64) bool {
	h := frameHash(frame)
	s := &g.slots[h%loopSlots]
	if s.hash != h || now-s.seen > loopGap {
		*s = loopSlot{hash: h, seen: now, count: 1}
		return false
	}
	s.seen = now
	s.count++
	last := g.loopLast.Load()
	looping := last != 0 && now-last <= loopHold
	if s.count < loopRepeats && !looping {
		return false
	}
	if !looping {
		g.loopCount.Add(1) // a new loop, not the same one going on
	}
	g.loopLast.Store(now)
	var src uint64
	for _, b := range frame[6:12] {
		src = src<<8 | uint64(b)
	}
	g.loopSrc.Store(src)
	return true
}

// frameHash is FNV-1a over the frame's length and first loopHashBytes.
func frameHash(frame []byte) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	n := len(frame)
	for i := 0; i < 4; i++ {
		h ^= uint64(byte(n >> (8 * i)))
		h *= prime
	}
	for _, b := range frame[:min(n, loopHashBytes)] {
		h ^= uint64(b)
		h *= prime
	}
	return h
}

// floodAllowed applies the port's guard to a frame about to be flooded,
// counting what it stops.
func (g *egress) floodAllowed(frame []byte) bool {
	fg := g.port.Flood
	if fg == nil {
		return true
	}
	switch fg.admit(frame, g.now) {
	case floodLimited:
		g.e.stats.FloodLimited.Add(1)
		return false
	case floodLoop:
		g.e.stats.FloodLoopDrop.Add(1)
		return false
	}
	return true
}
