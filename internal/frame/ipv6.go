package frame

import "encoding/binary"

// The fixed IPv6 header (RFC 8200):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |              flow label               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        payload length         |  next header  |   hop limit   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                  source address (16 bytes)                    +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+               destination address (16 bytes)                  +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The payload length counts everything after the fixed header, extension
// headers included. Hop-by-hop, routing and destination options headers
// share one shape, 8 bytes plus 8 per unit of their length:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  next header  |  length (x8)  |   8 * (length + 1) - 2 bytes  :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The fragment header is 8 bytes:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  next header  |   reserved    |    fragment offset (x8) |Res|M|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        identification                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

// Sizes and next header values of IPv6.
const (
	IPv6HeaderLen = 40

	IPv6HopByHop = 0
	IPv6Routing  = 43
	IPv6Fragment = 44
	IPv6DestOpts = 60

	ipv6FragHeaderLen = 8
)

// IPv6 is a view of a fixed IPv6 header and what follows it.
type IPv6 []byte

// ParseIPv6 checks the fixed header at the start of b (40 bytes, version
// 6) and returns a view of b. It does not check the payload length
// against b.
func ParseIPv6(b []byte) (IPv6, error) {
	if len(b) < IPv6HeaderLen {
		return nil, ErrTruncated
	}
	if b[0]>>4 != 6 {
		return nil, ErrMalformed
	}
	return IPv6(b), nil
}

// TrafficClass returns the traffic class.
func (ip IPv6) TrafficClass() uint8 { return ip[0]<<4 | ip[1]>>4 }

// FlowLabel returns the flow label (20 bits).
func (ip IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(ip[0:4]) & 0xfffff }

// PayloadLen returns the payload length field.
func (ip IPv6) PayloadLen() int { return int(binary.BigEndian.Uint16(ip[4:6])) }

// SetPayloadLen writes the payload length field.
func (ip IPv6) SetPayloadLen(n int) { binary.BigEndian.PutUint16(ip[4:6], uint16(n)) }

// NextHeader returns the fixed header's next header field.
func (ip IPv6) NextHeader() uint8 { return ip[6] }

// HopLimit returns the hop limit.
func (ip IPv6) HopLimit() uint8 { return ip[7] }

// Src returns the source address (16 bytes, aliasing the header).
func (ip IPv6) Src() []byte { return ip[8:24:24] }

// Dst returns the destination address (16 bytes, aliasing the header).
func (ip IPv6) Dst() []byte { return ip[24:40:40] }

// PutIPv6 writes a fixed IPv6 header into b: version 6, traffic class
// tc, flow label 0, the payload length, next header, hop limit and
// addresses.
func PutIPv6(b []byte, tc uint8, payloadLen int, next, hopLimit uint8, src, dst []byte) {
	b[0], b[1], b[2], b[3] = 0x60|tc>>4, tc<<4, 0, 0
	binary.BigEndian.PutUint16(b[4:6], uint16(payloadLen))
	b[6], b[7] = next, hopLimit
	copy(b[8:24], src)
	copy(b[24:40], dst)
}

// walkIPv6 follows the extension headers of the IPv6 packet p (exactly
// its IP length) from the fixed header's next header. It returns the
// upper-layer protocol, its offset in p and the fragment state.
func walkIPv6(p []byte) (proto uint8, off int, frag Frag, err error) {
	proto, off = p[6], IPv6HeaderLen
	for {
		switch proto {
		case IPv6HopByHop, IPv6Routing, IPv6DestOpts:
			if len(p) < off+2 {
				return 0, 0, 0, ErrMalformed
			}
			n := 8 + int(p[off+1])*8
			if len(p) < off+n {
				return 0, 0, 0, ErrMalformed
			}
			proto, off = p[off], off+n
		case IPv6Fragment:
			if len(p) < off+ipv6FragHeaderLen {
				return 0, 0, 0, ErrMalformed
			}
			proto = p[off]
			fo := binary.BigEndian.Uint16(p[off+2:off+4]) &^ 7
			off += ipv6FragHeaderLen
			if fo != 0 {
				return proto, off, FragLater, nil
			}
			frag = FragFirst
		default:
			return proto, off, frag, nil
		}
	}
}

// UnicastIPv6 reports whether the address a (16 bytes) can be the source
// of a packet from a single host: not unspecified, loopback or multicast.
func UnicastIPv6(a []byte) bool {
	if MulticastIPv6(a) {
		return false
	}
	for _, b := range a[:15] {
		if b != 0 {
			return true
		}
	}
	return a[15] > 1
}

// MulticastIPv6 reports whether the address a (16 bytes) is in ff00::/8.
func MulticastIPv6(a []byte) bool { return a[0] == 0xff }
