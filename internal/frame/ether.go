package frame

import "encoding/binary"

// An Ethernet II header, optionally with one 802.1Q tag between the
// source address and the EtherType:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    destination MAC address                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    (destination, cont.)       |      source MAC address       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     (source, cont.)                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+ -.
//	|      TPID 0x8100              | PCP |D|        VLAN ID        |  | 802.1Q tag,
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+ -' optional
//	|          EtherType            |  payload (IPv4, IPv6, ARP...)
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The PCP, DEI and VLAN ID together are the tag control information
// (TCI). The payload starts at byte 14, or 18 with a tag. Frames come
// without preamble and FCS, as TAP devices give them.

// Sizes and EtherTypes of the link layer.
const (
	EtherHeaderLen = 14 // destination, source, EtherType
	VLANTagLen     = 4  // TPID and TCI
	MACLen         = 6

	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeVLAN = 0x8100 // 802.1Q
	EtherTypeIPv6 = 0x86DD
)

// ParseLink fills the link fields of f (EtherType, VLAN, TCI, L3) from
// the Ethernet header of b and clears the others. It fails with
// ErrTruncated when b is shorter than the header.
func ParseLink(b []byte, f *Frame) error {
	*f = Frame{}
	if len(b) < EtherHeaderLen {
		return ErrTruncated
	}
	f.EtherType, f.L3 = binary.BigEndian.Uint16(b[12:14]), EtherHeaderLen
	if f.EtherType == EtherTypeVLAN {
		if len(b) < EtherHeaderLen+VLANTagLen {
			return ErrTruncated
		}
		f.VLAN, f.TCI = true, binary.BigEndian.Uint16(b[14:16])
		f.EtherType, f.L3 = binary.BigEndian.Uint16(b[16:18]), EtherHeaderLen+VLANTagLen
	}
	return nil
}

// EtherType returns the EtherType of the Ethernet frame b, after its
// 802.1Q tag if it has one, and the offset of the payload (14 or 18), for
// callers that need nothing else of the link header; ok is false when b
// is shorter than its header.
func EtherType(b []byte) (etype uint16, l3 int, ok bool) {
	if len(b) < EtherHeaderLen {
		return 0, 0, false
	}
	etype = binary.BigEndian.Uint16(b[12:14])
	if etype != EtherTypeVLAN {
		return etype, EtherHeaderLen, true
	}
	if len(b) < EtherHeaderLen+VLANTagLen {
		return 0, 0, false
	}
	return binary.BigEndian.Uint16(b[16:18]), EtherHeaderLen + VLANTagLen, true
}

// Dst returns the destination address of the Ethernet frame b, which must
// hold at least EtherHeaderLen bytes.
func Dst(b []byte) []byte { return b[0:6:6] }

// Src returns the source address of the Ethernet frame b, which must hold
// at least EtherHeaderLen bytes.
func Src(b []byte) []byte { return b[6:12:12] }

// IsGroup reports whether the MAC address mac is a group address
// (multicast or broadcast: the I/G bit is set).
func IsGroup(mac []byte) bool { return mac[0]&0x01 != 0 }

// PutEthernet writes an Ethernet header into b: dst, src, an 802.1Q tag
// with control information tci when vlan is set, and etype. It returns
// the header length (14 or 18); b must hold that many bytes.
func PutEthernet(b, dst, src []byte, vlan bool, tci, etype uint16) int {
	copy(b[0:6], dst)
	copy(b[6:12], src)
	if !vlan {
		binary.BigEndian.PutUint16(b[12:14], etype)
		return EtherHeaderLen
	}
	binary.BigEndian.PutUint16(b[12:14], EtherTypeVLAN)
	binary.BigEndian.PutUint16(b[14:16], tci)
	binary.BigEndian.PutUint16(b[16:18], etype)
	return EtherHeaderLen + VLANTagLen
}
