package site

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/keys"
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
