package ca

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testCA(t testing.TB, seed byte) ed25519.PrivateKey {
	t.Helper()
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func siteKey(seed byte) keys.PublicKey {
	k, _ := keys.Generate(bytes.NewReader(bytes.Repeat([]byte{seed}, keys.Len)))
	return k.Public()
}

func TestCertificateLifecycle(t *testing.T) {
	caKey := testCA(t, 1)
	auth := NewAuthority(caKey.Public().(ed25519.PublicKey))
	c := Certificate{Name: "osaka", Key: siteKey(7), Issued: t0, Expires: t0.Add(24 * time.Hour)}
	b, err := Sign(caKey, &c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := auth.Verify(b, t0.Add(time.Hour))
	if err != nil || got.Name != "osaka" || got.Key != c.Key || !got.Expires.Equal(c.Expires) {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
	if _, err := auth.Verify(b, t0.Add(25*time.Hour)); !errors.Is(err, ErrExpired) {
		t.Errorf("expired certificate: %v", err)
	}
	// Another CA's signature, and any flipped bit, are refused.
	other, _ := Sign(testCA(t, 2), &Certificate{Name: "osaka", Key: c.Key, Issued: t0, Expires: c.Expires})
	if _, err := auth.Verify(other, t0); !errors.Is(err, ErrSignature) {
		t.Errorf("other CA: %v", err)
	}
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x10
		if _, err := auth.Verify(bad, t0.Add(time.Hour)); err == nil {
			t.Fatalf("bit flipped in byte %d accepted", i)
		}
	}
	// Revocation: refuses the certificate; a replay or older one is not new.
	r, _ := SignRevocation(caKey, &Revocation{Name: "osaka", At: t0.Add(2 * time.Hour)})
	if _, fresh, err := auth.Revoke(r); err != nil || !fresh {
		t.Fatalf("Revoke = %v, %v", fresh, err)
	}
	if _, fresh, _ := auth.Revoke(r); fresh {
		t.Errorf("the same revocation counted as new twice")
	}
	if _, err := auth.Verify(b, t0.Add(3*time.Hour)); !errors.Is(err, ErrRevoked) {
		t.Errorf("revoked certificate: %v", err)
	}
	// A certificate issued after the revocation (a new key) is accepted.
	later, _ := Sign(caKey, &Certificate{Name: "osaka", Key: siteKey(8), Issued: t0.Add(3 * time.Hour), Expires: t0.Add(48 * time.Hour)})
	if _, err := auth.Verify(later, t0.Add(4*time.Hour)); err != nil {
		t.Errorf("certificate issued after the revocation: %v", err)
	}
	forged, _ := SignRevocation(testCA(t, 2), &Revocation{Name: "kyoto", At: t0})
	if _, _, err := auth.Revoke(forged); !errors.Is(err, ErrSignature) {
		t.Errorf("forged revocation: %v", err)
	}
}

func TestTextForms(t *testing.T) {
	caKey := testCA(t, 3)
	priv, err := ParsePrivate(Encode(caKey.Seed()))
	if err != nil || !priv.Equal(caKey) {
		t.Fatalf("private key round trip: %v", err)
	}
	pub, err := ParsePublic(Encode(caKey.Public().(ed25519.PublicKey)))
	if err != nil || !pub.Equal(caKey.Public()) {
		t.Fatalf("public key round trip: %v", err)
	}
	if _, err := ParsePublic("AAAA"); err == nil {
		t.Errorf("short public key accepted")
	}
}

// FuzzParse: the parsers never panic, and what parses re-encodes to the
// same bytes.
func FuzzParse(f *testing.F) {
	caKey := testCA(f, 1)
	c, _ := Sign(caKey, &Certificate{Name: "osaka", Key: siteKey(7), Issued: t0, Expires: t0.Add(time.Hour)})
	r, _ := SignRevocation(caKey, &Revocation{Name: "osaka", At: t0})
	f.Add(c)
	f.Add(r)
	f.Add([]byte{0xD7, 'C', 1, 0})
	auth := NewAuthority(caKey.Public().(ed25519.PublicKey))
	f.Fuzz(func(t *testing.T, b []byte) {
		if cert, err := ParseCertificate(b); err == nil {
			if enc := append(cert.body(nil), cert.Signature[:]...); !bytes.Equal(enc, b) {
				t.Fatalf("certificate re-encodes differently")
			}
			auth.Verify(b, t0)
		}
		if rev, err := ParseRevocation(b); err == nil {
			if enc := append(rev.body(nil), rev.Signature[:]...); !bytes.Equal(enc, b) {
				t.Fatalf("revocation re-encodes differently")
			}
			auth.Revoke(b)
		}
	})
}
