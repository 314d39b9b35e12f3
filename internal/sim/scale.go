package sim

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/lab/topo"
	"github.com/detour-overlay/detour/internal/wire"
)

// FromTopology builds a network from a generated topology: one site per
// topology site, every site bootstrapping through the first, clock
// offsets drawn from ±offset and skews from ±skew, jitter on every link.
func FromTopology(t *topo.Topology, seed uint64, offset time.Duration, skew float64, jitter time.Duration, configure func(*control.Config)) *Net {
	n := New(seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x7070))
	for i, name := range t.Sites {
		var boot []netip.AddrPort
		if i > 0 {
			boot = []netip.AddrPort{AddrOf(0)}
		}
		off := time.Duration((2*rng.Float64() - 1) * float64(offset))
		s := n.AddSite(name, off, boot, configure)
		s.Skew = (2*rng.Float64() - 1) * skew
	}
	for i := range t.Sites {
		for j := range t.Sites {
			if i != j {
				n.links[[2]int{i, j}] = Link{Delay: t.Delay[i][j], Jitter: jitter}
			}
		}
	}
	return n
}

// UDPIPv4Overhead is what each datagram costs on the wire beyond its
// detour payload: the IPv4 and UDP headers.
const UDPIPv4Overhead = 28

// Traffic is the control traffic the sites sent over a window, on the
// wire (payload and UDP/IPv4 headers).
type Traffic struct {
	// MeanKbit and MaxKbit are kbit/s per site: the mean over sites and
	// the largest site.
	MeanKbit, MaxKbit float64
	// ByType is the mean kbit/s per site by message type.
	ByType map[string]float64
	// Datagrams is the mean number of datagrams per second per site.
	Datagrams float64
}

// trafficSnap is every site's counters at one instant.
type trafficSnap map[string][8]control.TypeCount

func (n *Net) snapTraffic() trafficSnap {
	m := trafficSnap{}
	for _, s := range n.sites {
		if s.Node != nil {
			m[s.Name] = s.Node.Counters().Out
		}
	}
	return m
}

// trafficSince returns the control traffic sent between first and now,
// window long, by the sites alive now.
func (n *Net) trafficSince(first trafficSnap, window time.Duration) Traffic {
	last := n.snapTraffic()
	tr := Traffic{ByType: map[string]float64{}}
	sites := 0
	for _, s := range n.sites {
		if !s.Alive {
			continue
		}
		sites++
	}
	for _, s := range n.sites {
		l, ok := last[s.Name]
		if !s.Alive || !ok {
			continue
		}
		f := first[s.Name]
		site := 0.0
		for i := range l {
			pk := l[i].Packets - f[i].Packets
			b := float64(l[i].Bytes-f[i].Bytes+UDPIPv4Overhead*pk) * 8 / 1000 / window.Seconds()
			if b > 0 {
				tr.ByType[wire.Type(i).String()] += b / float64(sites)
			}
			tr.Datagrams += float64(pk) / window.Seconds() / float64(sites)
			site += b
		}
		tr.MeanKbit += site / float64(sites)
		tr.MaxKbit = max(tr.MaxKbit, site)
	}
	return tr
}

// Oracle is every ordered pair's chosen path against the offline optimum.
type Oracle struct {
	Pairs, Relayed, Outside int
	// Worst describes the pair farthest above its optimum (inside or
	// outside the bound).
	Worst string
	// Details describes each pair outside the bound (at most 20).
	Details []string
}

