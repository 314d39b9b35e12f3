package sim

import (
	"crypto/ed25519"
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/site"
	"github.com/detour-overlay/detour/internal/wire"
)

// SealedCA returns an empty sealed network whose sites know no other
// site's key: each holds a certificate for its key from an overlay CA
// drawn from the seed, and the CA's public key, and admits the others by
// their certificates, as agents configured with ca_public_key and
// certificate_file. Bootstrap sites are known by address only.
func SealedCA(seed uint64) *Net {
	n := Sealed(seed)
	var s [ed25519.SeedSize]byte
	if _, err := n.seeded(3).Read(s[:]); err != nil {
		panic("sim: " + err.Error())
	}
	n.caKey = ed25519.NewKeyFromSeed(s[:])
	return n
}

// CAKey returns the overlay CA's private key of a SealedCA network.
func (n *Net) CAKey() ed25519.PrivateKey { return n.caKey }

// Certify returns a certificate for a site's key, issued an hour before
// the start of the simulation (or at issued, when not zero) and valid
// for a day from then.
func (n *Net) Certify(name string, key keys.PublicKey, issued time.Time) []byte {
	if issued.IsZero() {
		issued = Start.Add(-time.Hour)
	}
	b, err := ca.Sign(n.caKey, &ca.Certificate{Name: name, Key: key, Issued: issued, Expires: issued.Add(24 * time.Hour)})
	if err != nil {
		panic("sim: " + err.Error())
	}
	return b
}

// caSecure returns a site's keys on a SealedCA network: its own key and
// certificate and the CA's public key; no peer keys, no peer addresses.
func (n *Net) caSecure(s *Site) *site.Secure {
	cert := s.Cert
	if cert == nil {
		cert = n.Certify(s.Name, s.Key.Public(), time.Time{})
	}
	return &site.Secure{Private: s.Key, Peers: map[wire.SiteID]keys.PublicKey{}, Addrs: map[wire.SiteID]netip.AddrPort{},
		Rand: n.seeded(2, uint64(s.index), s.starts), Authority: ca.NewAuthority(n.caKey.Public().(ed25519.PublicKey)),
		Certificate: cert}
}
