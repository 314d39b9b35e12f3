package sim

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/wire"
)

// Traffic: data flows whose packets carry send stamps
// (wire.DataFlagStamped), so that the links they cross first are measured
// in-band as well as by probes. The simulator carries no frames; it
// models what the data path and the agent's shell do with the stamps: a
// flow sends a stamped packet every datagram interval on its source's
// current path, the packet reaches the path's first site after the
// link's delay (with its jitter, and lost as the link loses), that site's
// data path keeps at most one stamp per datapath.StampSpacing per source,
// and its shell hands them to the control node every InbandFeed.

// InbandFeed is how often a site's shell hands its stamps to the control
// node, as the agent does.
const InbandFeed = 20 * time.Millisecond

// flow is one stamped flow.
type flow struct {
	src, dst *Site
}

// stampBuf is what a site's data path holds of one source's stamps.
type stampBuf struct {
	rels []uint16
	next time.Time // global time of the next stamp it takes
}

// AddTraffic starts a flow of stamped data from src to dst, one packet
// every StampSpacing, from now on (for good). The first flow starts the
// feeds.
func (n *Net) AddTraffic(src, dst string) {
	if n.trafficRng == nil {
		n.trafficRng = rand.New(rand.NewPCG(n.seed, 0x7a11c))
		n.stamps = map[[2]int]*stampBuf{}
		n.schedule(n.now.Add(InbandFeed), n.feedInband)
	}
	f := &flow{src: n.Site(src), dst: n.Site(dst)}
	n.schedule(n.now, func() { n.sendStamped(f) })
}

// sendStamped sends one stamped packet of f on its source's current path
// and schedules the next.
func (n *Net) sendStamped(f *flow) {
	defer n.schedule(n.now.Add(datapath.StampSpacing), func() { n.sendStamped(f) })
	if !f.src.Alive {
		return
	}
	r, ok := f.src.Node.Table().Lookup(f.dst.ID)
	if !ok || len(r.Path) == 0 {
		return
	}
	first := n.siteByID(r.Path[0])
	if first == nil {
		return
	}
	l := n.links[[2]int{f.src.index, first.index}]
	if l.Down || n.trafficRng.Float64() < l.Loss {
		return
	}
	delay := l.Delay
	if l.Jitter > 0 {
		delay += time.Duration(n.trafficRng.Int64N(int64(l.Jitter)))
	}
	stamp := wire.StampOf(f.src.Local(n.now).UnixNano())
	from, to := f.src, first
	n.schedule(n.now.Add(delay), func() { n.takeStamp(from, to, stamp) })
}

// takeStamp is the data path of site to receiving a stamped packet from
// from now.
func (n *Net) takeStamp(from, to *Site, stamp uint16) {
	if !to.Alive {
		return
	}
	k := [2]int{to.index, from.index}
	b := n.stamps[k]
	if b == nil {
		b = &stampBuf{}
		n.stamps[k] = b
	}
	if n.now.Before(b.next) {
		return
	}
	b.next = n.now.Add(datapath.StampSpacing)
	b.rels = append(b.rels, wire.StampOf(to.Local(n.now).UnixNano())-stamp)
}

// feedInband hands every site's stamps to its control node, as the
// agent's shell does every InbandFeed.
func (n *Net) feedInband() {
	defer n.schedule(n.now.Add(InbandFeed), n.feedInband)
	keys := make([][2]int, 0, len(n.stamps))
	for k, b := range n.stamps {
		if len(b.rels) > 0 {
			keys = append(keys, k)
		}
	}
	// In a fixed order: the reports go out, and draw their jitter, in it.
	slices.SortFunc(keys, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, k := range keys {
		b := n.stamps[k]
		to, from := n.sites[k[0]], n.sites[k[1]]
		if to.Alive && n.now.After(to.pausedUntil) {
			to.Node.OnInband(to.Local(n.now), from.ID, b.rels)
			n.after(to)
		}
		b.rels = b.rels[:0]
	}
}

// schedule runs f at global time at.
func (n *Net) schedule(at time.Time, f func()) { n.push(&event{at: at, call: f}) }

func (n *Net) siteByID(id wire.SiteID) *Site {
	for _, s := range n.sites {
		if s.ID == id {
			return s
		}
	}
	return nil
}
