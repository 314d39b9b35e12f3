// Package ca is detour's overlay trust root: an ed25519 key (the overlay
// CA) that signs site certificates (a site's name and Curve25519 public
// key, valid until an expiry) and revocations (a site's name: every
// certificate for it issued until then stops being accepted). An agent
// configured with the CA's public key accepts any site presenting a
// valid, unexpired, unrevoked certificate, so a site joins without any
// other site's configuration changing, after Nebula's certificates.
//
// Everything here is pure: times are arguments, and nothing is read or
// written but byte slices. Files hold the binary forms below in base64
// (one line), so that they can be pasted into configuration and mail.
//
// Certificate (version 1):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |  kind 'C'     |  version 1    |  name length  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:               site name, 1..64 bytes                          :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               site public key (Curve25519, 32 bytes)          |
//	:                                                               :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               issued at (Unix seconds, 64 bits)               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               expires at (Unix seconds, 64 bits)              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      ed25519 signature of the CA over all the above (64)      |
//	:                                                               :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Revocation (version 1): the same first word with kind 'R', the site
// name, the time of revocation (Unix seconds, 64 bits) and the CA's
// signature over all of it. It revokes every certificate of that site
// issued at or before that time; a certificate issued later (a new key
// for a site readmitted) is accepted again.
package ca

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
)

// MaxNameLen is the longest site name in a certificate, as on the wire.
const MaxNameLen = 64

const (
	magic   = 0xD7
	version = 1
	kindC   = 'C'
	kindR   = 'R'
	sigLen  = ed25519.SignatureSize
	// CertMaxLen bounds an encoded certificate.
	CertMaxLen = 4 + MaxNameLen + keys.Len + 16 + sigLen
)

// Errors; every refusal wraps one of them.
var (
	ErrMalformed = errors.New("ca: malformed")
	ErrSignature = errors.New("ca: not signed by the overlay CA")
	ErrExpired   = errors.New("ca: certificate expired or not yet valid")
	ErrRevoked   = errors.New("ca: site revoked")
)

// Certificate binds a site name to its public key until Expires.
type Certificate struct {
	Name    string
	Key     keys.PublicKey
	Issued  time.Time
	Expires time.Time
	// Signature is the CA's signature, set by Sign and Parse.
	Signature [sigLen]byte
}

// Revocation revokes every certificate of Name issued at or before At.
type Revocation struct {
	Name      string
	At        time.Time
	Signature [sigLen]byte
}

// Generate returns a new CA private key read from r (crypto/rand when r
// is nil).
func Generate(r io.Reader) (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(r)
	return priv, err
}

func validName(s string) bool { return len(s) > 0 && len(s) <= MaxNameLen }

// body appends the signed part of c.
func (c *Certificate) body(b []byte) []byte {
	b = append(b, magic, kindC, version, byte(len(c.Name)))
	b = append(b, c.Name...)
	b = append(b, c.Key[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Issued.Unix()))
	return binary.BigEndian.AppendUint64(b, uint64(c.Expires.Unix()))
}

// Sign signs c with the CA key and returns its encoding.
func Sign(caKey ed25519.PrivateKey, c *Certificate) ([]byte, error) {
	if !validName(c.Name) || c.Key.IsZero() || !c.Expires.After(c.Issued) {
		return nil, fmt.Errorf("%w: certificate needs a name of 1..%d bytes, a key and an expiry after its issue", ErrMalformed, MaxNameLen)
	}
	b := c.body(make([]byte, 0, CertMaxLen))
	copy(c.Signature[:], ed25519.Sign(caKey, b))
	return append(b, c.Signature[:]...), nil
}

// ParseCertificate decodes a certificate; it does not check the signature
// (Authority.Verify does).
func ParseCertificate(b []byte) (Certificate, error) {
	var c Certificate
	if len(b) < 4 || b[0] != magic || b[1] != kindC || b[2] != version {
		return c, ErrMalformed
	}
	n := int(b[3])
	if n == 0 || n > MaxNameLen || len(b) != 4+n+keys.Len+16+sigLen {
		return c, ErrMalformed
	}
	c.Name = string(b[4 : 4+n])
	off := 4 + n
	copy(c.Key[:], b[off:])
	off += keys.Len
	c.Issued = time.Unix(int64(binary.BigEndian.Uint64(b[off:])), 0).UTC()
	c.Expires = time.Unix(int64(binary.BigEndian.Uint64(b[off+8:])), 0).UTC()
	copy(c.Signature[:], b[off+16:])
	if c.Key.IsZero() {
		return c, ErrMalformed
	}
	return c, nil
}

