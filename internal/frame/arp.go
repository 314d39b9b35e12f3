package frame

import "encoding/binary"

// An ARP message for IPv4 over Ethernet (RFC 826), after an Ethernet
// header with EtherType 0x0806:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   hardware type = 1 (Ethernet)| protocol type = 0x0800 (IPv4) |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| hw len = 6    | proto len = 4 | operation (1 request, 2 reply)|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 sender hardware address (6)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        (cont.)                | sender protocol address (4)   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        (cont.)                | target hardware address (6)   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           (cont.)                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 target protocol address (4)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A request asks who has the target protocol address; the reply comes
// from that address's owner, its sender fields its own, its target fields
// the requester's.

// Sizes and operations of ARP.
const (
	ARPLen     = 28
	ARPRequest = 1
	ARPReply   = 2
)

// ARP is a view of an ARP message for IPv4 over Ethernet.
type ARP []byte

// ParseARP checks that b starts with an ARP message for IPv4 over
// Ethernet (hardware type 1, protocol type 0x0800, lengths 6 and 4) and
// returns a view of its 28 bytes. The operation is not checked.
func ParseARP(b []byte) (ARP, error) {
	if len(b) < ARPLen {
		return nil, ErrTruncated
	}
	if binary.BigEndian.Uint16(b[0:2]) != 1 || binary.BigEndian.Uint16(b[2:4]) != EtherTypeIPv4 || b[4] != MACLen || b[5] != 4 {
		return nil, ErrMalformed
	}
	return ARP(b[:ARPLen:ARPLen]), nil
}

// Op returns the operation (ARPRequest, ARPReply or another value).
func (a ARP) Op() uint16 { return binary.BigEndian.Uint16(a[6:8]) }

// SenderMAC returns the sender hardware address.
func (a ARP) SenderMAC() []byte { return a[8:14:14] }

// SenderIP returns the sender protocol address.
func (a ARP) SenderIP() []byte { return a[14:18:18] }

// TargetMAC returns the target hardware address.
func (a ARP) TargetMAC() []byte { return a[18:24:24] }

// TargetIP returns the target protocol address.
func (a ARP) TargetIP() []byte { return a[24:28:28] }

// PutARP writes an ARP message for IPv4 over Ethernet into b (28 bytes).
func PutARP(b []byte, op uint16, senderMAC, senderIP, targetMAC, targetIP []byte) {
	binary.BigEndian.PutUint16(b[0:2], 1)
	binary.BigEndian.PutUint16(b[2:4], EtherTypeIPv4)
	b[4], b[5] = MACLen, 4
	binary.BigEndian.PutUint16(b[6:8], op)
	copy(b[8:14], senderMAC)
	copy(b[14:18], senderIP)
	copy(b[18:24], targetMAC)
	copy(b[24:28], targetIP)
}

// PutARPReply writes into out the Ethernet frame that answers the ARP
// request req, found in a frame whose link header f describes: from mac,
// claiming req's target address, to the requester, with the request's
// VLAN tag. It returns the frame's length (42, or 46 with a tag; short
// frames are padded by the NIC, a TAP device takes them as they are), or
// 0 when out is too short. out must not overlap the request. Whether to answer (operation, target address)
// is the caller's decision.
func PutARPReply(out []byte, f *Frame, req ARP, mac []byte) int {
	n := EtherHeaderLen + ARPLen
	if f.VLAN {
		n += VLANTagLen
	}
	if len(out) < n {
		return 0
	}
	l := PutEthernet(out, req.SenderMAC(), mac, f.VLAN, f.TCI, EtherTypeARP)
	PutARP(out[l:], ARPReply, mac, req.TargetIP(), req.SenderMAC(), req.SenderIP())
	return n
}
