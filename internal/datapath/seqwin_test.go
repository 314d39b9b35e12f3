package datapath

import "testing"

func TestSeqWindow(t *testing.T) {
	var w seqWindow
	top, gap := uint32(15+seqWindowBits+10), uint32(seqResetGap)
	restarted := top - gap // wraps around
	steps := []struct {
		seq     uint32
		verdict seqVerdict
		skipped uint32
	}{
		{10, seqInOrder, 0},
		{11, seqInOrder, 0},
		{11, seqDuplicate, 0},
		{14, seqInOrder, 2}, // 12 and 13 missing
		{12, seqReordered, 0},
		{12, seqDuplicate, 0},
		{13, seqReordered, 0},
		{15, seqInOrder, 0},
		{15 + seqWindowBits + 10, seqInOrder, seqWindowBits + 9},
		{16, seqDuplicate, 0},      // too old to tell: dropped
		{3, seqDuplicate, 0},       // likewise
		{restarted, seqInOrder, 0}, // far behind: the sender restarted
		{restarted + 1, seqInOrder, 0},
	}
	for i, s := range steps {
		v, skipped := w.check(s.seq)
		if v != s.verdict || skipped != s.skipped {
			t.Fatalf("step %d (seq %d): verdict %d skipped %d; want %d, %d", i, s.seq, v, skipped, s.verdict, s.skipped)
		}
	}
}

func TestSeqWindowWraps(t *testing.T) {
	var w seqWindow
	w.check(0xffffffff)
	if v, skipped := w.check(0); v != seqInOrder || skipped != 0 {
		t.Errorf("wrap to 0: verdict %d skipped %d", v, skipped)
	}
	if v, _ := w.check(0xffffffff); v != seqDuplicate {
		t.Errorf("number before the wrap not recognised as seen: %d", v)
	}
}

func BenchmarkSeqWindow(b *testing.B) {
	var w seqWindow
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w.check(uint32(i))
	}
}