func (r *Revocation) body(b []byte) []byte {
	b = append(b, magic, kindR, version, byte(len(r.Name)))
	b = append(b, r.Name...)
	return binary.BigEndian.AppendUint64(b, uint64(r.At.Unix()))
}

// SignRevocation signs r with the CA key and returns its encoding.
func SignRevocation(caKey ed25519.PrivateKey, r *Revocation) ([]byte, error) {
	if !validName(r.Name) {
		return nil, fmt.Errorf("%w: revocation needs a site name of 1..%d bytes", ErrMalformed, MaxNameLen)
	}
	b := r.body(nil)
	copy(r.Signature[:], ed25519.Sign(caKey, b))
	return append(b, r.Signature[:]...), nil
}

// ParseRevocation decodes a revocation without checking its signature.
func ParseRevocation(b []byte) (Revocation, error) {
	var r Revocation
	if len(b) < 4 || b[0] != magic || b[1] != kindR || b[2] != version {
		return r, ErrMalformed
	}
	n := int(b[3])
	if n == 0 || n > MaxNameLen || len(b) != 4+n+8+sigLen {
		return r, ErrMalformed
	}
	r.Name = string(b[4 : 4+n])
	r.At = time.Unix(int64(binary.BigEndian.Uint64(b[4+n:])), 0).UTC()
	copy(r.Signature[:], b[4+n+8:])
	return r, nil
}

// Authority checks certificates and revocations against the CA's public
// key and keeps the revocations it accepted. It is used by one goroutine
// (the site core's).
type Authority struct {
	Public  ed25519.PublicKey
	revoked map[string]time.Time
}

// NewAuthority returns an Authority for the CA public key pub.
func NewAuthority(pub ed25519.PublicKey) *Authority {
	return &Authority{Public: pub, revoked: map[string]time.Time{}}
}

// Verify decodes a certificate and checks it at now: signed by the CA,
// within its validity, not revoked.
func (a *Authority) Verify(b []byte, now time.Time) (Certificate, error) {
	c, err := ParseCertificate(b)
	if err != nil {
		return c, err
	}
	if !ed25519.Verify(a.Public, b[:len(b)-sigLen], c.Signature[:]) {
		return c, ErrSignature
	}
	if now.Before(c.Issued.Add(-time.Minute)) || !now.Before(c.Expires) {
		return c, ErrExpired
	}
	if at, ok := a.revoked[c.Name]; ok && !c.Issued.After(at) {
		return c, ErrRevoked
	}
	return c, nil
}

// Revoke checks a revocation and records it. It reports whether it is new
// (a later revocation of the name than any recorded), so that a site
// floods each revocation once.
func (a *Authority) Revoke(b []byte) (Revocation, bool, error) {
	r, err := ParseRevocation(b)
	if err != nil {
		return r, false, err
	}
	if !ed25519.Verify(a.Public, b[:len(b)-sigLen], r.Signature[:]) {
		return r, false, ErrSignature
	}
	if at, ok := a.revoked[r.Name]; ok && !r.At.After(at) {
		return r, false, nil
	}
	a.revoked[r.Name] = r.At
	return r, true, nil
}

// Revoked reports whether a certificate of name issued at issued is
// revoked.
func (a *Authority) Revoked(name string, issued time.Time) bool {
	at, ok := a.revoked[name]
	return ok && !issued.After(at)
}

// Encode returns the one-line base64 text form of an encoded certificate,
// revocation or key, for files.
func Encode(b []byte) string { return base64.StdEncoding.EncodeToString(b) + "\n" }

// Decode parses the text form written by Encode (surrounding white space
// ignored).
func Decode(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: not base64 (%v)", ErrMalformed, err)
	}
	return b, nil
}

// ParsePrivate decodes a CA private key file (the base64 of the 32-byte
// ed25519 seed).
func ParsePrivate(s string) (ed25519.PrivateKey, error) {
	b, err := Decode(s)
	if err != nil || len(b) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: a CA private key is %d bytes in base64", ErrMalformed, ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(b), nil
}

// ParsePublic decodes a CA public key (base64 of 32 bytes).
func ParsePublic(s string) (ed25519.PublicKey, error) {
	b, err := Decode(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: a CA public key is %d bytes in base64", ErrMalformed, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}
