package frame

import "encoding/binary"

// A UDP header (RFC 768):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          source port          |       destination port        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            length             |           checksum            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:                           payload                             :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The length covers header and payload. The checksum covers a pseudo
// header (see csum.go), header and payload; over IPv4 a checksum of 0
// means "none", so a computed 0 is sent as 0xffff (RFC 768), and over
// IPv6 it is mandatory (RFC 8200).

// Sizes of UDP.
const (
	UDPHeaderLen   = 8
	UDPChecksumOff = 6 // offset of the checksum in the header
)

// UDP is a view of a UDP datagram: header and payload.
type UDP []byte

// ParseUDP checks that dg holds a UDP header and returns a view of dg.
// The length field is not checked against dg: a UDP super-frame's does
// not fit in it.
func ParseUDP(dg []byte) (UDP, error) {
	if len(dg) < UDPHeaderLen {
		return nil, ErrTruncated
	}
	return UDP(dg), nil
}

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u[0:2]) }

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:4]) }

// Len returns the length field.
func (u UDP) Len() int { return int(binary.BigEndian.Uint16(u[4:6])) }

// SetLen writes the length field (the caller updates the checksum).
func (u UDP) SetLen(n int) { binary.BigEndian.PutUint16(u[4:6], uint16(n)) }

// Checksum returns the checksum field.
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[6:8]) }

// SetChecksum writes the checksum field.
func (u UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(u[6:8], c) }

// Payload returns the bytes after the header.
func (u UDP) Payload() []byte { return u[UDPHeaderLen:] }

// UDPChecksum returns the value to write in a UDP checksum field for the
// computed checksum c: c itself, or 0xffff when c is 0 (RFC 768; RFC 8200
// for IPv6).
func UDPChecksum(c uint16) uint16 {
	if c == 0 {
		return 0xffff
	}
	return c
}
