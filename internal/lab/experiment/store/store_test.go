package store

import (
	"context"
	"testing"
	"time"
)

// counter answers every operation at once and counts them by kind.
type counter map[Op]int

func (c counter) Do(op Op) Sample { c[op]++; return Sample{Op: op} }

// Run times n operations of each kind after the warmup, numbered from 0
// within each kind, and returns only the timed ones.
func TestRunWarmsUpThenTimes(t *testing.T) {
	c := counter{}
	got := Run(context.Background(), c, []Op{Read, Write}, 3, 2)
	if len(got) != 6 || c[Read] != 5 || c[Write] != 5 {
		t.Fatalf("%d samples, %d reads, %d writes; want 6, 5, 5", len(got), c[Read], c[Write])
	}
	for i, s := range got {
		wantOp := Read
		if i >= 3 {
			wantOp = Write
		}
		if s.Op != wantOp || s.Seq != i%3 {
			t.Errorf("sample %d: %s #%d, want %s #%d", i, s.Op, s.Seq, wantOp, i%3)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := Run(ctx, counter{}, []Op{Read}, 3, 0); len(got) != 0 {
		t.Errorf("a cancelled run timed %d operations", len(got))
	}
}

// Alternate reads and writes in turn until its time is up.
func TestAlternateReadsAndWrites(t *testing.T) {
	var ops []Op
	Alternate(context.Background(), counter{}, time.Millisecond, func(s Sample) {
		if s.Seq != len(ops) {
			t.Fatalf("sample %d numbered %d", len(ops), s.Seq)
		}
		ops = append(ops, s.Op)
	})
	if len(ops) < 2 {
		t.Fatalf("%d operations in 1 ms", len(ops))
	}
	for i, op := range ops {
		if want := []Op{Read, Write}[i%2]; op != want {
			t.Fatalf("operation %d is %s, want %s", i, op, want)
		}
	}
}
