package site

import (
	"crypto/ed25519"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// TestCertificateVerifyBudget: certificates seen before are taken from
// the cache; new ones are checked at most maxVerifyRate a second, so a
// flood of forged certificates costs a bounded number of signature
// checks; the budget comes back the next second.
func TestCertificateVerifyBudget(t *testing.T) {
	_, caKey, _ := ed25519.GenerateKey(nil)
	now := time.Unix(1_800_000_000, 0)
	tr, err := newTrust(1, ca.NewAuthority(caKey.Public().(ed25519.PublicKey)), nil)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := keys.Generate(nil)
	good, _ := ca.Sign(caKey, &ca.Certificate{Name: "osaka", Key: k.Public(), Issued: now, Expires: now.Add(time.Hour)})
	if _, ok, err := tr.verify(good, now); !ok || err != nil {
		t.Fatalf("first check: %v %v", ok, err)
	}
	_, other, _ := ed25519.GenerateKey(nil)
	checked := 0
	for i := range 3 * maxVerifyRate {
		forged, _ := ca.Sign(other, &ca.Certificate{Name: "x", Key: k.Public(), Issued: now.Add(time.Duration(i) * time.Second), Expires: now.Add(2 * time.Hour)})
		if _, ok, _ := tr.verify(forged, now); ok {
			checked++
		}
	}
	if checked != maxVerifyRate-1 {
		t.Errorf("%d forged certificates checked in one second, want %d", checked, maxVerifyRate-1)
	}
	if _, ok, err := tr.verify(good, now); !ok || err != nil {
		t.Errorf("a certificate verified before is refused when the budget is spent: %v %v", ok, err)
	}
	if _, ok, _ := tr.verify([]byte("new"), now.Add(time.Second)); !ok {
		t.Errorf("the budget did not come back after a second")
	}
	rev, _ := ca.SignRevocation(caKey, &ca.Revocation{Name: "osaka", At: now})
	tr.auth.Revoke(rev)
	if _, _, err := tr.verify(good, now.Add(time.Second)); err == nil {
		t.Errorf("a cached certificate of a revoked site accepted")
	}
}

// newCANet builds n sites that know only the CA's key and every other
// site's address (as the testbed's --ca overlays are configured), sealed,
// with keys drawn from seed.
func newCANet(t *testing.T, n int, seed uint64, drop func(from int, d Datagram) bool) *net {
	t.Helper()
	caPub, caKey, err := ed25519.GenerateKey(seeded(seed))
	if err != nil {
		t.Fatal(err)
	}
	h := &net{t: t, now: t0, drop: drop}
	for i := range n {
		priv, err := keys.Generate(seeded(seed + uint64(i) + 1))
		if err != nil {
			t.Fatal(err)
		}
		cert, err := ca.Sign(caKey, &ca.Certificate{Name: name(i), Key: priv.Public(), Issued: t0, Expires: t0.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		var boot []netip.AddrPort
		for j := range n {
			if j != i {
				boot = append(boot, addr(j))
			}
		}
		cfg := Config{Control: control.DefaultConfig(name(i), addr(i), boot...), Secure: &Secure{
			Private: priv, Peers: map[wire.SiteID]keys.PublicKey{}, Addrs: map[wire.SiteID]netip.AddrPort{},
			Rand: seeded(seed*1000 + uint64(i)), Authority: ca.NewAuthority(caPub), Certificate: cert}}
		h.add(cfg)
	}
	return h.start()
}

// certificateFrom reports whether d is a certificate message and whether
// it asks for one in reply.
func certificateFrom(d Datagram) (isCert, asks bool) {
	flags, _, _, err := wire.ParseTrust(d.Payload, wire.TypeCertificate)
	if err != nil {
		return false, false
	}
	return true, flags&wire.CertFlagReply != 0
}

// TestCertificateSitesFormDespiteLostCertificates: sites admitted by
// certificate form a full overlay when certificates of s1 are lost on the
// way. Losing its first requests (it started before the others listened)
// must not silence its answers to theirs; when its answers are lost too,
// the handshakes it then sends to sites that lack its key make them ask
// again. Otherwise the others, once members of each other, stop saying
// hello to it, and it stays outside for good.
func TestCertificateSitesFormDespiteLostCertificates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lose   int // how many of s1's first certificates are lost
		asks   bool
		within time.Duration
	}{
		{"nothing lost", 0, false, 50 * time.Millisecond},
		{"first requests lost", 2, true, 50 * time.Millisecond},
		{"first requests and answers lost", 4, false, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lost := 0
			h := newCANet(t, 3, 11, func(from int, d Datagram) bool {
				isCert, asks := certificateFrom(d)
				if from != 1 || !isCert || lost >= tc.lose || (tc.asks && !asks) {
					return false
				}
				lost++
				return true
			})
			start := h.now
			for h.now.Sub(start) < 10*time.Second && !(alive(h.cores[0]) == 2 && alive(h.cores[1]) == 2 && alive(h.cores[2]) == 2) {
				h.run(5 * time.Millisecond)
			}
			took := h.now.Sub(start)
			if lost != tc.lose {
				t.Fatalf("%d of s1's certificates lost, want %d: the scenario did not happen", lost, tc.lose)
			}
			for i, c := range h.cores {
				if alive(c) != 2 {
					t.Errorf("%s sees %d live members after %v, want 2", name(i), alive(c), took)
				}
			}
			if took > tc.within {
				t.Errorf("the overlay formed after %v, want within %v", took, tc.within)
			}
			t.Logf("formed in %v", took)
		})
	}
}
