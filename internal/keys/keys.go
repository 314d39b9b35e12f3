// Package keys holds the Curve25519 static keys that identify detour sites.
//
// A site's private key is 32 random bytes (clamped as X25519 expects); its
// public key is the X25519 product with the base point. Both are written as
// standard base64 (44 characters, like WireGuard keys): `detour genkey`
// prints a private key and `detour pubkey` derives the public key from it.
//
// Parsing gives one clear error for every bad key, wrapping ErrBadKey, so
// that a configuration loader can report the field and line:
//
//	var k keys.PublicKey
//	if err := k.UnmarshalText([]byte(s)); err != nil { ... } // "bad key: ..."
package keys

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/curve25519"
)

// Len is the length in bytes of private and public keys.
const Len = 32

// PrivateKey is a site's Curve25519 private key.
type PrivateKey [Len]byte

// PublicKey is a site's Curve25519 public key.
type PublicKey [Len]byte

// ErrBadKey is wrapped by every key parsing error.
var ErrBadKey = errors.New("bad key")

// Generate returns a new clamped private key read from r, or from
// crypto/rand when r is nil.
func Generate(r io.Reader) (PrivateKey, error) {
	if r == nil {
		r = rand.Reader
	}
	var k PrivateKey
	if _, err := io.ReadFull(r, k[:]); err != nil {
		return PrivateKey{}, fmt.Errorf("keys: reading randomness: %w", err)
	}
	k.clamp()
	return k, nil
}

// clamp applies the X25519 clamping so that the stored key is the scalar
// actually used.
func (k *PrivateKey) clamp() {
	k[0] &= 248
	k[31] = (k[31] & 127) | 64
}

// Public returns the public key of k.
func (k PrivateKey) Public() PublicKey {
	var p PublicKey
	out, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err != nil {
		// X25519 with the base point fails only for a zero scalar, which
		// clamping rules out; a zero public key is then never accepted.
		return p
	}
	copy(p[:], out)
	return p
}

// IsZero reports whether k is all zeros (an unset key).
func (k PublicKey) IsZero() bool {
	var z PublicKey
	return subtle.ConstantTimeCompare(k[:], z[:]) == 1
}

// String returns the base64 form of k.
func (k PublicKey) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// String returns the base64 form of k. Take care where it is printed.
func (k PrivateKey) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// decode parses a base64 key, naming the problem in one error.
func decode(s string) ([Len]byte, error) {
	var k [Len]byte
	s = strings.TrimSpace(s)
	if s == "" {
		return k, fmt.Errorf("%w: empty (want %d bytes in base64, e.g. from 'detour genkey')", ErrBadKey, Len)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return k, fmt.Errorf("%w: not valid base64 (%v)", ErrBadKey, err)
	}
	if len(b) != Len {
		return k, fmt.Errorf("%w: decodes to %d bytes, want %d", ErrBadKey, len(b), Len)
	}
	copy(k[:], b)
	return k, nil
}

// ParsePrivate parses a base64 private key. Surrounding white space is
// ignored. The key is clamped.
func ParsePrivate(s string) (PrivateKey, error) {
	b, err := decode(s)
	if err != nil {
		return PrivateKey{}, err
	}
	k := PrivateKey(b)
	k.clamp()
	return k, nil
}

// ParsePublic parses a base64 public key. The all-zero key is rejected.
func ParsePublic(s string) (PublicKey, error) {
	b, err := decode(s)
	if err != nil {
		return PublicKey{}, err
	}
	k := PublicKey(b)
	if k.IsZero() {
		return PublicKey{}, fmt.Errorf("%w: all zeros", ErrBadKey)
	}
	return k, nil
}

// UnmarshalText implements encoding.TextUnmarshaler (YAML and JSON).
func (k *PrivateKey) UnmarshalText(b []byte) error {
	p, err := ParsePrivate(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// UnmarshalText implements encoding.TextUnmarshaler (YAML and JSON).
func (k *PublicKey) UnmarshalText(b []byte) error {
	p, err := ParsePublic(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (k PublicKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }
