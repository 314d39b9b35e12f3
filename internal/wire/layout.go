package wire

// The layout of a data packet in a gateway's buffers, and what the
// underlay adds to a host's packet.
//
// A frame read from a device is placed Headroom bytes into its buffer, so
// that the data header and the security block can be written in front of
// it in place, whatever the path, and Tailroom bytes are kept after it for
// the tag. On the underlay a data packet for a path of n sites is
//
//	+-------------------+ -.
//	| outer IP header   |  | 20 (IPv4) or 40 (IPv6): OuterIPv4Len, OuterIPv6Len
//	+-------------------+  |
//	| UDP header        |  | 8: OuterUDPLen
//	+-------------------+  |  -. the UDP payload
//	| data header       |  |   | 20 + 4n
//	+-------------------+  |   |
//	| e2e fields        |  |   | 12, sealed only
//	+-------------------+  |   |
//	| hop fields + tag  |  |   | 28, sealed and n > 1 only
//	+-------------------+  |   |
//	| Ethernet header   |  |   | 14: InnerEtherLen (18 with an 802.1Q tag)
//	+-------------------+  |   |
//	| the host's IP     |  |   | InnerMTU
//	| packet            |  |   |
//	+-------------------+  |   |
//	| e2e tag           |  |   | 16, sealed only
//	+-------------------+ -' -'
//	       = the underlay MTU when the host's packet is InnerMTU bytes
//
// DataOverhead is what a data packet adds to the Ethernet frame: 20 + 4n
// bytes in the clear; sealed, 48 + 4n on a direct path (n = 1) and 76 +
// 4n through relays.
//
// So with an IPv4 underlay of MTU 1500, encryption and paths of up to
// three sites (max_hops 3), a host's IP packet may have 1500 - 20 - 8 -
// (20 + 12) - 12 - 28 - 16 - 14 = 1370 bytes, and a TCP segment over IPv4
// an MSS of 1370 - 40 = 1330. The hop tag is one of the 28 bytes of the
// hop fields, and the e2e tag the only other tag: two tags, 32 bytes, in
// all. A frame with an 802.1Q tag is 4 bytes longer; at full size the
// underlay fragments it.

// Headers around a data packet.
const (
	OuterIPv4Len  = 20 // outer IPv4 header, without options
	OuterIPv6Len  = 40 // outer IPv6 header, without extension headers
	OuterUDPLen   = 8
	InnerEtherLen = 14 // the carried frame's Ethernet header, untagged
)

// Headroom is the space kept in front of a frame read from a device: the
// data header of the longest path and its security block
// (FrameOffset(MaxPath, true), 92 bytes). Tailroom is kept after it for
// the end-to-end tag.
const (
	Headroom = DataFixedLen + 4*MaxPath + SealedDataE2ELen + SealedDataHopLen
	Tailroom = TagLen
)

// FrameOffset returns where the Ethernet frame starts in a data packet
// whose path has pathLen sites: after the header and, if the packet is
// sealed, the security block.
func FrameOffset(pathLen int, sealed bool) int {
	if !sealed {
		return DataHeaderLen(pathLen)
	}
	return DataHeaderLen(pathLen) + SealedDataPrefixLen(pathLen)
}

// DataOverhead returns the bytes a data packet for a path of pathLen
// sites adds to the Ethernet frame it carries: the data header and, if
// sealed, the security block and the end-to-end tag.
func DataOverhead(pathLen int, sealed bool) int {
	if !sealed {
		return DataHeaderLen(pathLen)
	}
	return DataHeaderLen(pathLen) + SealedDataOverhead(pathLen)
}

// InnerMTU returns the largest IP packet of a host that crosses an
// underlay of MTU underlayMTU unfragmented in a data packet for a path of
// pathLen sites, over IPv6 or IPv4 (ipv6) and sealed or not: the underlay
// MTU less the outer IP and UDP headers, DataOverhead and the untagged
// inner Ethernet header.
func InnerMTU(underlayMTU, pathLen int, sealed, ipv6 bool) int {
	outer := OuterIPv4Len
	if ipv6 {
		outer = OuterIPv6Len
	}
	return underlayMTU - outer - OuterUDPLen - DataOverhead(pathLen, sealed) - InnerEtherLen
}
