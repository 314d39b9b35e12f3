package routing

import (
	"slices"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// suspectEdge marks the link from → to of m suspect.
func suspectEdge(m *Matrix, from, to wire.SiteID) {
	e, _ := m.Edge(from, to)
	e.Suspect = true
	m.Set(from, to, e)
}

// TestSuspectRelayGetsBackup: on leon (1 → 3 via 2), a suspect link 1 → 2
// gives the route a backup that avoids site 2 without switching; a
// confirmed link clears it; a dead one switches to the backup at once.
func TestSuspectRelayGetsBackup(t *testing.T) {
	tn := leon()
	r, now := settled(t, tn)
	if !slices.Equal(path(r, 3), []wire.SiteID{2, 3}) {
		t.Fatalf("path %v, want via 2", path(r, 3))
	}
	m := tn.matrix()
	suspectEdge(m, 1, 2)
	if sw := r.Update(now.Add(ms), m, addrsOf(3)); len(sw) != 0 {
		t.Fatalf("switched on suspicion: %v", sw)
	}
	rt, _ := r.Table().Lookup(3)
	if !slices.Equal(rt.Backup, []wire.SiteID{3}) || rt.BackupFirstHop != addrsOf(3)[3] {
		t.Fatalf("backup %v via %v, want the direct path", rt.Backup, rt.BackupFirstHop)
	}
	if rt2, _ := r.Table().Lookup(2); !slices.Equal(rt2.Backup, []wire.SiteID{3, 2}) {
		t.Errorf("route to the suspect site itself: backup %v, want via 3 (only the link may be dying)", rt2.Backup)
	}
	r.Update(now.Add(2*ms), tn.matrix(), addrsOf(3))
	if rt, _ := r.Table().Lookup(3); len(rt.Backup) != 0 || !slices.Equal(rt.Path, []wire.SiteID{2, 3}) {
		t.Fatalf("after confirmation: path %v backup %v", rt.Path, rt.Backup)
	}
	r.Update(now.Add(3*ms), m, addrsOf(3))
	tn.d[0][1] = -1 // 1 → 2 declared down
	sw := r.Update(now.Add(4*ms), tn.matrix(), addrsOf(3))
	if rt, _ := r.Table().Lookup(3); len(sw) == 0 || !slices.Equal(rt.Path, []wire.SiteID{3}) || len(rt.Backup) != 0 {
		t.Fatalf("after the link died: path %v backup %v switches %v", rt.Path, rt.Backup, sw)
	}
}

// TestNoSwitchOntoSuspectPath: a better path whose link is suspect is not
// taken by hysteresis.
func TestNoSwitchOntoSuspectPath(t *testing.T) {
	tn := leon()
	tn.d[0][2] = 5 * ms // direct 1 → 3 best at first
	r, now := settled(t, tn)
	if !slices.Equal(path(r, 3), []wire.SiteID{3}) {
		t.Fatalf("path %v, want direct", path(r, 3))
	}
	tn.d[0][2] = 30 * ms // via 2 is now much better, but 1 → 2 is in doubt
	for i := 1; i <= 10; i++ {
		m := tn.matrix()
		suspectEdge(m, 1, 2)
		r.Update(now.Add(time.Duration(i)*100*ms), m, addrsOf(3))
	}
	if !slices.Equal(path(r, 3), []wire.SiteID{3}) {
		t.Fatalf("switched onto a suspect path: %v", path(r, 3))
	}
}
