package control

import (
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// In-band samples: a link that carries traffic is measured by its data
// packets as well as by its probes (docs/routing.md, "In-band samples").
// The data path of the link's far end records the send stamps of the
// packets it is the first receiver of (wire.DataFlagStamped); its shell
// hands them to OnInband every few milliseconds, which places each stamp
// difference on the scale of the link's probes and sends the samples back
// to the link's prober in in-band reports (wire.TypeInband). The prober
// adds them to the link's in-band filter (onInband, measure.Link's
// AddInband), whose estimate the link takes while it reads higher than
// the probes', so that a link whose queue fills under traffic is measured
// at the rate of its traffic, up to a sample every 5 ms, and is left
// within a few of them.

// inbandNear is how old the last probe from a member may be for its delay
// to place that member's stamps: the stamp differences wrap every 2.1 s,
// and the delay moves meanwhile by the clock skew (50 µs a second at 50
// ppm) and by the link's queue.
const inbandNear = 10 * time.Second

// OnInband takes the stamp differences rels (receive stamp minus send
// stamp, oldest first) of data packets from member from that this site
// was the first receiver of, read by the shell from the data path at now,
// and sends them to from as delays of its link to this site. Stamps that
// cannot be placed (no recent probe from the member) are dropped and
// counted.
func (n *Node) OnInband(now time.Time, from wire.SiteID, rels []uint16) {
	n.observe(now)
	m := n.members[from]
	if m == nil || m.state != StateAlive || m.probeShiftAt.IsZero() || now.Sub(m.probeShiftAt) > inbandNear {
		n.counters.InbandUnplaced += uint64(len(rels))
		return
	}
	r := &n.inbandOut
	r.Sender, r.Receiver = n.self, from
	for len(rels) > 0 {
		k := min(len(rels), wire.MaxInbandSamples)
		r.Count = k
		for i, rel := range rels[:k] {
			r.Samples[i] = wire.UnwrapStamp(m.probeShift, rel)
		}
		if b, err := wire.AppendInband(nil, r); err == nil {
			n.emit(m.addr, b)
			n.counters.InbandReportsSent++
		}
		rels = rels[k:]
	}
}

// onInband adds the samples of an in-band report from a member to this
// site's measurement of its link to that member.
func (n *Node) onInband(now time.Time, pkt []byte) error {
	r := &n.inbandIn
	if err := wire.ParseInband(pkt, r); err != nil {
		return err
	}
	m, err := n.sender(r.Sender, r.Receiver)
	if err != nil {
		return err
	}
	if !m.link.AddInband(now, r.Values()) {
		return nil // the link is down: its probes decide when it is up
	}
	n.counters.InbandSamples += uint64(r.Count)
	n.confirm(now, m)
	switch moved, rose := n.ownLinkChange(now, m); {
	case rose:
		n.refreshUrgent(now)
	case moved:
		n.refreshSoon(now)
	}
	return nil
}
