package control

import "github.com/detour-overlay/detour/internal/wire"

// The build functions construct every message this node sends, so that a
// later authentication layer has one place to wrap.

func buildProbe(self, to wire.SiteID, seq uint32, stamp int64) []byte {
	return wire.AppendProbe(nil, &wire.Probe{Sender: self, Receiver: to, Seq: seq, SendTime: stamp})
}

func buildProbeReply(self wire.SiteID, p *wire.Probe, recv, send int64, received uint32) []byte {
	return wire.AppendProbeReply(nil, &wire.ProbeReply{Sender: self, Receiver: p.Sender, Seq: p.Seq,
		ProbeSendTime: p.SendTime, ProbeRecvTime: recv, ReplySendTime: send, HasReceived: true, Received: received})
}

func buildLinkState(ls *wire.LinkState) ([]byte, error) { return wire.AppendLinkState(nil, ls) }

func (n *Node) buildHello(flags uint8) []byte {
	rec := n.selfRecord()
	b, err := wire.AppendHello(nil, &rec, flags)
	if err != nil {
		panic("control: own hello does not encode: " + err.Error()) // Validate guarantees it
	}
	return b
}

func buildMembers(self wire.SiteID, recs []wire.Member) ([]byte, error) {
	return wire.AppendMembers(nil, self, recs)
}

func buildLeave(self wire.SiteID, inc uint64) []byte {
	return wire.AppendLeave(nil, &wire.Leave{Sender: self, Incarnation: inc})
}
