package router

import (
	"encoding/binary"

	"github.com/detour-overlay/detour/internal/frame"
)

// Inbound is the scratch space of the loop that delivers frames from the
// overlay to the network's TAP device. It is not safe for concurrent use.
type Inbound struct {
	f frame.Frame
}

// Deliver looks at a frame arriving over the overlay for the network's
// TAP device and reports whether to write it there. It rewrites in place
// a request forwarded to a server of this site (the server's real MAC in
// place of the virtual one) and a server's reply to a client of this site
// (the source back to the virtual address and MAC). A request for a
// server whose MAC is unknown, or for a server that is not here, is
// dropped and counted.
func (in *Inbound) Deliver(t *Table, b []byte, now int64) bool {
	if len(b) < frame.EtherHeaderLen {
		return true
	}
	et := binary.BigEndian.Uint16(b[12:14])
	if et != frame.EtherTypeIPv4 && et != frame.EtherTypeVLAN {
		return true
	}
	f := &in.f
	if frame.Parse(b, f) != nil || f.V6 {
		return true
	}
	if f.Proto == frame.ProtoTCP {
		return in.tcpIngress(t, b, now)
	}
	if f.Proto != frame.ProtoUDP || f.Frag != frame.FragNone || f.End-f.L4 < frame.UDPHeaderLen {
		return true
	}
	ip := f.IPv4(b)
	dmac := frame.Dst(b)
	if dmac[0] == 0x02 && dmac[1] == 0x6b {
		if p := t.anyPoolByIP(be32b(dmac[2:6])); p != nil {
			return in.request(t, p, b)
		}
	}
	src, dst := be32b(ip.Src()), be32b(ip.Dst())
	u := frame.UDP(b[f.L4:f.End])
	sport, dport := u.SrcPort(), u.DstPort()
	var first *Pool
	var firstS *Server
	for _, p := range t.pools {
		s := p.server(src, sport)
		if s == nil {
			continue
		}
		if !t.inSubnet(dst) || !t.marked(dst, dport, now) {
			return true // a host talking to the server directly
		}
		if first == nil {
			first, firstS = p, s
		}
		if p.rep == nil {
			continue
		}
		// A replicated pool that awaits this reply: the pool the client
		// asked, even when the server is in several pools.
		fwd, matched := p.reply(s, dst, dport, b[f.L4+frame.UDPHeaderLen:f.End], now)
		if !matched {
			continue
		}
		if !fwd {
			s.replied(now)
			return false // another replica answered first
		}
		in.rewriteReply(p, s, b, now)
		return true
	}
	if first != nil {
		in.rewriteReply(first, firstS, b, now)
	}
	return true
}

// rewriteReply gives server s's reply b the source of pool p's virtual
// address and MAC.
func (in *Inbound) rewriteReply(p *Pool, s *Server, b []byte, now int64) {
	if in.f.RewriteSrc(b, p.vip[:], p.port) {
		copy(frame.Src(b), p.mac[:])
		s.replied(now)
		p.Stats.Replies.Add(1)
	}
}

// request gives a request forwarded to a server of this site the server's
// MAC.
func (in *Inbound) request(t *Table, p *Pool, b []byte) bool {
	f := &in.f
	ip := f.IPv4(b)
	dst := be32b(ip.Dst())
	dport := binary.BigEndian.Uint16(b[f.L4+2:])
	for _, q := range t.pools {
		if q.vip32 != p.vip32 {
			continue
		}
		s := q.server(dst, dport)
		if s == nil || !s.Local {
			continue
		}
		mac, ok := s.MAC()
		if !ok {
			s.needARP.Store(true)
			q.Stats.DropNoMAC.Add(1)
			return false
		}
		copy(frame.Dst(b), mac[:])
		return true
	}
	p.Stats.DropOther.Add(1)
	return false
}
