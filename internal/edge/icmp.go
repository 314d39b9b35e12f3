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

import "encoding/binary"

// Constants of the ICMP errors built by TooBig.
const (
	etherHeaderLen = 14
	vlanTagLen     = 4
	ipv4HeaderLen  = 20
	ipv6HeaderLen  = 40
	icmpHeaderLen  = 8
	// icmpQuotedPayload is how much of the original IPv4 payload is quoted
	// after its header (RFC 792): enough for the TCP ports and sequence
	// number.
	icmpQuotedPayload = 8
	// ipv6MinMTU is both the smallest MTU an IPv6 link may have and the
	// largest ICMPv6 error packet (RFC 4443, section 2.4 (c)).
	ipv6MinMTU = 1280
	// ipv4MinMTU is the smallest MTU an IPv4 link may have (RFC 791).
	ipv4MinMTU = 68

	protoICMP   = 1
	protoICMPv6 = 58

	ipv4FlagDF      = 0x4000
	ipv4FlagMF      = 0x2000
	ipv4FragOffMask = 0x1fff

	icmpTypeDestUnreach = 3
	icmpCodeFragNeeded  = 4
	icmp6TypeTooBig     = 2

	// replyTTL is the TTL (IPv4) or hop limit (IPv6) of the answers.
	replyTTL = 64
	// replyTOS is the IPv4 type of service of the answers: precedence
	// "internetwork control", as Linux uses for its ICMP errors.
	replyTOS = 0xc0

	// IPv6 extension headers that may stand between the fixed header and
	// TCP; a fragment header (44) or anything else stops the search.
	ipv6HopByHop = 0
	ipv6Routing  = 43
	ipv6DestOpts = 60
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
// packet), packets whose source is not a unicast host or whose destination
// is multicast or broadcast (on either layer), an mtu below the protocol's
// minimum (68 for IPv4, 1280 for IPv6), or an out too small for the
// answer. out must not overlap frame. TooBig allocates nothing.
func TooBig(frame []byte, mtu int, out []byte) int {
	if len(frame) < etherHeaderLen || isGroupMAC(frame[0:6]) || isGroupMAC(frame[6:12]) {
		return 0
	}
	l3 := etherHeaderLen
	etype := binary.BigEndian.Uint16(frame[12:14])
	if etype == etherTypeVLAN {
		if len(frame) < etherHeaderLen+vlanTagLen {
			return 0
		}
		l3 += vlanTagLen
		etype = binary.BigEndian.Uint16(frame[16:18])
	}
	var n int
	switch etype {
	case etherTypeIPv4:
		n = tooBigIPv4(frame[l3:], mtu, out, l3)
	case etherTypeIPv6:
		n = tooBigIPv6(frame[l3:], mtu, out, l3)
	}
	if n == 0 {
		return 0
	}
	// The link header is written last, once the answer is known to fit.
	copy(out[0:6], frame[6:12])
	copy(out[6:12], frame[0:6])
	copy(out[12:l3], frame[12:l3])
	return n
}

// isGroupMAC reports whether an Ethernet address is multicast or
// broadcast (the I/G bit set).
func isGroupMAC(mac []byte) bool {
	return mac[0]&0x01 != 0
}

// tooBigIPv4 writes the IPv4 answer for packet p after a link header of l3
// bytes in out, and returns the whole frame's length, or 0.
func tooBigIPv4(p []byte, mtu int, out []byte, l3 int) int {
	if mtu < ipv4MinMTU || len(p) < ipv4HeaderLen || p[0]>>4 != 4 {
		return 0
	}
	ihl := int(p[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(p[2:4]))
	flags := binary.BigEndian.Uint16(p[6:8])
	switch {
	case ihl < ipv4HeaderLen || total < ihl || len(p) < total:
		return 0 // malformed or truncated
	case total <= mtu:
		return 0 // fits
	case flags&ipv4FlagDF == 0 || flags&(ipv4FlagMF|ipv4FragOffMask) != 0:
		return 0 // may be fragmented, or is a fragment
	case p[9] != protoTCP:
		return 0
	case !unicastIPv4(p[12:16]) || !unicastIPv4(p[16:20]):
		return 0
	}
	// total > mtu >= 68 and ihl <= 60, so 8 payload bytes are present.
	quote := ihl + icmpQuotedPayload
	n := l3 + ipv4HeaderLen + icmpHeaderLen + quote
	if len(out) < n {
		return 0
	}
	ip := out[l3 : l3+ipv4HeaderLen]
	ip[0], ip[1] = 0x45, replyTOS
	binary.BigEndian.PutUint16(ip[2:4], uint16(n-l3))
	binary.BigEndian.PutUint16(ip[4:6], 0)
	binary.BigEndian.PutUint16(ip[6:8], ipv4FlagDF)
	ip[8], ip[9] = replyTTL, protoICMP
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], p[16:20])
	copy(ip[16:20], p[12:16])
	binary.BigEndian.PutUint16(ip[10:12], ^fold(sum16(0, ip)))

	icmp := out[l3+ipv4HeaderLen : n]
	icmp[0], icmp[1] = icmpTypeDestUnreach, icmpCodeFragNeeded
	icmp[2], icmp[3], icmp[4], icmp[5] = 0, 0, 0, 0
	binary.BigEndian.PutUint16(icmp[6:8], uint16(mtu))
	copy(icmp[icmpHeaderLen:], p[:quote])
	binary.BigEndian.PutUint16(icmp[2:4], ^fold(sum16(0, icmp)))
	return n
}

