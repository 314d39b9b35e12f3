package testbed

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// With Options.CA the detour agents admit each other by certificate of an
// overlay CA (docs/membership.md) instead of explicit key lists, as an
// operator adding sites without restarts would run them. The testbed
// keeps the files an operator would have, in STATE/detour:
//
//	ca.key       the CA's private key (what `detour ca init` writes)
//	SITE.key     the site's private key (private_key_file)
//	SITE.crt     the site's certificate (trust.certificate_file)
//
// so that a test can sign, revoke and rotate with the detour CLI.

// CAKeyFile is the CA's private key of a testbed started with Options.CA.
func CAKeyFile(dir string) string { return filepath.Join(dir, "detour", "ca.key") }

// SiteKeyFile is a site's private key file of a testbed started with
// Options.CA.
func SiteKeyFile(dir, site string) string {
	return filepath.Join(dir, "detour", tincName(site)+".key")
}

// SiteCertFile is a site's certificate of a testbed started with
// Options.CA.
func SiteCertFile(dir, site string) string {
	return filepath.Join(dir, "detour", tincName(site)+".crt")
}

// certValidity is how long the testbed's certificates are valid.
const certValidity = 30 * 24 * time.Hour

// writeTrust makes the CA key and, per site, the key file and the
// certificate for the key in privs.
func writeTrust(dir string, st *State, privs []keys.PrivateKey) error {
	caKey, err := ca.Generate(nil)
	if err != nil {
		return err
	}
	if err := os.WriteFile(CAKeyFile(dir), []byte(ca.Encode(caKey.Seed())), 0o600); err != nil {
		return err
	}
	now := time.Now().Add(-time.Minute)
	for i, s := range st.Sites {
		cert, err := ca.Sign(caKey, &ca.Certificate{Name: s.Name, Key: privs[i].Public(), Issued: now, Expires: now.Add(certValidity)})
		if err != nil {
			return err
		}
		if err := os.WriteFile(SiteCertFile(dir, s.Name), []byte(ca.Encode(cert)), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(SiteKeyFile(dir, s.Name), []byte(privs[i].String()+"\n"), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// caTrust is the trust section of site's configuration.
func caTrust(dir, site string) (config.Trust, error) {
	text, err := os.ReadFile(CAKeyFile(dir))
	if err != nil {
		return config.Trust{}, err
	}
	caKey, err := ca.ParsePrivate(string(text))
	if err != nil {
		return config.Trust{}, fmt.Errorf("%s: %w", CAKeyFile(dir), err)
	}
	return config.Trust{
		CAPublicKey:     base64.StdEncoding.EncodeToString(caKey.Public().(ed25519.PublicKey)),
		CertificateFile: SiteCertFile(dir, site),
	}, nil
}

// validHold checks the sites Options.Hold names: sites of the scenario,
// not the first (the testbed checks the overlay from the first site's
// host), on a detour overlay.
func validHold(o *Options, sc *scenario.Scenario) error {
	if len(o.Hold) == 0 {
		return nil
	}
	if !usesDetour(o.Overlay) {
		return fmt.Errorf("--hold needs a detour overlay, not %q", o.Overlay)
	}
	for _, h := range o.Hold {
		i := slices.IndexFunc(sc.Sites, func(s scenario.Site) bool { return s.Name == h })
		switch {
		case i < 0:
			return fmt.Errorf("--hold %s: no such site in scenario %s", h, sc.Name)
		case i == 0:
			return fmt.Errorf("--hold %s: the first site's agent must start (the testbed checks the overlay from its host)", h)
		}
	}
	return nil
}

// validMeasurement checks Options.Measurement: a scheme the agent knows,
// on a detour overlay.
func validMeasurement(o *Options) error {
	switch {
	case o.Measurement == "":
		return nil
	case o.Measurement != config.MeasurementFull && o.Measurement != config.MeasurementEconomy:
		return fmt.Errorf("--measurement %q: want %s or %s", o.Measurement, config.MeasurementFull, config.MeasurementEconomy)
	case !usesDetour(o.Overlay):
		return fmt.Errorf("--measurement needs a detour overlay, not %q", o.Overlay)
	}
	return nil
}

// held reports whether site's agent waits for restart-agent.
func (st *State) held(site string) bool { return slices.Contains(st.Held, site) }
