package frame

// ICMPv6 types of neighbour discovery (RFC 4861), IPv6's ARP.
const (
	ICMPv6NeighbourSolicitation  = 135
	ICMPv6NeighbourAdvertisement = 136
)

// Neighbour says what an Ethernet frame is to neighbour discovery.
type Neighbour uint8

// The kinds of Neighbour.
const (
	NotNeighbour    Neighbour = iota
	NeighbourQuery            // an ARP request or an IPv6 neighbour solicitation
	NeighbourAnswer           // an ARP reply or an IPv6 neighbour advertisement
)

// NeighbourKind returns what the Ethernet frame b is to neighbour
// discovery. IPv6 messages count only with ICMPv6 right after the fixed
// header, as RFC 4861 sends them.
func NeighbourKind(b []byte) Neighbour {
	etype, l3, ok := EtherType(b)
	if !ok {
		return NotNeighbour
	}
	switch etype {
	case EtherTypeARP:
		a, err := ParseARP(b[l3:])
		switch {
		case err != nil:
		case a.Op() == ARPRequest:
			return NeighbourQuery
		case a.Op() == ARPReply:
			return NeighbourAnswer
		}
	case EtherTypeIPv6:
		ip, err := ParseIPv6(b[l3:])
		if err != nil || ip.NextHeader() != ProtoICMPv6 || len(ip) <= IPv6HeaderLen {
			return NotNeighbour
		}
		switch ip[IPv6HeaderLen] {
		case ICMPv6NeighbourSolicitation:
			return NeighbourQuery
		case ICMPv6NeighbourAdvertisement:
			return NeighbourAnswer
		}
	}
	return NotNeighbour
}
