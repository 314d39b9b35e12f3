package fdb

import (
	"testing"
	"time"
)

var (
	hostA = MAC{0x02, 0, 0, 0, 0, 0xa}
	bcast = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

func TestLearnLookupAgeMove(t *testing.T) {
	tb := New(time.Second)
	if _, ok := tb.Lookup(hostA, 0); ok {
		t.Fatal("empty table found an address")
	}
	if tb.Learn(hostA, 7, 0) {
		t.Error("first sighting reported as a move")
	}
	if s, ok := tb.Lookup(hostA, int64(500*time.Millisecond)); !ok || s != 7 {
		t.Fatalf("lookup = %v, %v; want 7", s, ok)
	}
	if !tb.Learn(hostA, 9, int64(600*time.Millisecond)) {
		t.Error("address seen at another site not reported as a move")
	}
	if s, _ := tb.Lookup(hostA, int64(700*time.Millisecond)); s != 9 || tb.Moves() != 1 {
		t.Fatalf("after move: site %v, moves %d", s, tb.Moves())
	}
	if _, ok := tb.Lookup(hostA, int64(1700*time.Millisecond)); ok {
		t.Error("entry did not age out")
	}
	if n := tb.Expire(int64(1700 * time.Millisecond)); n != 1 {
		t.Errorf("Expire removed %d, want 1", n)
	}
}

func TestGroupAddressesNotLearned(t *testing.T) {
	tb := New(time.Second)
	tb.Learn(bcast, 3, 0)
	if _, ok := tb.Lookup(bcast, 0); ok {
		t.Error("broadcast address was learned")
	}
}

func TestForgetSite(t *testing.T) {
	tb := New(time.Minute)
	tb.Learn(hostA, 4, 0)
	tb.Learn(MAC{2, 0, 0, 0, 0, 0xb}, 5, 0)
	if n := tb.ForgetSite(4); n != 1 {
		t.Fatalf("ForgetSite removed %d", n)
	}
	if len(tb.Snapshot(0)) != 1 {
		t.Fatalf("snapshot %v", tb.Snapshot(0))
	}
}

func BenchmarkLearnKnown(b *testing.B) {
	tb := New(time.Minute)
	tb.Learn(hostA, 4, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tb.Learn(hostA, 4, int64(i))
	}
}
