package datapath

import "github.com/detour-overlay/detour/internal/wire"

// Every data packet carries a sequence number per (source site, network,
// destination site). The destination keeps a sliding window of the numbers
// it has seen from each (source, network), which lets it drop the second
// copy of a frame sent on two paths while the first is in doubt, and count
// what reached it out of order or not at all: the evidence that a path
// switch disturbed nothing.

// seqWindowBits is how far behind the highest number a packet may arrive
// and still be accepted.
const seqWindowBits = 4096

// seqResetGap is how far behind the highest number a packet must be to be
// taken as a restarted sender rather than as a late one. Senders start
// their numbering at random, so a restarted one lands this far away (or
// ahead) with overwhelming probability; the agent also resets a source's
// windows when that site leaves or restarts.
const seqResetGap = 1 << 20

// seqWindow is the receive window of one (source, network).
type seqWindow struct {
	highest uint32
	started bool
	bits    [seqWindowBits / 64]uint64
}

// seqVerdict is what a window says of one packet.
type seqVerdict int

const (
	seqInOrder   seqVerdict = iota // the next number, or a jump forward
	seqReordered                   // an earlier number not seen before
	seqDuplicate                   // seen before, or too old to tell
)

func (w *seqWindow) bit(seq uint32) (*uint64, uint64) {
	i := seq % seqWindowBits
	return &w.bits[i/64], 1 << (i % 64)
}

// check records seq and returns its verdict and, for a jump forward, how
// many numbers it skipped (packets lost, or still to come out of order).
func (w *seqWindow) check(seq uint32) (seqVerdict, uint32) {
	if !w.started {
		w.started, w.highest = true, seq
		word, mask := w.bit(seq)
		*word |= mask
		return seqInOrder, 0
	}
	ahead := seq - w.highest // modulo 2^32
	switch {
	case ahead == 0:
		return seqDuplicate, 0
	case ahead < 1<<31:
		w.advance(seq)
		return seqInOrder, ahead - 1
	}
	behind := w.highest - seq
	if behind >= seqResetGap {
		*w = seqWindow{}
		return w.check(seq)
	}
	if behind >= seqWindowBits {
		return seqDuplicate, 0
	}
	word, mask := w.bit(seq)
	if *word&mask != 0 {
		return seqDuplicate, 0
	}
	*word |= mask
	return seqReordered, 0
}

// advance moves the window so that seq is the highest number, clearing the
// bits of the numbers it passes over.
func (w *seqWindow) advance(seq uint32) {
	if seq-w.highest >= seqWindowBits {
		w.bits = [seqWindowBits / 64]uint64{}
	} else {
		for n := w.highest + 1; n != seq; n++ {
			word, mask := w.bit(n)
			*word &^= mask
		}
	}
	w.highest = seq
	word, mask := w.bit(seq)
	*word |= mask
}

// flowKey names the sender of a sequence.
type flowKey struct {
	source  wire.SiteID
	network uint32
}
