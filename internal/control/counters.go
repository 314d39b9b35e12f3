package control

import "github.com/detour-overlay/detour/internal/wire"

// Drop is a reason for dropping a received datagram.
type Drop int

// Drop reasons.
const (
	DropTruncated     Drop = iota // shorter than its format
	DropBadMagic                  // not a detour datagram
	DropBadVersion                // another protocol version
	DropMalformed                 // a field out of range
	DropUnknownType               // a type this node does not handle
	DropData                      // a data packet handed to the control plane
	DropMisdirected               // addressed to another site
	DropUnknownSender             // from a site that is not a member
	DropStaleReply                // a reply to an unknown, old or duplicate probe
	DropIDMismatch                // a record whose ID is not its name's
	DropIDCollision               // another site with this node's or a member's ID
	DropStale                     // an old incarnation or a site that left
	DropLeft                      // received after this node left
	numDrops
)

var dropNames = [numDrops]string{"truncated", "bad-magic", "bad-version", "malformed", "unknown-type", "data",
	"misdirected", "unknown-sender", "stale-reply", "id-mismatch", "id-collision", "stale", "after-leave"}

func (d Drop) String() string {
	if d >= 0 && d < numDrops {
		return dropNames[d]
	}
	return "unknown"
}

// TypeCount counts the datagrams and bytes of one message type.
type TypeCount struct {
	Packets, Bytes uint64
}

// Counters are the control plane's traffic and drop counters. Bytes are
// detour payload bytes, without UDP/IP headers (add 28 bytes per packet for
// IPv4, 48 for IPv6).
type Counters struct {
	In, Out  [8]TypeCount // indexed by wire.Type
	Dropped  [numDrops]uint64
	Switches uint64 // route changes made by this node
	// Refreshes counts recomputations of liveness, link state and routes,
	// and RefreshMicros their wall time in microseconds when the node
	// has a Stopwatch.
	Refreshes, RefreshMicros uint64
	// Roamed counts the members whose address followed the source of
	// their authenticated datagrams (Roam).
	Roamed uint64
	// TrainsSent counts the packet trains sent and ProbeBytes their
	// bytes, IP and UDP headers included (the probe budget's spending);
	// TrainPacketsIn counts the train packets received and TrainReports
	// the reports of this site's trains (throughput.go).
	TrainsSent, ProbeBytes       uint64
	TrainPacketsIn, TrainReports uint64
	// LateWakes counts the times the node found itself woken more than a
	// probe interval after the deadline it gave, and LateWakeMs how late
	// in milliseconds: time the node was not running, which its failure
	// detection did not count (see Node.resume).
	LateWakes, LateWakeMs uint64
	// InbandReportsSent counts the in-band reports this site sent, as the
	// first receiver of stamped data packets; InbandUnplaced the stamps
	// it could not place (no recent probe from their source); and
	// InbandSamples the samples of its own links it took from the
	// reports it received (inband.go).
	InbandReportsSent, InbandUnplaced, InbandSamples uint64
	// ConfirmProbes counts the probes sent at once to decide whether a
	// link got slower (confirm.go), beyond the regular ones.
	ConfirmProbes uint64
}

// DroppedByKind returns the non-zero drop counters by name.
func (c Counters) DroppedByKind() map[string]uint64 {
	out := map[string]uint64{}
	for i, v := range c.Dropped {
		if v != 0 {
			out[Drop(i).String()] = v
		}
	}
	return out
}

// TotalOut returns all control packets and bytes sent.
func (c Counters) TotalOut() TypeCount {
	var t TypeCount
	for _, x := range c.Out {
		t.Packets += x.Packets
		t.Bytes += x.Bytes
	}
	return t
}

// TotalIn returns all control packets and bytes received (dropped ones
// included).
func (c Counters) TotalIn() TypeCount {
	var t TypeCount
	for _, x := range c.In {
		t.Packets += x.Packets
		t.Bytes += x.Bytes
	}
	return t
}

func (c *Counters) countIn(t wire.Type, n int) {
	if int(t) < len(c.In) {
		c.In[t].Packets++
		c.In[t].Bytes += uint64(n)
	}
}

func (c *Counters) countOut(t wire.Type, n int) {
	if int(t) < len(c.Out) {
		c.Out[t].Packets++
		c.Out[t].Bytes += uint64(n)
	}
}
