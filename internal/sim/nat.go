package sim

import (
	"net/netip"
	"time"
)

// NAT puts a site behind a network address translator, as an edge site
// behind a home router or a cloud NAT gateway. The site keeps its private
// address (what its core advertises, which reaches nothing); its
// datagrams leave from a public address (the mapping), and a datagram to
// the mapping is let in only from an address the site sent to within
// Timeout (address-and-port-restricted filtering): a NATed site is
// reachable only by those it contacted. With Symmetric, every destination
// gets its own public port (endpoint-dependent mapping), so an address
// learned through a third site is useless and hole punching fails.
type NAT struct {
	Public    netip.AddrPort
	Symmetric bool
	Timeout   time.Duration
	open      map[netip.AddrPort]time.Time      // destinations sent to, when
	ports     map[netip.AddrPort]netip.AddrPort // symmetric: the mapping per destination
}

// DefaultNATTimeout is how long a NAT keeps a mapping open without
// traffic (RFC 4787 asks for at least 2 minutes; many keep 30 s).
const DefaultNATTimeout = 30 * time.Second

// SetNAT puts a site that has not started behind a NAT whose public
// address is public (the first of its ports when symmetric).
func (n *Net) SetNAT(name string, public netip.AddrPort, symmetric bool) {
	s := n.Site(name)
	delete(n.byAddr, s.Addr)
	s.nat = &NAT{Public: public, Symmetric: symmetric, Timeout: DefaultNATTimeout,
		open: map[netip.AddrPort]time.Time{}, ports: map[netip.AddrPort]netip.AddrPort{}}
	n.byAddr[public] = s
}

// Rebind gives a NATed site a new public address, as a NAT that dropped
// its mapping and made another: the old mapping reaches nothing, and the
// new one lets in only those the site sends to from now on.
func (n *Net) Rebind(name string, public netip.AddrPort) {
	s := n.Site(name)
	delete(n.byAddr, s.nat.Public)
	for _, p := range s.nat.ports {
		delete(n.byAddr, p)
	}
	s.nat.Public = public
	clear(s.nat.open)
	clear(s.nat.ports)
	n.byAddr[public] = s
}

// natOut returns the source address of a datagram a NATed site sends to
// to, and opens the filter for replies from to.
func (n *Net) natOut(s *Site, to netip.AddrPort) netip.AddrPort {
	t := s.nat
	t.open[to] = n.now
	if !t.Symmetric {
		return t.Public
	}
	if p, ok := t.ports[to]; ok {
		return p
	}
	p := netip.AddrPortFrom(t.Public.Addr(), t.Public.Port()+uint16(len(t.ports))+1)
	t.ports[to] = p
	n.byAddr[p] = s
	return p
}

// natAdmits reports whether a NATed site's translator lets in a datagram
// from from to its public address to.
func (n *Net) natAdmits(s *Site, to, from netip.AddrPort) bool {
	t := s.nat
	at, ok := t.open[from]
	if !ok || n.now.Sub(at) >= t.Timeout {
		return false
	}
	if t.Symmetric {
		return t.ports[from] == to
	}
	return to == t.Public
}

// PublicAddr returns the address others see a site's datagrams come
// from (its NAT's mapping, or its own address).
func (s *Site) PublicAddr() netip.AddrPort {
	if s.nat != nil {
		return s.nat.Public
	}
	return s.Addr
}
