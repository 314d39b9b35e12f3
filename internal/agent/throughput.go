package agent

import (
	"fmt"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// The agent's part in estimating available throughput (docs/throughput.md):
// it feeds the data path's per-previous-hop byte counters to the control
// node every throughputFeed, and shows the rates and bulk paths in the
// API. Packet trains need nothing here: the node puts a train's packets
// in its outbox together and flush sends an outbox in one batch
// (sendmmsg), and received datagrams carry the kernel's receive time.

// throughputFeed is how often the passive counters are fed.
const throughputFeed = 100 * time.Millisecond

// feedThroughput hands the data bytes received from each previous hop to
// the control node. It runs on the control loop.
func (a *Agent) feedThroughput() {
	now := a.clock.Now()
	a.peerCounts = a.engine.Stats().Peers.Snapshot(a.peerCounts[:0])
	node := a.core.Control()
	for _, c := range a.peerCounts {
		node.OnDataBytes(now, c.Site, c.Bytes)
	}
}

// inbandFeed is how often the data path's in-band samples are fed: their
// part of the time a loaded link takes to be left.
const inbandFeed = 20 * time.Millisecond

// feedInband hands the send stamps of the data packets this site was the
// first receiver of to the control node, which sends them back to their
// sources as samples of their links (control.Node.OnInband), and the
// destinations of the flows that just became bulk (control.Node.
// OnBulkMoved). It runs on the control loop.
func (a *Agent) feedInband() {
	now := a.clock.Now()
	node := a.core.Control()
	a.engine.Stats().Peers.Stamps(func(site wire.SiteID, rels []uint16) {
		node.OnInband(now, site, rels)
	})
	a.engine.Stats().BulkMoves.Drain(func(dst wire.SiteID) {
		node.OnBulkMoved(now, dst)
	})
}

func rateKind(r control.RateView) string {
	if r.Rate <= 0 {
		return ""
	}
	return r.Kind
}

// bulkView adds the rate of r's path and its bulk path to v.
func (a *Agent) bulkView(r *routing.Route, v *api.Route) {
	node := a.core.Control()
	if rate, ok := node.PathRate(r.Path); ok {
		v.RateMbps = rate / 1e6
	}
	if b := r.Bulk; b != nil {
		v.Bulk = &api.BulkRoute{Path: node.Names(b.Path), RateMbps: b.Rate / 1e6,
			LatencyMs: ms(r.OneWayEstimate + b.Delay - r.Delay), ExtraMs: ms(b.Delay - r.Delay)}
	}
}

// whyBulk turns the router's explanation of a bulk path into the API's.
func (a *Agent) whyBulk(e routing.BulkExplanation) *api.WhyBulk {
	node := a.core.Control()
	w := &api.WhyBulk{Enabled: e.Enabled, Chosen: node.Names(e.Chosen), RateMbps: e.Rate / 1e6, PathRateMbps: e.PathRate / 1e6,
		BoundMs: ms(e.Bound), MinGain: e.MinGain, Reason: e.Reason}
	if len(w.Chosen) == 0 {
		w.Chosen = nil
	}
	for _, c := range e.Candidates {
		var notes []string
		if c.Latency {
			notes = append(notes, "latency path")
		}
		if c.Chosen {
			notes = append(notes, "bulk path")
		}
		if !c.WithinBound {
			notes = append(notes, fmt.Sprintf("beyond the %.1f ms bound", ms(e.Bound)))
		}
		bc := api.BulkCandidate{Path: node.Names(c.Path), RateMbps: c.Rate / 1e6, ExtraMs: ms(c.Extra),
			WithinBound: c.WithinBound, Note: strings.Join(notes, ", ")}
		for _, l := range c.Links {
			kind := ""
			if l.Rate > 0 {
				kind = control.RateKindName(l.Kind)
			}
			bc.Links = append(bc.Links, api.LinkRate{From: node.NameOf(l.From), To: node.NameOf(l.To), RateMbps: l.Rate / 1e6, Kind: kind})
		}
		w.Candidates = append(w.Candidates, bc)
	}
	return w
}
