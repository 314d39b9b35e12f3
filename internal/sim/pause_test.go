package sim

import (
	"testing"
	"time"
)

// pausedAzure returns azure-16 after a minute of settling, with the
// number of route changes so far.
func pausedAzure(t *testing.T) (*Net, int) {
	t.Helper()
	n := FromScenario(load(t, "azure-16"), 11, nil)
	start(t, n)
	n.RunFor(time.Minute)
	return n, len(n.Changes)
}

// changesAt lists the route changes of one site (all sites if site is
// empty) since index from.
func changesAt(n *Net, site string, from int) []RouteChange {
	var out []RouteChange
	for _, c := range n.Changes[from:] {
		if site == "" || c.Site == site {
			out = append(out, c)
		}
	}
	return out
}

// TestPauseOfEverySiteChangesNoRoute: every gateway stopped at once (a
// virtual machine host pausing them all, or a lab whose emulator stalls
// with the agents), for three times its down time and then for longer
// than link state lives, hears nothing meanwhile; none of it was the
// links' doing, and no route changes.
func TestPauseOfEverySiteChangesNoRoute(t *testing.T) {
	n, from := pausedAzure(t)
	var late uint64
	for _, pause := range []time.Duration{1500 * ms, 5 * time.Second} {
		for _, s := range n.Sites() {
			n.Pause(s.Name, pause)
		}
		n.RunFor(20 * time.Second)
		if got := changesAt(n, "", from); len(got) > 0 {
			t.Fatalf("%d route changes after a pause of every site for %v, the first %+v", len(got), pause, got[0])
		}
		late += uint64((pause - 500*ms) / ms)
		for _, s := range n.Sites() {
			if c := s.Node.Counters(); c.LateWakeMs < late {
				t.Errorf("%s: %d late wakes, %d ms late in all, want most of the pauses (%d ms)", s.Name, c.LateWakes, c.LateWakeMs, late)
			}
		}
	}
}

// TestFailureDuringPauseIsFound: a link that fails while every site is
// paused is found down after the pause, within the down time a running
// site needs (plus a probe interval), and the route moves.
func TestFailureDuringPauseIsFound(t *testing.T) {
	n, from := pausedAzure(t)
	src, dst := "east-us", "central-us"
	if p := n.PathNames(src, dst); len(p) != 1 {
		t.Fatalf("%s→%s goes %v, want the direct path", src, dst, p)
	}
	for _, s := range n.Sites() {
		n.Pause(s.Name, 1500*ms)
	}
	n.RunFor(500 * ms)
	n.Partition(src, dst, true)
	resume := n.Now().Add(time.Second)
	n.RunFor(10 * time.Second)
	var moved time.Time
	for _, c := range changesAt(n, src, from) {
		if c.Dest == n.Site(dst).ID && len(c.From) == 1 {
			moved = c.At
			break
		}
	}
	_, down := n.Site(src).Node.DetectionTimes()
	probe, _ := n.Site(src).Node.DetectionTimes()
	switch {
	case moved.IsZero():
		t.Fatalf("%s never left the failed direct path to %s: %v", src, dst, n.PathNames(src, dst))
	case moved.Sub(resume) > down+probe:
		t.Errorf("%s left the failed path %v after its pause, want within %v", src, moved.Sub(resume), down+probe)
	}
	t.Logf("%s left the failed path %v after its pause (down time %v), now %v", src, moved.Sub(resume), down, n.PathNames(src, dst))
}
