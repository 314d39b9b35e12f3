package frame

import (
	"encoding/binary"
	"math/bits"
)

// The Internet checksum (RFC 1071) is the one's complement of the one's
// complement sum of the data taken as big-endian 16-bit words, a last odd
// byte padded with a zero byte. Sum accumulates without folding, in 64
// bits, so that data up to a few gigabytes cannot overflow it; Fold
// reduces a sum to 16 bits; Checksum does both and complements.
//
// TCP and UDP checksums also cover a pseudo header built from the IP
// header. For IPv4 (RFC 9293, RFC 768):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        source address                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     destination address                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     zero      |   protocol    |   TCP or UDP length (16 bits) |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// and for IPv6 (RFC 8200, section 8.1):
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:                  source address (16 bytes)                    :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:               destination address (16 bytes)                  :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 upper-layer length (32 bits)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      zero                     |  next header  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Both sum to the sum of the addresses, the protocol and the length, so
// PseudoSum serves both.
//
// When one 16-bit word m of checksummed data changes to m', the checksum
// HC changes to HC' = ~(~HC + ~m + m') (RFC 1624, equation 3), without
// reading the rest of the data. Update16 does that; Update32 and
// UpdateAddr do it for several words. The result equals a full
// recomputation bit for bit (both complement the sum's representative in
// 1..0xffff), except when every checksummed word is zero after the
// change: recomputing gives 0xffff, updating gives 0x0000, the same
// number in one's complement. A TCP or UDP checksum, which covers a
// pseudo header with a non-zero protocol, never meets that case.

// Sum adds b, as big-endian 16-bit words (a last odd byte is the high
// byte of a word), to the unfolded one's complement sum acc.
//
// It adds 32 bytes at a time as four 64-bit words with end-around carry:
// 2^16, 2^32 and 2^64 are all 1 modulo 0xffff, so a one's complement sum
// of 64-bit words folds to the sum of the 16-bit words (RFC 1071, section
// 2 (B)), and the carry chain keeps the loop at one addition per 8 bytes.
func Sum(acc uint64, b []byte) uint64 {
	if len(b) >= 32 {
		var s, c uint64
		for len(b) >= 32 {
			s, c = bits.Add64(s, binary.BigEndian.Uint64(b), c)
			s, c = bits.Add64(s, binary.BigEndian.Uint64(b[8:]), c)
			s, c = bits.Add64(s, binary.BigEndian.Uint64(b[16:]), c)
			s, c = bits.Add64(s, binary.BigEndian.Uint64(b[24:]), c)
			b = b[32:]
		}
		acc += s>>32 + s&0xffffffff + c
	}
	for len(b) >= 8 {
		acc += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	for len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

// Fold reduces a one's complement sum to 16 bits.
func Fold(acc uint64) uint16 {
	for acc > 0xffff {
		acc = (acc >> 16) + (acc & 0xffff)
	}
	return uint16(acc)
}

// Checksum returns the Internet checksum of b, starting from the
// unfolded sum acc (0, or a pseudo header's sum).
func Checksum(b []byte, acc uint64) uint16 { return ^Fold(Sum(acc, b)) }

// PseudoSum returns the sum of the IPv4 or IPv6 pseudo header of a TCP or
// UDP segment of n bytes (header and payload) with protocol proto; src and
// dst are both 4 or both 16 bytes.
func PseudoSum(src, dst []byte, proto uint8, n int) uint64 {
	return Sum(Sum(0, src), dst) + uint64(proto) + uint64(n)
}

// Update16 returns the checksum c updated for a 16-bit word, at an even
// offset of the checksummed data, that changed from old to new (RFC 1624,
// equation 3). A port is such a word.
func Update16(c, old, new uint16) uint16 {
	s := uint32(^c) + uint32(^old) + uint32(new)
	s = (s & 0xffff) + (s >> 16)
	s = (s & 0xffff) + (s >> 16)
	return ^uint16(s)
}

// Update16At is Update16 for a 16-bit field at offset off of the
// checksummed data, which may be odd: such a field straddles two words,
// its high byte the low byte of one and its low byte the high byte of the
// next, so it adds to the sum byte-swapped.
func Update16At(c uint16, off int, old, new uint16) uint16 {
	if off&1 != 0 {
		old, new = bits.ReverseBytes16(old), bits.ReverseBytes16(new)
	}
	return Update16(c, old, new)
}

// UpdatePort returns the TCP or UDP checksum c updated for a port that
// changed from old to new.
func UpdatePort(c, old, new uint16) uint16 { return Update16(c, old, new) }

// Update32 returns the checksum c updated for a 32-bit field, at an even
// offset, that changed from old to new (an IPv4 address, a sequence
// number).
func Update32(c uint16, old, new uint32) uint16 {
	s := uint64(^c) + uint64(^uint16(old>>16)) + uint64(^uint16(old)) + uint64(new>>16) + uint64(new&0xffff)
	return ^Fold(s)
}

// UpdateAddr returns the checksum c updated for an address, at an even
// offset, that changed from old to new; both are 4 (IPv4) or 16 (IPv6)
// bytes. It serves the IPv4 header checksum and, through the pseudo
// header, the TCP and UDP checksums.
func UpdateAddr(c uint16, old, new []byte) uint16 {
	s := uint64(^c)
	for i := 0; i+1 < len(old) && i+1 < len(new); i += 2 {
		s += uint64(^binary.BigEndian.Uint16(old[i:])) + uint64(binary.BigEndian.Uint16(new[i:]))
	}
	return ^Fold(s)
}
