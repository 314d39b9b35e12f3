package frame

import "encoding/binary"

// An IPv4 header (RFC 791):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |      TOS      |         total length          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        identification         |0|D|M|     fragment offset     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      TTL      |   protocol    |        header checksum        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        source address                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     destination address                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:                  options (IHL*4 - 20 bytes)                   :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// IHL counts 32-bit words (5 to 15); the total length covers header and
// payload. D is "don't fragment", M "more fragments"; the fragment offset
// counts 8-byte units. The header checksum covers the header only.

// Sizes, flags and protocol numbers of IP.
const (
	IPv4HeaderLen = 20 // without options
	IPv4MaxHeader = 60

	IPv4FlagDF      = 0x4000 // in the flags and fragment offset word
	IPv4FlagMF      = 0x2000
	IPv4FragOffMask = 0x1fff

	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// IPv4 is a view of an IPv4 header and what follows it.
type IPv4 []byte

// ParseIPv4 checks the header at the start of b (at least 20 bytes,
// version 4, a header length of at least 20 that b holds) and returns a
// view of b. It does not check the total length against b, nor the
// header checksum.
func ParseIPv4(b []byte) (IPv4, error) {
	if len(b) < IPv4HeaderLen {
		return nil, ErrTruncated
	}
	if b[0]>>4 != 4 || b[0]&0x0f < 5 {
		return nil, ErrMalformed
	}
	if len(b) < int(b[0]&0x0f)*4 {
		return nil, ErrTruncated
	}
	return IPv4(b), nil
}

// HeaderLen returns the header length in bytes (IHL * 4).
func (ip IPv4) HeaderLen() int { return int(ip[0]&0x0f) * 4 }

// TOS returns the type of service (DSCP and ECN) byte.
func (ip IPv4) TOS() uint8 { return ip[1] }

// TotalLen returns the total length field.
func (ip IPv4) TotalLen() int { return int(binary.BigEndian.Uint16(ip[2:4])) }

// SetTotalLen writes the total length field (the caller updates the
// checksum).
func (ip IPv4) SetTotalLen(n int) { binary.BigEndian.PutUint16(ip[2:4], uint16(n)) }

// ID returns the identification field.
func (ip IPv4) ID() uint16 { return binary.BigEndian.Uint16(ip[4:6]) }

// SetID writes the identification field (the caller updates the
// checksum).
func (ip IPv4) SetID(id uint16) { binary.BigEndian.PutUint16(ip[4:6], id) }

// FlagsFrag returns the flags and fragment offset word.
func (ip IPv4) FlagsFrag() uint16 { return binary.BigEndian.Uint16(ip[6:8]) }

// DF reports whether the "don't fragment" flag is set.
func (ip IPv4) DF() bool { return ip.FlagsFrag()&IPv4FlagDF != 0 }

// MF reports whether the "more fragments" flag is set.
func (ip IPv4) MF() bool { return ip.FlagsFrag()&IPv4FlagMF != 0 }

// FragOffset returns the fragment offset in bytes.
func (ip IPv4) FragOffset() int { return int(ip.FlagsFrag()&IPv4FragOffMask) * 8 }

// TTL returns the time to live.
func (ip IPv4) TTL() uint8 { return ip[8] }

// Proto returns the protocol field.
func (ip IPv4) Proto() uint8 { return ip[9] }

// Checksum returns the header checksum field.
func (ip IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(ip[10:12]) }

// SetChecksum writes the header checksum field.
func (ip IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(ip[10:12], c) }

// Src returns the source address (4 bytes, aliasing the header).
func (ip IPv4) Src() []byte { return ip[12:16:16] }

// Dst returns the destination address (4 bytes, aliasing the header).
func (ip IPv4) Dst() []byte { return ip[16:20:20] }

// Options returns the options (empty without).
func (ip IPv4) Options() []byte { return ip[IPv4HeaderLen:ip.HeaderLen()] }

// ComputeChecksum recomputes the header checksum over HeaderLen bytes and
// writes it.
func (ip IPv4) ComputeChecksum() {
	ip[10], ip[11] = 0, 0
	ip.SetChecksum(Checksum(ip[:ip.HeaderLen()], 0))
}

// PutIPv4 writes a 20-byte IPv4 header without options into b: version 4,
// IHL 5, the given type of service, total length, identification, flags
// and fragment offset word, TTL, protocol and addresses, and its checksum.
func PutIPv4(b []byte, tos uint8, total int, id, flagsFrag uint16, ttl, proto uint8, src, dst []byte) {
	ip := IPv4(b[:IPv4HeaderLen])
	ip[0], ip[1] = 0x45, tos
	ip.SetTotalLen(total)
	ip.SetID(id)
	binary.BigEndian.PutUint16(ip[6:8], flagsFrag)
	ip[8], ip[9] = ttl, proto
	copy(ip[12:16], src)
	copy(ip[16:20], dst)
	ip.ComputeChecksum()
}

// UnicastIPv4 reports whether the address a (4 bytes) names a single
// host: not in 0.0.0.0/8, not loopback, not multicast, reserved (class E)
// or the limited broadcast.
func UnicastIPv4(a []byte) bool { return a[0] != 0 && a[0] != 127 && a[0] < 224 }
