package offload

import (
	"encoding/binary"

	"github.com/detour-overlay/detour/internal/frame"
)

// The names the tests of this package use for values and functions of
// package frame.
const (
	protoUDP   = frame.ProtoUDP
	tcpFlagFIN = frame.TCPFlagFIN
	tcpFlagSYN = frame.TCPFlagSYN
	tcpFlagRST = frame.TCPFlagRST
	tcpFlagPSH = frame.TCPFlagPSH
	tcpFlagACK = frame.TCPFlagACK
	tcpFlagURG = frame.TCPFlagURG
	tcpFlagECE = frame.TCPFlagECE
	tcpFlagCWR = frame.TCPFlagCWR
)

// sum adds b to the one's complement sum acc (frame.Sum).
func sum(acc uint64, b []byte) uint64 { return frame.Sum(acc, b) }

// fold reduces a one's complement sum to 16 bits (frame.Fold).
func fold(acc uint64) uint16 { return frame.Fold(acc) }

// pseudoSum is the sum of a pseudo header (frame.PseudoSum).
func pseudoSum(src, dst []byte, proto uint8, n int) uint64 {
	return frame.PseudoSum(src, dst, proto, n)
}

// ipv4HeaderChecksum computes and writes the checksum of the IPv4 header
// h, all of whose bytes it covers.
func ipv4HeaderChecksum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], frame.Checksum(h, 0))
}
