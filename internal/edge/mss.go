// Package edge holds the federation-edge functions the data path applies to
// frames at a site's border: TCP MSS clamping, so that hosts with a
// 1500-byte MTU never send segments the tunnel cannot carry, and rate
// limiting per virtual network with guaranteed minimum shares.
//
// Everything here works on caller buffers and allocates nothing.
package edge

import "encoding/binary"

// Ethernet, IP and TCP constants used when parsing frames.
const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
	etherTypeVLAN = 0x8100
	protoTCP      = 6
	tcpFlagSYN    = 0x02
	tcpOptEnd     = 0
	tcpOptNOP     = 1
	tcpOptMSS     = 2
)

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
func ClampMSS(frame []byte, v4, v6 uint16) bool {
	if len(frame) < 14 {
		return false
	}
	etype := binary.BigEndian.Uint16(frame[12:14])
	l3 := 14
	if etype == etherTypeVLAN {
		if len(frame) < 18 {
			return false
		}
		etype = binary.BigEndian.Uint16(frame[16:18])
		l3 = 18
	}
	switch etype {
	case etherTypeIPv4:
		return clampIPv4(frame[l3:], v4)
	case etherTypeIPv6:
		return clampIPv6(frame[l3:], v6)
	}
	return false
}

func clampIPv4(p []byte, mss uint16) bool {
	if len(p) < 20 || p[0]>>4 != 4 || p[9] != protoTCP {
		return false
	}
	ihl := int(p[0]&0x0f) * 4
	fragOff := binary.BigEndian.Uint16(p[6:8]) & 0x1fff
	if ihl < 20 || len(p) < ihl || fragOff != 0 {
		return false
	}
	return clampTCP(p[ihl:], mss)
}

func clampIPv6(p []byte, mss uint16) bool {
	// Only TCP directly after the fixed header is clamped; SYNs with
	// extension headers are rare enough to pass unchanged.
	if len(p) < 40 || p[0]>>4 != 6 || p[6] != protoTCP {
		return false
	}
	return clampTCP(p[40:], mss)
}

// clampTCP rewrites the MSS option of a SYN segment.
func clampTCP(t []byte, mss uint16) bool {
	if len(t) < 20 || t[13]&tcpFlagSYN == 0 {
		return false
	}
	doff := int(t[12]>>4) * 4
	if doff < 20 || len(t) < doff {
		return false
	}
	opts := t[20:doff]
	for i := 0; i < len(opts); {
		switch kind := opts[i]; kind {
		case tcpOptEnd:
			return false
		case tcpOptNOP:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return false
		}
		n := int(opts[i+1])
		if n < 2 || i+n > len(opts) {
			return false
		}
		if opts[i] == tcpOptMSS && n == 4 {
			old := binary.BigEndian.Uint16(opts[i+2 : i+4])
			if old <= mss {
				return false
			}
			binary.BigEndian.PutUint16(opts[i+2:i+4], mss)
			// The option's offset from the segment start is 20+i, an
			// even number only if i is even; the checksum update must
			// use the 16-bit word as it is aligned in the segment.
			updateChecksum(t, 20+i+2, old, mss)
			return true
		}
		i += n
	}
	return false
}

// updateChecksum adjusts the TCP checksum (at t[16:18]) for a 16-bit field
// at offset off that changed from old to new (RFC 1624, eqn. 3).
func updateChecksum(t []byte, off int, old, new uint16) {
	if off%2 == 1 {
		// The field straddles two checksum words: fold it as two bytes.
		updateByte(t, off, byte(old>>8), byte(new>>8))
		updateByte(t, off+1, byte(old), byte(new))
		return
	}
	sum := uint32(^binary.BigEndian.Uint16(t[16:18])) + uint32(^old) + uint32(new)
	sum = (sum & 0xffff) + (sum >> 16)
	sum = (sum & 0xffff) + (sum >> 16)
	binary.BigEndian.PutUint16(t[16:18], ^uint16(sum))
}

// updateByte adjusts the checksum for one byte at offset off.
func updateByte(t []byte, off int, old, new byte) {
	var o, n uint16
	if off%2 == 0 {
		o, n = uint16(old)<<8, uint16(new)<<8
	} else {
		o, n = uint16(old), uint16(new)
	}
	sum := uint32(^binary.BigEndian.Uint16(t[16:18])) + uint32(^o) + uint32(n)
	sum = (sum & 0xffff) + (sum >> 16)
	sum = (sum & 0xffff) + (sum >> 16)
	binary.BigEndian.PutUint16(t[16:18], ^uint16(sum))
}