// CheckOracle compares every live site's path to every other live site
// with the lowest true delay over at most h links between live sites: a
// pair is outside the bound when its path's true delay exceeds the
// optimum by more than max(0.5 ms, 2 %), or it has no usable route.
func (n *Net) CheckOracle(h int) Oracle {
	var live []*Site
	for _, s := range n.sites {
		if s.Alive {
			live = append(live, s)
		}
	}
	k := len(live)
	const inf = time.Duration(1 << 62)
	d := make([]time.Duration, k*k)
	for i, a := range live {
		for j, b := range live {
			d[i*k+j] = inf
			if l, ok := n.links[[2]int{a.index, b.index}]; ok && i != j && !l.Down {
				d[i*k+j] = l.Mean()
			}
		}
	}
	pos := map[wire.SiteID]int{}
	for i, s := range live {
		pos[s.ID] = i
	}
	var o Oracle
	var worst time.Duration = -1
	dist, next := make([]time.Duration, k), make([]time.Duration, k)
	for i, a := range live {
		for v := range dist {
			dist[v] = inf
		}
		dist[i] = 0
		for range h {
			copy(next, dist)
			for u := range k {
				if dist[u] == inf {
					continue
				}
				row := d[u*k : (u+1)*k]
				for v, w := range row {
					if w != inf && dist[u]+w < next[v] {
						next[v] = dist[u] + w
					}
				}
			}
			dist, next = next, dist
		}
		table := a.Node.Table()
		for j, b := range live {
			if i == j {
				continue
			}
			o.Pairs++
			r, ok := table.Lookup(b.ID)
			var got time.Duration
			usable := ok && len(r.Path) > 0
			if usable {
				prev := i
				for _, id := range r.Path {
					q, ok := pos[id]
					if !ok || d[prev*k+q] == inf {
						usable = false
						break
					}
					got += d[prev*k+q]
					prev = q
				}
			}
			if !usable {
				o.Outside++
				o.detail("%s→%s: no usable route", a.Name, b.Name)
				continue
			}
			if len(r.Path) > 1 {
				o.Relayed++
			}
			best := dist[j]
			excess := got - best
			if excess > max(500*time.Microsecond, best/50) {
				o.Outside++
				o.detail("%s→%s: path %v true %v, best %v", a.Name, b.Name, n.names(r.Path), got, best)
			}
			if excess > worst {
				worst = excess
				o.Worst = fmt.Sprintf("%s→%s %v above the optimum %v", a.Name, b.Name, excess, best)
			}
		}
	}
	return o
}

func (o *Oracle) detail(format string, args ...any) {
	if len(o.Details) < 20 {
		o.Details = append(o.Details, fmt.Sprintf(format, args...))
	}
}

// Durations summarises a set of measured times.
type Durations struct {
	Count         int     `json:"count"`
	P50, P95, Max float64 `json:"-"`
	// In milliseconds, for JSON.
	P50ms float64 `json:"p50_ms"`
	P95ms float64 `json:"p95_ms"`
	MaxMs float64 `json:"max_ms"`
	// Missed counts the cases not done within the time allowed.
	Missed int `json:"missed"`
}

func summarise(ds []time.Duration, missed int) Durations {
	s := Durations{Count: len(ds), Missed: missed}
	if len(ds) == 0 {
		return s
	}
	slices.Sort(ds)
	q := func(p float64) float64 {
		i := int(p*float64(len(ds)-1) + 0.5)
		return float64(ds[i].Microseconds()) / 1000
	}
	s.P50ms, s.P95ms, s.MaxMs = q(0.5), q(0.95), q(1)
	return s
}

// busiestRelay returns the live site that relays the most routes of
// other sites, with the routes (source, destination) it relays.
func (n *Net) busiestRelay() (*Site, [][2]*Site) {
	byID := map[wire.SiteID]*Site{}
	for _, s := range n.sites {
		byID[s.ID] = s
	}
	count := map[wire.SiteID][][2]*Site{}
	for _, s := range n.sites {
		if !s.Alive {
			continue
		}
		for _, r := range s.Node.Table().Routes() {
			for _, hop := range r.Path[:max(len(r.Path)-1, 0)] {
				count[hop] = append(count[hop], [2]*Site{s, byID[r.Dest]})
			}
		}
	}
	var best wire.SiteID
	ids := make([]wire.SiteID, 0, len(count))
	for id := range count {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		if len(count[id]) > len(count[best]) {
			best = id
		}
	}
	if best == 0 {
		return nil, nil
	}
	return byID[best], count[best]
}

// KillRelay kills the site that relays the most routes and measures, for
// every route it relayed, how long until a frame sent on it is carried on
// a path avoiding the dead site (the route's path or its backup), up to
// limit.
func (n *Net) KillRelay(limit time.Duration) (string, Durations) {
	relay, pairs := n.busiestRelay()
	if relay == nil {
		return "", Durations{}
	}
	n.Kill(relay.Name)
	at := n.Now()
	done := make([]bool, len(pairs))
	var times []time.Duration
	check := func() bool {
		for i, p := range pairs {
			if done[i] || p[1] == nil {
				continue
			}
			r, ok := p[0].Node.Table().Lookup(p[1].ID)
			if ok && (!slices.Contains(r.Path, relay.ID) || (len(r.Backup) > 0 && !slices.Contains(r.Backup, relay.ID))) {
				done[i] = true
				times = append(times, n.Now().Sub(at))
			}
		}
		return len(times) == len(pairs)
	}
	n.stepUntil(at.Add(limit), check)
	return relay.Name, summarise(times, len(pairs)-len(times))
}

