package offload

import "encoding/binary"

// sum adds b, as big-endian 16-bit words, to the one's-complement sum acc
// (not folded).
func sum(acc uint64, b []byte) uint64 {
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

// fold reduces a one's-complement sum to 16 bits.
func fold(acc uint64) uint16 {
	for acc > 0xffff {
		acc = (acc >> 16) + (acc & 0xffff)
	}
	return uint16(acc)
}

// pseudoSum is the sum of the IPv4 or IPv6 pseudo-header of an L4 segment
// of length n with protocol proto; src and dst are 4 or 16 bytes.
func pseudoSum(src, dst []byte, proto uint8, n int) uint64 {
	acc := sum(0, src)
	acc = sum(acc, dst)
	return acc + uint64(proto) + uint64(n)
}

// ipv4HeaderChecksum recomputes the header checksum of the IPv4 header h.
func ipv4HeaderChecksum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ^fold(sum(0, h)))
}
