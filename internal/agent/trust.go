package agent

import (
	"fmt"
	"os"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/runstate"
	"github.com/detour-overlay/detour/internal/site"
)

// addTrust gives the site core the overlay CA and this site's certificate
// when the configuration has a trust section (docs/membership.md). The
// certificate must be for this site's name and key, and valid now.
func addTrust(cfg *config.Agent, sec *site.Secure, now time.Time) error {
	if !cfg.Trust.Enabled() {
		return nil
	}
	pub, err := ca.ParsePublic(cfg.Trust.CAPublicKey)
	if err != nil {
		return fmt.Errorf("trust.ca_public_key: %w", err)
	}
	text, err := os.ReadFile(cfg.Trust.CertificateFile)
	if err != nil {
		return fmt.Errorf("trust.certificate_file: %w", err)
	}
	b, err := ca.Decode(string(text))
	if err != nil {
		return fmt.Errorf("trust.certificate_file: %w", err)
	}
	auth := ca.NewAuthority(pub)
	cert, err := auth.Verify(b, now)
	switch {
	case err != nil:
		return fmt.Errorf("trust.certificate_file: %w", err)
	case cert.Name != cfg.Site:
		return fmt.Errorf("trust.certificate_file: the certificate is for site %q, not %q", cert.Name, cfg.Site)
	case cert.Key != sec.Private.Public():
		return fmt.Errorf("trust.certificate_file: the certificate is for another key than this site's private key")
	}
	sec.Authority, sec.Certificate = auth, b
	return nil
}

// Revoke applies a revocation signed by the overlay CA (the file written
// by `detour ca revoke`, decoded) and floods it to every member.
func (a *Agent) Revoke(rev []byte) error {
	return a.override(func(now time.Time) error { return a.core.Revoke(now, rev) }, func(d *runstate.Doc) { d.Revoked(rev) })
}

// restoreRevocations applies the revocations of the run-time state when
// the agent starts, before any member is met.
func (a *Agent) restoreRevocations() {
	now := a.clock.Now()
	for i, r := range a.state.Revocations {
		b, err := ca.Decode(r)
		if err == nil {
			err = a.core.Revoke(now, b)
		}
		if err != nil {
			a.log.Warn("run-time state: a revocation is not applied", "index", i, "err", err)
		}
	}
	_, a.revSeen = a.core.Revocations(0)
}

// storeRevocations records in the run-time state the revocations the core
// applied since the last call (flooded by members), on the control loop.
func (a *Agent) storeRevocations() {
	revs, n := a.core.Revocations(a.revSeen)
	if n == a.revSeen {
		return
	}
	a.revSeen = n
	err := a.record(func(d *runstate.Doc) {
		for _, r := range revs {
			d.Revoked(r)
		}
	})
	if err != nil {
		a.log.Error("a revocation is applied but not stored", "err", err)
	}
}
