package keys

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/curve25519"
)

func TestGenerateParseRoundTrip(t *testing.T) {
	k, err := Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePrivate(k.String() + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if p != k {
		t.Fatalf("private key changed in round trip")
	}
	pub, err := ParsePublic(k.Public().String())
	if err != nil {
		t.Fatal(err)
	}
	if pub != k.Public() {
		t.Fatalf("public key changed in round trip")
	}
}

func TestPublicMatchesX25519(t *testing.T) {
	k, _ := Generate(bytes.NewReader(bytes.Repeat([]byte{7}, 32)))
	want, _ := curve25519.X25519(k[:], curve25519.Basepoint)
	pub := k.Public()
	if !bytes.Equal(pub[:], want) {
		t.Fatalf("public key differs from X25519")
	}
	if k[0]&7 != 0 || k[31]&128 != 0 || k[31]&64 == 0 {
		t.Fatalf("key not clamped: %x", k)
	}
}

// Two keys from different randomness give different public keys, so a test
// that compares them can fail.
func TestDistinctKeys(t *testing.T) {
	a, _ := Generate(bytes.NewReader(bytes.Repeat([]byte{1}, 32)))
	b, _ := Generate(bytes.NewReader(bytes.Repeat([]byte{2}, 32)))
	if a.Public() == b.Public() {
		t.Fatal("distinct private keys gave the same public key")
	}
}

func TestBadKeys(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "empty"},
		{"not base64!!", "not valid base64"},
		{"AAAA", "decodes to 3 bytes, want 32"},
		{strings.Repeat("A", 43) + "=", "all zeros"},
		{strings.Repeat("QUJD", 12), "decodes to 36 bytes"},
	}
	for _, c := range cases {
		_, err := ParsePublic(c.in)
		if err == nil || !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePublic(%q) = %v, want error containing %q", c.in, err, c.want)
		}
	}
	if _, err := ParsePrivate("AAAA"); !errors.Is(err, ErrBadKey) {
		t.Errorf("ParsePrivate of a short key: %v", err)
	}
	var k PublicKey
	if err := k.UnmarshalText([]byte("AAAA")); !errors.Is(err, ErrBadKey) {
		t.Errorf("UnmarshalText of a short key: %v", err)
	}
}

func TestGenerateFailsOnShortRandomness(t *testing.T) {
	if _, err := Generate(bytes.NewReader([]byte{1, 2, 3})); err == nil {
		t.Fatal("Generate succeeded with 3 bytes of randomness")
	}
}
