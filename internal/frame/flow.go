package frame

import "encoding/binary"

// Flow is the 5-tuple of a TCP or UDP packet: what the data path's flow
// classes (bulk or latency) are kept by. It is comparable, so it can key a
// map or a hand-made table.
//
//	Src, Dst   16 bytes each: an IPv6 address, or an IPv4 address in
//	           the first 4 bytes and zeros after (V6 tells them apart)
//	SrcPort    the TCP or UDP source port
//	DstPort    the destination port
//	Proto      ProtoTCP or ProtoUDP
//	V6         IPv6
type Flow struct {
	Src, Dst         [16]byte
	SrcPort, DstPort uint16
	Proto            uint8
	V6               bool
}

// ParseFlow parses the Ethernet frame b (as Parse does) and, when it holds
// an unfragmented TCP segment or UDP datagram over IPv4 or IPv6, fills k
// with its 5-tuple and reports true together with the packet's DSCP (the
// upper six bits of the IPv4 TOS or IPv6 traffic class byte). Everything
// else reports false and leaves k unspecified: a frame that is not IP,
// another protocol, any fragment (a later fragment has no ports, so the
// first one is left out too, keeping the fragments of a packet together),
// or an upper-layer header shorter than its ports.
func ParseFlow(b []byte, f *Frame, k *Flow) (dscp uint8, ok bool) {
	if Parse(b, f) != nil || f.Frag != FragNone || f.Proto != ProtoTCP && f.Proto != ProtoUDP {
		return 0, false
	}
	if f.End-f.L4 < 4 {
		return 0, false
	}
	var tos uint8
	if f.V6 {
		ip := IPv6(b[f.L3:f.End])
		tos = ip.TrafficClass()
		k.Src, k.Dst = [16]byte(ip[8:24]), [16]byte(ip[24:40])
	} else {
		ip := IPv4(b[f.L3:f.End])
		tos = ip.TOS()
		k.Src, k.Dst = [16]byte{}, [16]byte{}
		copy(k.Src[:], ip[12:16])
		copy(k.Dst[:], ip[16:20])
	}
	l4 := b[f.L4:f.End]
	k.SrcPort = binary.BigEndian.Uint16(l4[0:2])
	k.DstPort = binary.BigEndian.Uint16(l4[2:4])
	k.Proto, k.V6 = f.Proto, f.V6
	return tos >> 2, true
}

// Hash mixes the 5-tuple with seed into 64 bits, for a table indexed by
// flow. A random seed per table keeps a sender who knows the function from
// choosing flows that collide.
func (k *Flow) Hash(seed uint64) uint64 {
	h := seed ^ 0x9e3779b97f4a7c15
	h = mix(h, binary.LittleEndian.Uint64(k.Src[0:8]))
	h = mix(h, binary.LittleEndian.Uint64(k.Src[8:16]))
	h = mix(h, binary.LittleEndian.Uint64(k.Dst[0:8]))
	h = mix(h, binary.LittleEndian.Uint64(k.Dst[8:16]))
	v := uint64(k.SrcPort)<<32 | uint64(k.DstPort)<<16 | uint64(k.Proto)<<8
	if k.V6 {
		v |= 1
	}
	return mix(h, v)
}

// mix folds v into h: a multiply-xorshift step in the manner of
// splitmix64, good enough to spread flows over a table's sets.
func mix(h, v uint64) uint64 {
	h ^= v
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	return h ^ h>>29
}
