package frame

import "encoding/binary"

// Frag says whether an IP packet is a fragment.
type Frag uint8

// Fragment states.
const (
	// FragNone: not a fragment. IPv4: MF clear and offset 0; IPv6: no
	// fragment header.
	FragNone Frag = iota
	// FragFirst: the first fragment, which holds the upper-layer header.
	// IPv4: MF set and offset 0; IPv6: a fragment header with offset 0,
	// including an atomic fragment (RFC 6946).
	FragFirst
	// FragLater: a later fragment (offset not 0); the bytes at L4 are
	// the middle of the upper-layer payload, not a header.
	FragLater
)

// Frame holds what Parse found in an Ethernet frame, as offsets into it.
//
//	0          L3             L4                     End      len(frame)
//	| Ethernet | IP header,   | TCP/UDP/... header   |          |
//	| [+ VLAN] | options or   | and payload          | padding  |
//	|          | ext. headers |                      |          |
type Frame struct {
	EtherType uint16 // after the VLAN tag, if any
	VLAN      bool   // an 802.1Q tag follows the source address
	TCI       uint16 // the tag's control information (PCP, DEI, VLAN ID)
	L3        int    // offset of the IP (or ARP...) header: 14, or 18 with a tag
	V6        bool   // IPv6; IPv4 otherwise
	L4        int    // offset of the upper-layer header
	End       int    // end of the IP packet, by its length field
	Proto     uint8  // the upper-layer protocol found at L4
	Frag      Frag
}

// Parse fills f from the Ethernet frame b: the link header, then the IPv4
// or IPv6 header (and IPv6 extension headers, see the package comment) up
// to the upper-layer header. It checks that the IP packet, as its length
// field gives it, lies in b (b may be longer: padding), and that the
// headers fit in the packet. It does not look at the upper-layer header:
// ParseTCP and ParseUDP do, on b[f.L4:f.End]. A frame that is not IP gives
// ErrNotIP with the link fields filled in. Checksums are not checked.
func Parse(b []byte, f *Frame) error {
	if err := ParseLink(b, f); err != nil {
		return err
	}
	// The common cases are written out here rather than in functions of
	// their own: Parse is on the path of every frame, and one call is
	// cheaper than two.
	switch f.EtherType {
	case EtherTypeIPv4:
		ip, err := ParseIPv4(b[f.L3:])
		if err != nil {
			return err
		}
		hl, total := ip.HeaderLen(), ip.TotalLen()
		if total < hl {
			return ErrMalformed
		}
		if len(ip) < total {
			return ErrTruncated
		}
		f.L4, f.End, f.Proto = f.L3+hl, f.L3+total, ip.Proto()
		if ff := ip.FlagsFrag(); ff&IPv4FragOffMask != 0 {
			f.Frag = FragLater
		} else if ff&IPv4FlagMF != 0 {
			f.Frag = FragFirst
		}
		return nil
	case EtherTypeIPv6:
		ip, err := ParseIPv6(b[f.L3:])
		if err != nil {
			return err
		}
		total := IPv6HeaderLen + ip.PayloadLen()
		if len(ip) < total {
			return ErrTruncated
		}
		f.V6, f.End = true, f.L3+total
		if next := ip.NextHeader(); next == ProtoTCP || next == ProtoUDP {
			f.L4, f.Proto = f.L3+IPv6HeaderLen, next
			return nil
		}
		proto, off, frag, err := walkIPv6(ip[:total])
		if err != nil {
			return err
		}
		f.L4, f.Proto, f.Frag = f.L3+off, proto, frag
		return nil
	}
	return ErrNotIP
}

// IPv4 returns the IPv4 header of b, which f describes (f.V6 false).
func (f *Frame) IPv4(b []byte) IPv4 { return IPv4(b[f.L3:f.End]) }

// IPv6 returns the IPv6 header of b, which f describes (f.V6 true).
func (f *Frame) IPv6(b []byte) IPv6 { return IPv6(b[f.L3:f.End]) }

// Upper returns the upper-layer segment of b, from f.L4 to f.End, for
// ParseTCP or ParseUDP.
func (f *Frame) Upper(b []byte) []byte { return b[f.L4:f.End] }

// Addrs returns the source and destination addresses of the IP header of
// b, 4 or 16 bytes each, aliasing b.
func (f *Frame) Addrs(b []byte) (src, dst []byte) {
	if f.V6 {
		return b[f.L3+8 : f.L3+24 : f.L3+24], b[f.L3+24 : f.L3+40 : f.L3+40]
	}
	return b[f.L3+12 : f.L3+16 : f.L3+16], b[f.L3+16 : f.L3+20 : f.L3+20]
}

// RewriteDst rewrites the destination address and port of the TCP
// segment or UDP datagram in b, which f describes, to addr (4 or 16
// bytes, the family of the packet) and port, and updates the IPv4 header
// checksum and the TCP or UDP checksum incrementally. A UDP datagram over
// IPv4 without a checksum (0) keeps none. It reports false, changing
// nothing, for anything else: another protocol, a later fragment, an
// upper-layer header cut short, or an address of the wrong length. The
// destination MAC address is set with copy(Dst(b), mac).
func (f *Frame) RewriteDst(b []byte, addr []byte, port uint16) bool {
	return f.rewrite(b, addr, port, false)
}

// RewriteSrc is RewriteDst for the source address and port: a reply
// going back to a client with the address it sent the request to.
func (f *Frame) RewriteSrc(b []byte, addr []byte, port uint16) bool {
	return f.rewrite(b, addr, port, true)
}

// rewrite is RewriteDst (src false) and RewriteSrc (src true).
func (f *Frame) rewrite(b []byte, addr []byte, port uint16, src bool) bool {
	csumOff, ok := f.l4Checksum(b)
	if !ok || len(addr) != f.addrLen() {
		return false
	}
	s, d := f.Addrs(b)
	old, portOff := d, 2
	if src {
		old, portOff = s, 0
	}
	l4 := b[f.L4:f.End]
	oldPort := binary.BigEndian.Uint16(l4[portOff:])
	c := binary.BigEndian.Uint16(l4[csumOff:])
	if f.Proto == ProtoUDP && c == 0 && !f.V6 {
		// No checksum: nothing to update.
	} else {
		c = UpdatePort(UpdateAddr(c, old, addr), oldPort, port)
		if f.Proto == ProtoUDP {
			c = UDPChecksum(c)
		}
		binary.BigEndian.PutUint16(l4[csumOff:], c)
	}
	binary.BigEndian.PutUint16(l4[portOff:], port)
	if !f.V6 {
		ip := IPv4(b[f.L3:])
		ip.SetChecksum(UpdateAddr(ip.Checksum(), old, addr))
	}
	copy(old, addr)
	return true
}

// l4Checksum returns the offset of the checksum in the TCP or UDP header
// at f.L4, if the packet holds one.
func (f *Frame) l4Checksum(b []byte) (int, bool) {
	if f.Frag == FragLater || f.End > len(b) {
		return 0, false
	}
	switch n := f.End - f.L4; {
	case f.Proto == ProtoTCP && n >= TCPHeaderLen:
		return TCPChecksumOff, true
	case f.Proto == ProtoUDP && n >= UDPHeaderLen:
		return UDPChecksumOff, true
	}
	return 0, false
}

// addrLen returns the length of an address of the packet's family.
func (f *Frame) addrLen() int {
	if f.V6 {
		return 16
	}
	return 4
}
