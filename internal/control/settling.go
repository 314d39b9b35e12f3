package control

import (
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// linkAges remembers since when each link of the matrix has been up, so
// that routes over a link whose estimates are still filling their window
// converge as fast as the estimates allow, while routes over a link that
// flaps stay damped: a link that comes back up less than flapWindow after
// it went down is not settling.
type linkAges struct {
	settle     time.Duration // how long a link settles after coming up
	flapWindow time.Duration
	links      map[[2]wire.SiteID]*linkAge
}

type linkAge struct {
	upSince  time.Time // zero while down
	downAt   time.Time
	flapping bool // it came up within flapWindow of going down
	seen     bool // up in the current matrix
}

func newLinkAges(settle, flapWindow time.Duration) *linkAges {
	return &linkAges{settle: settle, flapWindow: flapWindow, links: map[[2]wire.SiteID]*linkAge{}}
}

// up records that from → to is up in the matrix built at now and reports
// whether it is settling.
func (a *linkAges) up(now time.Time, from, to wire.SiteID) bool {
	k := [2]wire.SiteID{from, to}
	l := a.links[k]
	if l == nil {
		l = &linkAge{}
		a.links[k] = l
	}
	if l.upSince.IsZero() {
		l.upSince = now
		l.flapping = !l.downAt.IsZero() && now.Sub(l.downAt) < a.flapWindow
	}
	l.seen = true
	return !l.flapping && now.Sub(l.upSince) < a.settle
}

// sweep marks the links not seen up since the last sweep as down at now,
// and forgets those down for longer than the flap window.
func (a *linkAges) sweep(now time.Time) {
	for k, l := range a.links {
		switch {
		case l.seen:
			l.seen = false
		case !l.upSince.IsZero():
			l.upSince, l.downAt = time.Time{}, now
		case now.Sub(l.downAt) >= a.flapWindow:
			delete(a.links, k)
		}
	}
}
