package config

import (
	"path/filepath"

	"github.com/detour-overlay/detour/internal/ca"
)

// Trust configures membership by certificate (docs/membership.md): with
// the overlay CA's public key, an agent accepts any site presenting a
// valid, unexpired, unrevoked certificate, besides the peers listed with
// a public key, so that a site joins with nothing changed at the others.
type Trust struct {
	// CAPublicKey is the overlay CA's public key (printed by
	// `detour ca init`).
	CAPublicKey string `yaml:"ca_public_key,omitempty"`
	// CertificateFile is this site's certificate (written by
	// `detour ca sign`), for this site's name and public key.
	CertificateFile string `yaml:"certificate_file,omitempty"`
}

// Enabled reports whether the site admits sites by certificate.
func (t Trust) Enabled() bool { return t.CAPublicKey != "" }

// validateTrust checks the trust section: both fields together, a CA key
// that parses, an absolute certificate path, and a private key.
func validateTrust(a *Agent, pr *Problems) {
	t := a.Trust
	if t.CAPublicKey == "" && t.CertificateFile == "" {
		return
	}
	if t.CAPublicKey == "" {
		pr.add("trust.ca_public_key", "missing: a certificate needs the CA's public key (from detour ca init)")
	} else if _, err := ca.ParsePublic(t.CAPublicKey); err != nil {
		pr.add("trust.ca_public_key", "%v", err)
	}
	switch {
	case t.CertificateFile == "":
		pr.add("trust.certificate_file", "missing: this site's certificate (from detour ca sign)")
	case !filepath.IsAbs(t.CertificateFile):
		pr.add("trust.certificate_file", "%q is not an absolute path", t.CertificateFile)
	}
	if !a.Encrypted() {
		pr.add("private_key", "missing: membership by certificate needs this site's private key")
	}
}
