package session

import "sync"

// The replay window is WireGuard's sliding bitmap (RFC 6479): a ring of
// 64-bit blocks, one bit per counter value, that slides forward as higher
// counters arrive. A counter is accepted once, and only if it is at most
// WindowSize below the highest counter seen.
const (
	blockBits  = 64
	ringBlocks = 128 // a power of two (as in wireguard-go)
	// WindowSize is how far behind the highest counter seen a packet may
	// arrive and still be accepted (reordering tolerance).
	WindowSize = (ringBlocks - 1) * blockBits // 8128
)

// replayWindow remembers which counters of one receive key were accepted.
// It is safe for concurrent use.
type replayWindow struct {
	mu   sync.Mutex
	last uint64 // highest counter accepted
	ring [ringBlocks]uint64
}

// fresh reports, without changing the window, whether ctr could be
// accepted. Callers use it to skip decrypting obvious replays.
func (w *replayWindow) fresh(ctr uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctr > w.last {
		return true
	}
	if w.last-ctr > WindowSize {
		return false
	}
	return w.ring[(ctr/blockBits)%ringBlocks]&(1<<(ctr%blockBits)) == 0
}

// accept records ctr and reports whether it was new and inside the window.
// Call it only after the packet was authenticated.
func (w *replayWindow) accept(ctr uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctr >= RejectAfterMessages {
		return false
	}
	block := ctr / blockBits
	if ctr > w.last {
		w.slide(block)
		w.last = ctr
	} else if w.last-ctr > WindowSize {
		return false
	}
	bit := uint64(1) << (ctr % blockBits)
	b := &w.ring[block%ringBlocks]
	if *b&bit != 0 {
		return false
	}
	*b |= bit
	return true
}

// slide clears the blocks between the current highest block and block.
func (w *replayWindow) slide(block uint64) {
	cur := w.last / blockBits
	diff := block - cur
	if diff > ringBlocks {
		diff = ringBlocks
	}
	for i := uint64(1); i <= diff; i++ {
		w.ring[(cur+i)%ringBlocks] = 0
	}
}
