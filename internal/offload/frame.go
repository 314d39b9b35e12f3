package offload

import "encoding/binary"

// Offsets and values of the headers this package reads.
const (
	ethLen      = 14
	vlanLen     = 4
	etherIPv4   = 0x0800
	etherIPv6   = 0x86dd
	etherVLAN   = 0x8100
	ipv4MinLen  = 20
	ipv6Len     = 40
	protoTCP    = 6
	protoUDP    = 17
	tcpMinLen   = 20
	tcpCsumOff  = 16
	tcpFlagFIN  = 0x01
	tcpFlagSYN  = 0x02
	tcpFlagRST  = 0x04
	tcpFlagPSH  = 0x08
	tcpFlagACK  = 0x10
	tcpFlagURG  = 0x20
	tcpFlagECE  = 0x40
	tcpFlagCWR  = 0x80
	udpLen      = 8
	udpCsumOff  = 6
	maxIPLength = 65535
)

// l4Frame locates the headers of an Ethernet frame carrying TCP or UDP
// over IPv4 (without IP options or fragmentation) or IPv6 (without
// extension headers), with at most one VLAN tag.
type l4Frame struct {
	l3, l4, end int   // IP header, TCP or UDP header, first payload byte
	ipEnd       int   // end of the IP packet (frames may be padded)
	v6          bool  // IPv6
	proto       uint8 // protoTCP or protoUDP
}

// parseL4 fills f from frame and reports whether frame is such a TCP
// segment or UDP datagram with consistent IP and TCP header lengths. The
// UDP length field is not checked: a UDP super-frame's may not fit in it.
func parseL4(frame []byte, f *l4Frame) bool {
	if !parseIP(frame, f) {
		return false
	}
	switch f.proto {
	case protoTCP:
		if f.ipEnd < f.l4+tcpMinLen {
			return false
		}
		f.end = f.l4 + int(frame[f.l4+12]>>4)*4
		return f.end >= f.l4+tcpMinLen && f.end <= f.ipEnd
	case protoUDP:
		f.end = f.l4 + udpLen
		return f.end <= f.ipEnd
	}
	return false
}

// parseTCP is parseL4 for TCP segments only.
func parseTCP(frame []byte, f *l4Frame) bool { return parseL4(frame, f) && f.proto == protoTCP }

// parseUDP is parseL4 for UDP datagrams only.
func parseUDP(frame []byte, f *l4Frame) bool { return parseL4(frame, f) && f.proto == protoUDP }

// parseIP fills everything in f but end from the Ethernet, VLAN and IP
// headers of frame, and reports whether they are well formed and the IP
// packet lies within frame.
func parseIP(frame []byte, f *l4Frame) bool {
	if len(frame) < ethLen {
		return false
	}
	l3, et := ethLen, binary.BigEndian.Uint16(frame[12:])
	if et == etherVLAN {
		if len(frame) < ethLen+vlanLen {
			return false
		}
		l3, et = ethLen+vlanLen, binary.BigEndian.Uint16(frame[16:])
	}
	ip := frame[l3:]
	switch et {
	case etherIPv4:
		if len(ip) < ipv4MinLen || ip[0] != 0x45 {
			return false
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 { // MF or an offset
			return false
		}
		*f = l4Frame{l3: l3, l4: l3 + ipv4MinLen, ipEnd: l3 + int(binary.BigEndian.Uint16(ip[2:])), proto: ip[9]}
	case etherIPv6:
		if len(ip) < ipv6Len || ip[0]>>4 != 6 {
			return false
		}
		*f = l4Frame{l3: l3, l4: l3 + ipv6Len, ipEnd: l3 + ipv6Len + int(binary.BigEndian.Uint16(ip[4:])), v6: true, proto: ip[6]}
	default:
		return false
	}
	return f.ipEnd <= len(frame) && f.ipEnd >= f.l4
}

// addrs returns the source and destination addresses of the IP header.
func (f *l4Frame) addrs(frame []byte) (src, dst []byte) {
	if f.v6 {
		return frame[f.l3+8 : f.l3+24], frame[f.l3+24 : f.l3+40]
	}
	return frame[f.l3+12 : f.l3+16], frame[f.l3+16 : f.l3+20]
}

// setIPLength writes the IP length fields for an L4 segment of l4Len
// bytes (header and payload) and, for IPv4, the header checksum.
func (f *l4Frame) setIPLength(frame []byte, l4Len int) {
	ip := frame[f.l3:]
	if f.v6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(l4Len))
		return
	}
	binary.BigEndian.PutUint16(ip[2:], uint16(ipv4MinLen+l4Len))
	ipv4HeaderChecksum(ip[:ipv4MinLen])
}

// ipv4ID returns the identification field of the frame's IPv4 header.
func (f *l4Frame) ipv4ID(frame []byte) uint16 { return binary.BigEndian.Uint16(frame[f.l3+4:]) }

// setIPv4ID writes the identification field of the frame's IPv4 header
// (the caller recomputes the header checksum).
func (f *l4Frame) setIPv4ID(frame []byte, id uint16) { binary.BigEndian.PutUint16(frame[f.l3+4:], id) }
