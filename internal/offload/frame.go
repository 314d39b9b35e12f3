package offload

import "github.com/detour-overlay/detour/internal/frame"

// maxIPLength is the largest IP length field: a super-frame's IP packet
// must fit in it.
const maxIPLength = 65535

// l4Frame locates the headers of an Ethernet frame this package splits
// or coalesces: TCP or UDP over IPv4 without options or fragmentation, or
// over IPv6 without extension headers, with at most one VLAN tag. Package
// frame parses it; the offsets are kept so that the Coalescer can compare
// later frames with the first.
type l4Frame struct {
	l3, l4, end int   // IP header, TCP or UDP header, first payload byte
	ipEnd       int   // end of the IP packet (frames may be padded)
	v6          bool  // IPv6
	proto       uint8 // frame.ProtoTCP or frame.ProtoUDP
}

// parseL4 fills f from b and reports whether b is such a TCP segment or
// UDP datagram with consistent IP and TCP header lengths. The UDP length
// field is not checked: a UDP super-frame's may not fit in it.
func parseL4(b []byte, f *l4Frame) bool {
	var p frame.Frame
	if frame.Parse(b, &p) != nil || p.Frag != frame.FragNone {
		return false
	}
	hl := frame.IPv4HeaderLen
	if p.V6 {
		hl = frame.IPv6HeaderLen
	}
	if p.L4 != p.L3+hl { // IPv4 options or IPv6 extension headers
		return false
	}
	// Field by field: a composite literal is built on the stack and copied
	// with wide loads that stall on its narrow stores.
	f.l3, f.l4, f.ipEnd, f.v6, f.proto = p.L3, p.L4, p.End, p.V6, p.Proto
	switch p.Proto {
	case frame.ProtoTCP:
		t, err := frame.ParseTCP(p.Upper(b))
		if err != nil {
			return false
		}
		f.end = f.l4 + t.HeaderLen()
		return true
	case frame.ProtoUDP:
		if _, err := frame.ParseUDP(p.Upper(b)); err != nil {
			return false
		}
		f.end = f.l4 + frame.UDPHeaderLen
		return true
	}
	return false
}

// parseTCP is parseL4 for TCP segments only.
func parseTCP(b []byte, f *l4Frame) bool { return parseL4(b, f) && f.proto == frame.ProtoTCP }

// parseUDP is parseL4 for UDP datagrams only.
func parseUDP(b []byte, f *l4Frame) bool { return parseL4(b, f) && f.proto == frame.ProtoUDP }

// addrs returns the source and destination addresses of the IP header.
func (f *l4Frame) addrs(b []byte) (src, dst []byte) {
	if f.v6 {
		ip := frame.IPv6(b[f.l3:])
		return ip.Src(), ip.Dst()
	}
	ip := frame.IPv4(b[f.l3:])
	return ip.Src(), ip.Dst()
}

// tcp returns the TCP header and payload of b.
func (f *l4Frame) tcp(b []byte) frame.TCP { return frame.TCP(b[f.l4:]) }

// setIPLength writes the IP length fields for an L4 segment of l4Len
// bytes (header and payload) and, for IPv4, the header checksum.
func (f *l4Frame) setIPLength(b []byte, l4Len int) {
	if f.v6 {
		frame.IPv6(b[f.l3:]).SetPayloadLen(l4Len)
		return
	}
	ip := frame.IPv4(b[f.l3:])
	ip.SetTotalLen(frame.IPv4HeaderLen + l4Len)
	ip.ComputeChecksum()
}

// ipv4ID returns the identification field of the frame's IPv4 header.
func (f *l4Frame) ipv4ID(b []byte) uint16 { return frame.IPv4(b[f.l3:]).ID() }

// setIPv4ID writes the identification field of the frame's IPv4 header
// (the caller recomputes the header checksum).
func (f *l4Frame) setIPv4ID(b []byte, id uint16) { frame.IPv4(b[f.l3:]).SetID(id) }