// SlowLinks makes up to k links that carry a direct route slower by
// extra (chosen at random among those with a relayed path that then
// wins by at least 5 ms), and measures how long until each route leaves
// its link, up to limit: from the moment the link slows, and beyond the
// slowed link's new round trip (its new mean delay and the way back's),
// the soonest that any measurement taken at the far end can tell the
// source. With busy, each chosen route carries a flow of stamped data
// (AddTraffic) for busyWarm before its link slows, so that the link is
// measured in-band as well.
func (n *Net) SlowLinks(k int, extra, limit time.Duration, seed uint64, busy bool) (fromOnset, beyondRTT Durations) {
	rng := rand.New(rand.NewPCG(seed, seed^0x510))
	type pick struct{ a, b *Site }
	var cands []pick
	for _, a := range n.sites {
		if !a.Alive {
			continue
		}
		for _, r := range a.Node.Table().Routes() {
			if len(r.Path) == 1 {
				for _, b := range n.sites {
					if b.ID == r.Dest && b.Alive {
						cands = append(cands, pick{a, b})
					}
				}
			}
		}
	}
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	var chosen []pick
	used := map[*Site]bool{}
	for _, c := range cands {
		if len(chosen) == k {
			break
		}
		if used[c.a] || used[c.b] {
			continue
		}
		l := n.links[[2]int{c.a.index, c.b.index}]
		// The best relayed path must win by 5 ms once the link is slower.
		alt := time.Duration(1 << 62)
		for _, m := range n.sites {
			if m != c.a && m != c.b && m.Alive {
				alt = min(alt, n.links[[2]int{c.a.index, m.index}].Delay+n.links[[2]int{m.index, c.b.index}].Delay)
			}
		}
		if alt+5*time.Millisecond > l.Delay+extra {
			continue
		}
		used[c.a], used[c.b] = true, true
		chosen = append(chosen, c)
	}
	if busy {
		for _, c := range chosen {
			n.AddTraffic(c.a.Name, c.b.Name)
		}
		n.RunFor(busyWarm)
	}
	for _, c := range chosen {
		l := n.links[[2]int{c.a.index, c.b.index}]
		l.Delay += extra
		n.links[[2]int{c.a.index, c.b.index}] = l
	}
	at := n.Now()
	done := make([]bool, len(chosen))
	var times, beyond []time.Duration
	n.stepUntil(at.Add(limit), func() bool {
		for i, c := range chosen {
			if done[i] {
				continue
			}
			if r, ok := c.a.Node.Table().Lookup(c.b.ID); ok && !(len(r.Path) == 1 && r.Path[0] == c.b.ID) {
				done[i] = true
				took := n.Now().Sub(at)
				rtt := n.links[[2]int{c.a.index, c.b.index}].Mean() + n.links[[2]int{c.b.index, c.a.index}].Mean()
				times, beyond = append(times, took), append(beyond, took-rtt)
			}
		}
		return len(times) == len(chosen)
	})
	missed := len(chosen) - len(times)
	return summarise(times, missed), summarise(beyond, missed)
}

// busyWarm is how long the flows of SlowLinks' busy links run before
// the links slow: the in-band filter's window.
const busyWarm = 2 * time.Second

// checkStep is how often stepUntil evaluates its condition: the
// resolution of the times KillRelay and SlowLinks measure.
const checkStep = 10 * time.Millisecond

// stepUntil runs until end, evaluating cond every checkStep (cheaper than
// after every event when cond looks at many routes); it stops early once
// cond holds.
func (n *Net) stepUntil(end time.Time, cond func() bool) {
	for n.now.Before(end) {
		n.RunUntil(minTime(n.now.Add(checkStep), end), nil)
		if cond() {
			return
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// names returns a path as site names.
func (n *Net) names(p []wire.SiteID) []string {
	out := make([]string, 0, len(p))
	for _, id := range p {
		out = append(out, n.nameOf(id))
	}
	return out
}
