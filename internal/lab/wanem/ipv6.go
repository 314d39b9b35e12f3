package wanem

import "net/netip"

// IPv6Of is the IPv6 underlay address of the gateway whose IPv4 underlay
// address is a: fd18::/96 followed by the IPv4 address (198.18.0.1 is
// fd18::c612:1). The emulator carries a gateway's IPv6 packets as its IPv4
// ones, so a testbed may give its gateways IPv6 underlay addresses
// (testbed's UnderlayIPv6) with nothing else to configure.
func IPv6Of(a netip.Addr) netip.Addr {
	v4 := a.As4()
	return netip.AddrFrom16([16]byte{0xfd, 0x18, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
}

// destination6 returns the site of an IPv6 packet's destination, or -1.
func (e *Emulator) destination6(pkt []byte) int {
	if len(pkt) < 40 {
		return -1
	}
	if i, ok := e.byAddr[netip.AddrFrom16([16]byte(pkt[24:40]))]; ok {
		return i
	}
	return -1
}
