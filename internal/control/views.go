package control

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/linkstate"
	"github.com/detour-overlay/detour/internal/measure"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// MemberView describes one member for the API.
type MemberView struct {
	Name        string
	ID          wire.SiteID
	Addr        netip.AddrPort
	State       string
	Since       time.Time
	LastHeard   time.Time
	Incarnation uint64
	Self        bool
}

// Members lists this site and every member it knows, sorted by name.
func (n *Node) Members() []MemberView {
	out := []MemberView{{Name: n.cfg.Name, ID: n.self, Addr: n.cfg.Advertise, State: "self", Since: n.started,
		Incarnation: n.inc, Self: true}}
	for _, m := range n.members {
		out = append(out, MemberView{Name: m.name, ID: m.id, Addr: m.addr, State: m.state.String(), Since: m.since,
			LastHeard: m.lastHeard, Incarnation: m.inc})
	}
	slices.SortFunc(out, func(a, b MemberView) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// MemberAddr returns the address of member id, whatever its state; ok is
// false for this site and for a site that is not a member. Unlike Members
// it neither copies nor sorts the member list.
func (n *Node) MemberAddr(id wire.SiteID) (addr netip.AddrPort, ok bool) {
	m, ok := n.members[id]
	if !ok {
		return netip.AddrPort{}, false
	}
	return m.addr, true
}

// AliveMembers returns the IDs of the members held alive, in no order.
func (n *Node) AliveMembers() []wire.SiteID {
	out := make([]wire.SiteID, 0, len(n.members))
	for id, m := range n.members {
		if m.state == StateAlive {
			out = append(out, id)
		}
	}
	return out
}

// LinkView is one directed link of the matrix.
type LinkView struct {
	From, To     string
	FromID, ToID wire.SiteID
	Up           bool
	// Delay is the offset-shifted one-way delay d + o(From) − o(To): only
	// differences between paths with the same endpoints are meaningful.
	Delay time.Duration
	// MeanDelay is the offset-shifted mean of the recent samples, queueing
	// included, for this site's own links (zero for others' links, which
	// link state does not carry).
	MeanDelay time.Duration
	// OneWayEstimate is RTT/2; the true one-way delay lies in (0, RTT)
	// depending on the pair's unknown asymmetry.
	OneWayEstimate time.Duration
	RTT            time.Duration
	// Loss is the link's loss (its origin's outgoing direction) with its
	// interval; ReturnLoss, for this site's own links only, is the loss
	// of the replies that come back over the reverse direction.
	Loss       routing.Loss
	ReturnLoss routing.Loss
	Jitter     time.Duration
	// Age is the age of the report carrying this link (local clock).
	Age time.Duration
	// Rate is the link's available throughput as its receiver (To)
	// reported it.
	Rate RateView
}

// Links returns the link matrix as this site holds it: every origin's
// reported outgoing links, sorted by names. (The API's history records
// it every second, so it is built in order rather than sorted: at 54
// sites sorting 2,862 views by their names was a third of its cost.)
func (n *Node) Links(now time.Time) []LinkView {
	names := map[wire.SiteID]string{}
	name := func(id wire.SiteID) string {
		s, ok := names[id]
		if !ok {
			s = n.NameOf(id)
			names[id] = s
		}
		return s
	}
	byName := func(a, b wire.SiteID) int { return cmp.Compare(name(a), name(b)) }
	origins := n.db.Origins()
	live := n.liveCount()
	z := n.chargeZ(live)
	rates := map[[2]wire.SiteID]RateView{} // a link's rate, from its receiver's report
	count := 0
	for _, id := range origins {
		o, _ := n.db.Origin(id)
		count += len(o.Links)
		for i := range o.Links {
			if l := &o.Links[i]; l.RateKnown() {
				rates[[2]wire.SiteID{l.To, l.From}] = RateView{Rate: l.RevRate, Kind: measure.RateKind(l.RevRateKind).String(), Age: l.RateAge(now)}
			}
		}
	}
	slices.SortFunc(origins, byName)
	out := make([]LinkView, 0, count)
	var order []int
	for _, id := range origins {
		o, _ := n.db.Origin(id)
		order = order[:0]
		for i := range o.Links {
			order = append(order, i)
		}
		slices.SortFunc(order, func(a, b int) int { return byName(o.Links[a].To, o.Links[b].To) })
		slots := n.originSlots(id, len(o.Links), live)
		for _, i := range order {
			v := n.linkView(now, o, &o.Links[i], rates, name)
			v.Loss = n.slotLoss(slots, i, &o.Links[i], z)
			out = append(out, v)
		}
	}
	return out
}

// linkView is one link of Links, all but its loss (the caller fills it in
// from the loss slots).
func (n *Node) linkView(now time.Time, o *linkstate.Origin, l *linkstate.Link, rates map[[2]wire.SiteID]RateView, name func(wire.SiteID) string) LinkView {
	v := LinkView{From: name(l.From), To: name(l.To), FromID: l.From, ToID: l.To, Up: l.Up,
		Delay: l.Delay, OneWayEstimate: l.RTT / 2, RTT: l.RTT, Jitter: l.Jitter,
		Age: now.Sub(o.Received), Rate: rates[[2]wire.SiteID{l.From, l.To}]}
	if m := n.members[l.To]; o.ID == n.self && m != nil {
		s := m.link.Stats(now)
		v.MeanDelay = s.MeanDelay
		r := s.ReturnLoss
		v.ReturnLoss = routing.Loss{Rate: r.Rate, Low: r.Low, High: r.High, Samples: r.Samples}
	}
	return v
}

// NameOf returns a site's name, or its hexadecimal ID if unknown.
func (n *Node) NameOf(id wire.SiteID) string {
	if id == n.self {
		return n.cfg.Name
	}
	if m := n.members[id]; m != nil {
		return m.name
	}
	return id.String()
}

// IDOf returns the ID of a known site (this one included) by name.
func (n *Node) IDOf(name string) (wire.SiteID, error) {
	id := wire.SiteIDFromName(name)
	if id == n.self && name == n.cfg.Name {
		return id, nil
	}
	if m := n.members[id]; m != nil && m.name == name {
		return id, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownSite, name)
}

// Names maps a path of IDs to names.
func (n *Node) Names(path []wire.SiteID) []string {
	out := make([]string, len(path))
	for i, id := range path {
		out[i] = n.NameOf(id)
	}
	return out
}

// TIVs lists the pairs whose best path of at most MaxHops links beats the
// direct link, by how much (exact, offset-free), largest saving first.
func (n *Node) TIVs() []routing.TIV {
	m := n.router.Matrix()
	if m == nil {
		return nil
	}
	cfg := n.router.Config()
	return routing.TIVs(m, cfg.Weights, cfg.MaxHops)
}

// Why explains the route to the named site.
func (n *Node) Why(now time.Time, site string) (routing.Explanation, error) {
	id, err := n.IDOf(site)
	if err != nil {
		return routing.Explanation{}, err
	}
	return n.router.Why(now, id), nil
}

// LastSwitch returns the last change of the route to dst; ok is false if
// there is no route to it.
func (n *Node) LastSwitch(dst wire.SiteID) (routing.Switch, bool) {
	return n.router.LastSwitch(dst)
}

// Counters returns a copy of the traffic and drop counters.
func (n *Node) Counters() Counters { return n.counters }

// Pin forces the path (site names, ending at dst) to dst.
func (n *Node) Pin(now time.Time, dst string, path []string) error {
	id, err := n.IDOf(dst)
	if err != nil {
		return err
	}
	ids := make([]wire.SiteID, len(path))
	for i, name := range path {
		if ids[i], err = n.IDOf(name); err != nil {
			return err
		}
	}
	if err := n.router.Pin(id, ids); err != nil {
		return err
	}
	n.route(now)
	return nil
}

// Unpin removes the pin of dst.
func (n *Node) Unpin(now time.Time, dst string) error {
	id, err := n.IDOf(dst)
	if err != nil {
		return err
	}
	n.router.Unpin(id)
	n.route(now)
	return nil
}

// ForbidRelay stops relaying through the named site.
func (n *Node) ForbidRelay(now time.Time, site string) error {
	id, err := n.IDOf(site)
	if err != nil {
		return err
	}
	n.router.ForbidRelay(id)
	n.route(now)
	return nil
}

// AllowRelay lifts ForbidRelay.
func (n *Node) AllowRelay(now time.Time, site string) error {
	id, err := n.IDOf(site)
	if err != nil {
		return err
	}
	n.router.AllowRelay(id)
	n.route(now)
	return nil
}

// Overrides returns the operator's pins (by destination name) and the
// sites forbidden as relays.
func (n *Node) Overrides() (pins map[string][]string, forbidden []string) {
	pins = map[string][]string{}
	for dst, p := range n.router.Pins() {
		pins[n.NameOf(dst)] = n.Names(p)
	}
	return pins, n.Names(n.router.Forbidden())
}
