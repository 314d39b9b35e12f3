package session

import "testing"

func TestReplayWindowInOrderAndDuplicate(t *testing.T) {
	var w replayWindow
	for c := uint64(0); c < 10000; c++ {
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
	if !w.accept(5000) {
		t.Fatal("first counter rejected")
	}
	// Everything down to 5000-WindowSize arrives late, in reverse: all new.
	for c := uint64(4999); c >= 5000-WindowSize; c-- {
		if !w.accept(c) {
			t.Fatalf("reordered counter %d (%d behind) rejected", c, 5000-c)
		}
	}
	for c := uint64(5000 - WindowSize); c <= 5000; c++ {
		if w.accept(c) {
			t.Fatalf("second copy of %d accepted", c)
		}
	}
}

func TestReplayWindowTooOld(t *testing.T) {
	var w replayWindow
	w.accept(10000)
	if w.fresh(10000-WindowSize-1) || w.accept(10000-WindowSize-1) {
		t.Fatal("counter just outside the window accepted")
	}
	if !w.accept(10000 - WindowSize) {
		t.Fatal("oldest counter inside the window rejected")
	}
	if WindowSize < 2048 {
		t.Fatalf("window %d smaller than 2048", WindowSize)
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
