package control

import "time"

// Confirmation probes. A link's estimate follows a rise once StepCount
// samples in a row read it (measure.Filter), so on probes alone a link
// whose queue fills is seen StepCount − 1 probe intervals after the first
// probe that crossed the queue came back: 200 ms at the full rate, over a
// second for a cold link of a large overlay. When a reply begins a rise
// (or leaves one undecided), or in-band samples begin one that the probes
// have not seen, the node sends the probes that decide it at once
// (measure.Link's Confirm), so the rise is confirmed or dismissed one
// round trip later, whatever the probe interval. A burst of spikes costs
// a few probes each; a node-wide token bucket bounds them to
// confirmRate a second (confirmBurst at once), for a site whose every
// link reads higher at the same moment (its own access link filling).
//
// The probes that decide a rise are sent at one moment, so they tell a
// lasting rise from a spike only if that moment is ordinary. Right after
// the node's own stall (see resume) it is not: whatever stalled with the
// node (its machine, the other processes on it) is catching up, and
// every reply that crossed the stall reads high at once. For
// confirmQuietAfterResume after a late wake the node sends none, and its
// filters decide on probes spaced by the probe interval, as without
// confirmations.
const (
	confirmRate             = 20
	confirmBurst            = 20
	confirmQuietAfterResume = time.Second
)

// confirm sends m the probes its link asks for after the reply or in-band
// samples just taken, as far as the bucket allows.
func (n *Node) confirm(now time.Time, m *member) {
	k := m.link.Confirm()
	if k == 0 || m.state != StateAlive {
		return
	}
	if !n.resumedAt.IsZero() && now.Sub(n.resumedAt) < confirmQuietAfterResume {
		return
	}
	if n.confirmAt.IsZero() {
		n.confirmTokens = confirmBurst
	} else {
		n.confirmTokens = min(confirmBurst, n.confirmTokens+now.Sub(n.confirmAt).Seconds()*confirmRate)
	}
	n.confirmAt = now
	k = min(k, int(n.confirmTokens))
	for range k {
		seq, stamp := m.link.Probe(now)
		n.emit(m.addr, buildProbe(n.self, m.id, seq, stamp))
	}
	n.confirmTokens -= float64(k)
	n.counters.ConfirmProbes += uint64(k)
}
