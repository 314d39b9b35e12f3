package datapath

import "sync/atomic"

// Stats are the data path's counters. Every dropped packet is counted under
// the reason it was dropped.
type Stats struct {
	FramesIn        atomic.Uint64 // frames read from local devices
	FramesOut       atomic.Uint64 // frames written to local devices
	PacketsSent     atomic.Uint64 // data packets sent on the underlay
	BytesSent       atomic.Uint64
	PacketsReceived atomic.Uint64 // datagrams read from the underlay
	BytesReceived   atomic.Uint64
	Relayed         atomic.Uint64 // data packets forwarded for other sites
	Flooded         atomic.Uint64 // frames sent to every site
	FloodReplayed   atomic.Uint64 // copies of stashed neighbour queries sent to sites reachable later
	FloodLimited    atomic.Uint64 // frames not flooded: over their network's flood_rate
	FloodLoopDrop   atomic.Uint64 // frames not flooded: looping (the same frame back again and again)
	Duplicated      atomic.Uint64 // copies sent on a backup path while the primary was in doubt
	ControlIn       atomic.Uint64 // control datagrams handed to the control plane
	MSSClamped      atomic.Uint64 // TCP SYNs whose MSS option was lowered
	TooBig          atomic.Uint64 // TCP segments too large for the underlay, answered with ICMP
	Shaped          atomic.Uint64 // device batches delayed by a rate limit
	Reordered       atomic.Uint64 // data packets that arrived after a later one from the same source
	SeqGaps         atomic.Uint64 // sequence numbers skipped (lost packets, unless they arrive later as reordered)
	Holds           atomic.Uint64 // switches to a shorter path that held packets back (flow_holds included)
	Held            atomic.Uint64 // packets held back during such switches
	HoldsLate       atomic.Uint64 // holds released more than 1 ms after their deadline
	IngressLate     atomic.Uint64 // underlay batches done more than 1 ms after the kernel received them
	KVFrames        atomic.Uint64 // frames from local hosts taken by the key router (per-pool counters are in the router's table)
	KVLocal         atomic.Uint64 // frames the key router wrote back to the local bridge
	KVDropped       atomic.Uint64 // frames from the overlay the key router refused to deliver

	// Flow classes (flows.go). Frames that are no TCP or UDP flow count
	// in the latency class.
	LatencyFrames  atomic.Uint64 // frames sent to a site in the latency class
	LatencyBytes   atomic.Uint64
	BulkFrames     atomic.Uint64 // frames of bulk flows
	BulkBytes      atomic.Uint64
	ClassChanges   atomic.Uint64 // flows that became bulk after they started
	FlowMoves      atomic.Uint64 // times a flow's packets went on another path than its previous packet's
	FlowHolds      atomic.Uint64 // of those, moves that held the flow's packets
	FlowRepaths    atomic.Uint64 // bulk flows whose path died or was withdrawn
	FlowsUntracked atomic.Uint64 // frames of flows that found the flow table's set full
	FlowReordered  atomic.Uint64 // frames delivered here after a later frame of the same flow and source
	flowsLatency   atomic.Int64  // live flows by class (see Flows)
	flowsBulk      atomic.Int64

	DropMalformed      atomic.Uint64 // unparsable datagrams or frames
	DropMisdirected    atomic.Uint64 // data packets whose current receiver is not this site
	DropNoRoute        atomic.Uint64 // no live route to the destination or next hop
	DropUnknownNetwork atomic.Uint64 // data for a network this site has not joined
	DropLocal          atomic.Uint64 // frames for a host behind this site's own bridge
	DropDevice         atomic.Uint64 // device write errors
	DropSend           atomic.Uint64 // underlay send errors
	HoldOverflows      atomic.Uint64 // holds ended early because their queue filled (maxHeld)
	DropCrypto         atomic.Uint64 // packets that failed sealing, authentication or the replay check
	DropDuplicate      atomic.Uint64 // second copies of a frame (sent on two paths) and packets too old to tell

	// Peers counts the data received per previous hop (peerstats.go).
	Peers PeerStats
	// BulkMoves names the destination of each flow that became bulk
	// after it started (each ClassChanges), for the router
	// (routing.Router.BulkMoved).
	BulkMoves SiteEvents
}

// Flows returns how many flows of each class are live, as of the last
// sweep of the flow tables (at most a second old while frames flow).
func (s *Stats) Flows() (latency, bulk int64) { return s.flowsLatency.Load(), s.flowsBulk.Load() }

// flowEnded counts a flow of the given class out of the live ones.
func (s *Stats) flowEnded(bulk bool) {
	if bulk {
		s.flowsBulk.Add(-1)
	} else {
		s.flowsLatency.Add(-1)
	}
}

// Snapshot returns the counters by name, for the API and metrics.
func (s *Stats) Snapshot() map[string]uint64 {
	return map[string]uint64{
		"frames_in":            s.FramesIn.Load(),
		"frames_out":           s.FramesOut.Load(),
		"packets_sent":         s.PacketsSent.Load(),
		"bytes_sent":           s.BytesSent.Load(),
		"packets_received":     s.PacketsReceived.Load(),
		"bytes_received":       s.BytesReceived.Load(),
		"relayed":              s.Relayed.Load(),
		"flooded":              s.Flooded.Load(),
		"flood_replayed":       s.FloodReplayed.Load(),
		"flood_limited":        s.FloodLimited.Load(),
		"flood_loop_dropped":   s.FloodLoopDrop.Load(),
		"duplicated":           s.Duplicated.Load(),
		"control_in":           s.ControlIn.Load(),
		"mss_clamped":          s.MSSClamped.Load(),
		"icmp_too_big":         s.TooBig.Load(),
		"shaped":               s.Shaped.Load(),
		"reordered":            s.Reordered.Load(),
		"seq_gaps":             s.SeqGaps.Load(),
		"holds":                s.Holds.Load(),
		"held":                 s.Held.Load(),
		"holds_late":           s.HoldsLate.Load(),
		"ingress_late":         s.IngressLate.Load(),
		"kv_frames":            s.KVFrames.Load(),
		"kv_local":             s.KVLocal.Load(),
		"kv_dropped":           s.KVDropped.Load(),
		"latency_frames":       s.LatencyFrames.Load(),
		"latency_bytes":        s.LatencyBytes.Load(),
		"bulk_frames":          s.BulkFrames.Load(),
		"bulk_bytes":           s.BulkBytes.Load(),
		"class_changes":        s.ClassChanges.Load(),
		"flow_moves":           s.FlowMoves.Load(),
		"flow_holds":           s.FlowHolds.Load(),
		"flow_repaths":         s.FlowRepaths.Load(),
		"flows_untracked":      s.FlowsUntracked.Load(),
		"flow_reordered":       s.FlowReordered.Load(),
		"drop_malformed":       s.DropMalformed.Load(),
		"drop_misdirected":     s.DropMisdirected.Load(),
		"drop_no_route":        s.DropNoRoute.Load(),
		"drop_unknown_network": s.DropUnknownNetwork.Load(),
		"drop_local":           s.DropLocal.Load(),
		"drop_device":          s.DropDevice.Load(),
		"drop_send":            s.DropSend.Load(),
		"hold_overflows":       s.HoldOverflows.Load(),
		"drop_crypto":          s.DropCrypto.Load(),
		"drop_duplicate":       s.DropDuplicate.Load(),
	}
}
