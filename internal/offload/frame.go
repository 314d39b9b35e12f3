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
	maxIPLength = 65535
)

// tcpFrame locates the headers of an Ethernet frame carrying TCP over
// IPv4 (without IP options or fragmentation) or IPv6 (without extension
// headers), with at most one VLAN tag.
type tcpFrame struct {
	l3, l4, end int  // IP header, TCP header, first payload byte
	ipEnd       int  // end of the IP packet (frames may be padded)
	v6          bool // IPv6
}

// parseTCP fills f from frame and reports whether frame is such a TCP
// segment with consistent lengths.
func parseTCP(frame []byte, f *tcpFrame) bool {
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
		if len(ip) < ipv4MinLen || ip[0] != 0x45 || ip[9] != protoTCP {
			return false
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 { // MF or an offset
			return false
		}
		*f = tcpFrame{l3: l3, l4: l3 + ipv4MinLen, ipEnd: l3 + int(binary.BigEndian.Uint16(ip[2:]))}
	case etherIPv6:
		if len(ip) < ipv6Len || ip[0]>>4 != 6 || ip[6] != protoTCP {
			return false
		}
		*f = tcpFrame{l3: l3, l4: l3 + ipv6Len, ipEnd: l3 + ipv6Len + int(binary.BigEndian.Uint16(ip[4:])), v6: true}
	default:
		return false
	}
	if f.ipEnd > len(frame) || f.ipEnd < f.l4+tcpMinLen {
		return false
	}
	f.end = f.l4 + int(frame[f.l4+12]>>4)*4
	return f.end >= f.l4+tcpMinLen && f.end <= f.ipEnd
}

// addrs returns the source and destination addresses of the IP header.
func (f *tcpFrame) addrs(frame []byte) (src, dst []byte) {
	if f.v6 {
		return frame[f.l3+8 : f.l3+24], frame[f.l3+24 : f.l3+40]
	}
	return frame[f.l3+12 : f.l3+16], frame[f.l3+16 : f.l3+20]
}

// setIPLength writes the IP length fields for a TCP segment of tcpLen
// bytes (header and payload) and, for IPv4, the header checksum.
func (f *tcpFrame) setIPLength(frame []byte, tcpLen int) {
	ip := frame[f.l3:]
	if f.v6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(tcpLen))
		return
	}
	binary.BigEndian.PutUint16(ip[2:], uint16(ipv4MinLen+tcpLen))
	ipv4HeaderChecksum(ip[:ipv4MinLen])
}
