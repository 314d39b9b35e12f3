package edge

// ICMP "too big" answers.
//
// A TCP flow that was open before the underlay MTU dropped keeps sending
// segments sized for the old path. TooBig builds, for such a segment, the
// ICMP error a router would send (IPv4 "fragmentation needed", RFC 792 and
// RFC 1191; ICMPv6 "packet too big", RFC 4443 and RFC 8201), as tinc 1.1
// does in switch mode, so that the sending host lowers its path MTU at
// once instead of waiting for a retransmission timeout. Only TCP is
// answered: other traffic is fragmented on the underlay instead.

import (
	"encoding/binary"

	"github.com/detour-overlay/detour/internal/frame"
)

// Constants of the ICMP errors built by TooBig. The ICMP header is
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     type      |     code      |           checksum            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  IPv4: unused (16) | next-hop MTU (16); IPv6: MTU (32)        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:            as much of the packet that was too big             :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	icmpHeaderLen = 8
	// icmpQuotedPayload is how much of the original IPv4 payload is quoted
	// after its header (RFC 792): enough for the TCP ports and sequence
	// number.
	icmpQuotedPayload = 8
	// ipv6MinMTU is both the smallest MTU an IPv6 link may have and the
	// largest ICMPv6 error packet (RFC 4443, section 2.4 (c)).
	ipv6MinMTU = 1280
	// ipv4MinMTU is the smallest MTU an IPv4 link may have (RFC 791).
	ipv4MinMTU = 68

	icmpTypeDestUnreach = 3
	icmpCodeFragNeeded  = 4
	icmp6TypeTooBig     = 2

	// replyTTL is the TTL (IPv4) or hop limit (IPv6) of the answers.
	replyTTL = 64
	// replyTOS is the IPv4 type of service of the answers: precedence
	// "internetwork control", as Linux uses for its ICMP errors.
	replyTOS = 0xc0
)

// TooBig inspects an Ethernet frame sent by a local host (optionally with
// one 802.1Q VLAN tag). If it carries a TCP segment in an IPv4 packet with
// DF set, or in an IPv6 packet, whose IP length exceeds mtu, it writes into
// out the Ethernet frame of the ICMP error the host should receive and
// returns its length; otherwise it returns 0 and leaves out alone.
//
// The answer goes back to the host (Ethernet addresses swapped, IP source
// = the packet's destination) and keeps the VLAN tag. For IPv4 it is an
// ICMP type 3 code 4 with next-hop MTU = mtu, TTL 64 and DF set (ID 0),
// quoting the original IP header and the first 8 bytes of its payload. For
// IPv6 it is an ICMPv6 type 2 with MTU = mtu and hop limit 64, quoting as
// much of the original packet as fits in 1280 bytes.
//
// No answer is given for fragments, ICMP, non-TCP traffic, IPv4 without
// DF, packets that fit, truncated frames (the frame must hold the whole IP
// packet), IPv6 packets whose extension headers do not parse (see package
// frame for those walked), packets whose source is not a unicast host or
// whose destination is multicast or broadcast (on either layer), an mtu
// below the protocol's minimum (68 for IPv4, 1280 for IPv6), or an out too
// small for the answer. out must not overlap b. TooBig allocates nothing.
func TooBig(b []byte, mtu int, out []byte) int {
	// A frame no longer than mtu plus an Ethernet header carries an IP
	// packet that fits.
	if len(b) <= frame.EtherHeaderLen+mtu || frame.IsGroup(frame.Dst(b)) || frame.IsGroup(frame.Src(b)) {
		return 0
	}
	var f frame.Frame
	if frame.Parse(b, &f) != nil || f.Proto != frame.ProtoTCP || f.Frag != frame.FragNone {
		return 0
	}
	var n int
	if f.V6 {
		n = tooBigIPv6(f.IPv6(b), mtu, out, f.L3)
	} else {
		n = tooBigIPv4(f.IPv4(b), mtu, out, f.L3)
	}
	if n == 0 {
		return 0
	}
	// The link header is written last, once the answer is known to fit.
	copy(out[0:6], frame.Src(b))
	copy(out[6:12], frame.Dst(b))
	copy(out[12:f.L3], b[12:f.L3])
	return n
}

// tooBigIPv4 writes the IPv4 answer for the TCP packet p (exactly its
// total length) after a link header of l3 bytes in out, and returns the
// whole frame's length, or 0.
func tooBigIPv4(p frame.IPv4, mtu int, out []byte, l3 int) int {
	switch {
	case mtu < ipv4MinMTU || len(p) <= mtu:
		return 0 // fits
	case !p.DF():
		return 0 // may be fragmented
	case !frame.UnicastIPv4(p.Src()) || !frame.UnicastIPv4(p.Dst()):
		return 0
	}
	// total > mtu >= 68 and the header is at most 60 bytes, so 8 payload
	// bytes are present.
	quote := p.HeaderLen() + icmpQuotedPayload
	n := l3 + frame.IPv4HeaderLen + icmpHeaderLen + quote
	if len(out) < n {
		return 0
	}
	frame.PutIPv4(out[l3:], replyTOS, n-l3, 0, frame.IPv4FlagDF, replyTTL, frame.ProtoICMP, p.Dst(), p.Src())

	icmp := out[l3+frame.IPv4HeaderLen : n]
	icmp[0], icmp[1] = icmpTypeDestUnreach, icmpCodeFragNeeded
	icmp[2], icmp[3], icmp[4], icmp[5] = 0, 0, 0, 0
	binary.BigEndian.PutUint16(icmp[6:8], uint16(mtu))
	copy(icmp[icmpHeaderLen:], p[:quote])
	binary.BigEndian.PutUint16(icmp[2:4], frame.Checksum(icmp, 0))
	return n
}

// tooBigIPv6 writes the IPv6 answer for the TCP packet p (exactly its IP
// length) after a link header of l3 bytes in out, and returns the whole
// frame's length, or 0.
func tooBigIPv6(p frame.IPv6, mtu int, out []byte, l3 int) int {
	switch {
	case mtu < ipv6MinMTU || len(p) <= mtu:
		return 0 // fits (a jumbogram does not parse)
	case !frame.UnicastIPv6(p.Src()) || frame.MulticastIPv6(p.Dst()):
		return 0
	}
	quote := min(len(p), ipv6MinMTU-frame.IPv6HeaderLen-icmpHeaderLen)
	n := l3 + frame.IPv6HeaderLen + icmpHeaderLen + quote
	if len(out) < n {
		return 0
	}
	ip := out[l3 : l3+frame.IPv6HeaderLen]
	frame.PutIPv6(ip, 0, icmpHeaderLen+quote, frame.ProtoICMPv6, replyTTL, p.Dst(), p.Src())

	icmp := out[l3+frame.IPv6HeaderLen : n]
	icmp[0], icmp[1], icmp[2], icmp[3] = icmp6TypeTooBig, 0, 0, 0
	binary.BigEndian.PutUint32(icmp[4:8], uint32(mtu))
	copy(icmp[icmpHeaderLen:], p[:quote])
	ph := frame.PseudoSum(ip[8:24], ip[24:40], frame.ProtoICMPv6, len(icmp))
	binary.BigEndian.PutUint16(icmp[2:4], frame.Checksum(icmp, ph))
	return n
}
