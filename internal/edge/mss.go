// Package edge holds the federation-edge functions the data path applies to
// frames at a site's border: TCP MSS clamping, so that hosts with a
// 1500-byte MTU never send segments the tunnel cannot carry, ICMP "too
// big" answers for segments that are already too large, and rate limiting
// per virtual network with guaranteed minimum shares.
//
// Frames are parsed with package frame. Everything here works on caller
// buffers and allocates nothing.
package edge

import "github.com/detour-overlay/detour/internal/frame"

// MSSForMTU returns the largest TCP segment (MSS) for IPv4 and for IPv6
// that fits in an inner IP MTU of mtu bytes.
func MSSForMTU(mtu int) (v4, v6 uint16) {
	return uint16(max(mtu-40, 536)), uint16(max(mtu-60, 1220))
}

// ClampMSS lowers the MSS option of a TCP SYN (or SYN-ACK) carried in an
// Ethernet frame to at most v4 (IPv4) or v6 (IPv6), updating the TCP
// checksum incrementally (RFC 1624). It reports whether it changed the
// frame. Frames that are not TCP SYNs, or that do not parse, are left
// alone.
//
// Only the headers are checked, not the IP length: the TCP header is
// taken from the end of the IP header to the end of the frame. An IPv4
// first fragment is clamped, a later one is not; over IPv6 only TCP
// directly after the fixed header is clamped (SYNs with extension headers
// are rare enough to pass unchanged).
func ClampMSS(b []byte, v4, v6 uint16) bool {
	etype, l3, ok := frame.EtherType(b)
	if !ok {
		return false
	}
	switch etype {
	case frame.EtherTypeIPv4:
		ip, err := frame.ParseIPv4(b[l3:])
		if err != nil || ip.Proto() != frame.ProtoTCP || ip.FragOffset() != 0 {
			return false
		}
		return clampTCP(ip[ip.HeaderLen():], v4)
	case frame.EtherTypeIPv6:
		ip, err := frame.ParseIPv6(b[l3:])
		if err != nil || ip.NextHeader() != frame.ProtoTCP {
			return false
		}
		return clampTCP(ip[frame.IPv6HeaderLen:], v6)
	}
	return false
}

// clampTCP rewrites the MSS option of a SYN segment.
func clampTCP(seg []byte, mss uint16) bool {
	t, err := frame.ParseTCP(seg)
	if err != nil || t.Flags()&frame.TCPFlagSYN == 0 {
		return false
	}
	old, off, ok := t.MSS()
	if !ok || old <= mss {
		return false
	}
	t.SetMSS(off, mss)
	return true
}