// unicastIPv4 reports whether a names a single host: not in 0/8, not
// loopback, not multicast, reserved (class E) or the limited broadcast.
func unicastIPv4(a []byte) bool {
	return a[0] != 0 && a[0] != 127 && a[0] < 224
}

// tooBigIPv6 writes the IPv6 answer for packet p after a link header of l3
// bytes in out, and returns the whole frame's length, or 0.
func tooBigIPv6(p []byte, mtu int, out []byte, l3 int) int {
	if mtu < ipv6MinMTU || len(p) < ipv6HeaderLen || p[0]>>4 != 6 {
		return 0
	}
	total := ipv6HeaderLen + int(binary.BigEndian.Uint16(p[4:6]))
	switch {
	case len(p) < total:
		return 0 // truncated
	case total <= mtu:
		return 0 // fits (a jumbogram's payload length is 0 and fits too)
	case !carriesTCP(p[:total]):
		return 0 // not TCP, or a fragment
	case !unicastIPv6(p[8:24]) || isMulticastIPv6(p[24:40]):
		return 0
	}
	quote := min(total, ipv6MinMTU-ipv6HeaderLen-icmpHeaderLen)
	n := l3 + ipv6HeaderLen + icmpHeaderLen + quote
	if len(out) < n {
		return 0
	}
	ip := out[l3 : l3+ipv6HeaderLen]
	ip[0], ip[1], ip[2], ip[3] = 0x60, 0, 0, 0
	binary.BigEndian.PutUint16(ip[4:6], uint16(icmpHeaderLen+quote))
	ip[6], ip[7] = protoICMPv6, replyTTL
	copy(ip[8:24], p[24:40])
	copy(ip[24:40], p[8:24])

	icmp := out[l3+ipv6HeaderLen : n]
	icmp[0], icmp[1], icmp[2], icmp[3] = icmp6TypeTooBig, 0, 0, 0
	binary.BigEndian.PutUint32(icmp[4:8], uint32(mtu))
	copy(icmp[icmpHeaderLen:], p[:quote])
	binary.BigEndian.PutUint16(icmp[2:4], ^fold(pseudoSum6(ip, len(icmp))+sum16(0, icmp)))
	return n
}

// carriesTCP reports whether the IPv6 packet p (exactly its IP length)
// carries TCP, after any hop-by-hop, routing or destination options
// headers. A fragment header or any other header gives false.
func carriesTCP(p []byte) bool {
	next, off := p[6], ipv6HeaderLen
	for {
		switch next {
		case protoTCP:
			return true
		case ipv6HopByHop, ipv6Routing, ipv6DestOpts:
			if len(p) < off+2 {
				return false
			}
			next, off = p[off], off+8+int(p[off+1])*8
		default:
			return false
		}
	}
}

// unicastIPv6 reports whether a can be the source of a packet from a
// single host: not unspecified, loopback or multicast.
func unicastIPv6(a []byte) bool {
	if isMulticastIPv6(a) {
		return false
	}
	for _, b := range a[:15] {
		if b != 0 {
			return true
		}
	}
	return a[15] > 1
}

// isMulticastIPv6 reports whether a is in ff00::/8.
func isMulticastIPv6(a []byte) bool {
	return a[0] == 0xff
}

// pseudoSum6 returns the unfolded one's-complement sum of the IPv6 pseudo
// header (RFC 8200, section 8.1) for an ICMPv6 message of length n after
// the IPv6 header ip.
func pseudoSum6(ip []byte, n int) uint32 {
	s := sum16(0, ip[8:40])
	return s + uint32(n>>16) + uint32(n&0xffff) + protoICMPv6
}

// sum16 adds b, as big-endian 16-bit words padded with a zero byte, to the
// one's-complement accumulator s. Callers keep b under 64 KiB, so s does
// not overflow.
func sum16(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

// fold folds a one's-complement accumulator into 16 bits.
func fold(s uint32) uint16 {
	for s > 0xffff {
		s = (s & 0xffff) + (s >> 16)
	}
	return uint16(s)
}
