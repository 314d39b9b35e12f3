package sim

import (
	"net/netip"
	"slices"

	"github.com/detour-overlay/detour/internal/keys"
)

// AddrOf6 returns an IPv6 underlay address for the i-th site, in the
// unique local range fd00:d7::/32 (the simulator sends nothing to it).
func AddrOf6(i int) netip.AddrPort {
	var a [16]byte
	a[0], a[1], a[3] = 0xfd, 0x00, 0xd7
	a[14], a[15] = byte(i>>8), byte(i)
	return netip.AddrPortFrom(netip.AddrFrom16(a), 4789)
}

// Readdress gives a site that has not started a new underlay address:
// its advertised address, and every other site's bootstrap list that
// named the old one, follow.
func (n *Net) Readdress(name string, addr netip.AddrPort) {
	s := n.Site(name)
	old := s.Addr
	delete(n.byAddr, old)
	s.Addr = addr
	s.Config.Advertise = addr
	n.byAddr[addr] = s
	for _, o := range n.sites {
		if i := slices.Index(o.Config.Bootstrap, old); i >= 0 {
			o.Config.Bootstrap[i] = addr
		}
	}
}

// Seal makes a network whose sites are added but not started seal its
// control traffic, as if made by Sealed (FromScenario builds clear ones):
// every site gets its key drawn from the seed.
func (n *Net) Seal() {
	n.sealed = true
	for i, s := range n.sites {
		k, err := keys.Generate(n.seeded(1, uint64(i)))
		if err != nil {
			panic("sim: " + err.Error()) // a ChaCha8 stream does not fail
		}
		s.Key = k
	}
}

// Move changes the source address of a running site's datagrams, as a
// NAT that gives it a new mapping or a gateway that moved: datagrams come
// from the new address and only the new address reaches it. Its core is
// not told (it keeps advertising the address it was configured with).
func (n *Net) Move(name string, addr netip.AddrPort) {
	s := n.Site(name)
	delete(n.byAddr, s.Addr)
	s.Addr = addr
	n.byAddr[addr] = s
}
