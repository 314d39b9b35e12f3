package session

import "testing"

func TestReplayWindowInOrderAndDuplicate(t *testing.T) {
	var w replayWindow
	for c := uint64(0); c < 100000; c++ {
		if !w.fresh(c) || !w.accept(c) {
			t.Fatalf("in-order counter %d rejected", c)
		}
		if w.fresh(c) || w.accept(c) {
			t.Fatalf("duplicate counter %d accepted", c)
		}
	}
}

func TestReplayWindowReorderedWithinWindow(t *testing.T) {
	var w replayWindow
	if !w.accept(50000) {
		t.Fatal("first counter rejected")
	}
	// Everything down to 50000-WindowSize arrives late, in reverse: all new.
	for c := uint64(49999); c >= 50000-WindowSize; c-- {
		if !w.accept(c) {
			t.Fatalf("reordered counter %d (%d behind) rejected", c, 50000-c)
		}
	}
	for c := uint64(50000 - WindowSize); c <= 50000; c++ {
		if w.accept(c) {
			t.Fatalf("second copy of %d accepted", c)
		}
	}
}

func TestReplayWindowTooOld(t *testing.T) {
	var w replayWindow
	w.accept(100000)
	if w.fresh(100000-WindowSize-1) || w.accept(100000-WindowSize-1) {
		t.Fatal("counter just outside the window accepted")
	}
	if !w.accept(100000 - WindowSize) {
		t.Fatal("oldest counter inside the window rejected")
	}
	if WindowSize < 8000 {
		t.Fatalf("window %d smaller than 8000, what wireguard-go tolerates", WindowSize)
	}
}

// After a jump of more than the whole ring, stale bits must not make new
// counters look like replays.
func TestReplayWindowJumpClearsRing(t *testing.T) {
	var w replayWindow
	for c := uint64(0); c < 64*ringBlocks; c++ {
		w.accept(c)
	}
	base := uint64(1 << 20)
	for c := base; c < base+64*ringBlocks; c++ {
		if !w.accept(c) {
			t.Fatalf("counter %d after a jump rejected", c)
		}
	}
	if w.accept(RejectAfterMessages) {
		t.Fatal("counter at the reject limit accepted")
	}
}
