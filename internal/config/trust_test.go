package config

import (
	"strings"
	"testing"
)

const caPub = "A6EHv/POEL4dcN0Y50vAmWfk1jCbpywTHT7kcsNnjfg=" // 32 bytes

func TestTrustSection(t *testing.T) {
	base := "site: d\nlisten: 198.18.0.4:1\nprivate_key: " + privA + "\npeers:\n  - name: a\n    address: 198.18.0.1:1\n"
	a, err := Parse([]byte(base + "trust:\n  ca_public_key: " + caPub + "\n  certificate_file: /etc/detour/d.crt\n"))
	if err != nil {
		t.Fatalf("a bootstrap peer by address only, with a CA: %v", err)
	}
	if !a.Trust.Enabled() || a.Trust.CertificateFile != "/etc/detour/d.crt" {
		t.Fatalf("trust = %+v", a.Trust)
	}
	if _, err := Parse([]byte(base)); err == nil || !strings.Contains(err.Error(), "peers[0].public_key") {
		t.Errorf("without a CA, a peer without a key: %v", err)
	}
	for doc, field := range map[string]string{
		base + "trust:\n  ca_public_key: AAAA\n  certificate_file: /x.crt\n":         "trust.ca_public_key",
		base + "trust:\n  ca_public_key: " + caPub + "\n":                            "trust.certificate_file",
		base + "trust:\n  certificate_file: /x.crt\n":                                "trust.ca_public_key",
		base + "trust:\n  ca_public_key: " + caPub + "\n  certificate_file: x.crt\n": "trust.certificate_file",
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: error %v, want one naming %s", doc, err, field)
		}
	}
}

// TestNATedSiteNeedsNoAdvertise: an encrypted site may listen on a
// wildcard without an advertised address (behind NAT); one in the clear
// may not.
func TestNATedSiteNeedsNoAdvertise(t *testing.T) {
	doc := "site: edge\nlisten: 0.0.0.0:4800\nprivate_key: " + privA + "\npeers:\n  - name: a\n    address: 198.18.0.1:4800\n    public_key: " + pubB + "\n"
	if _, err := Parse([]byte(doc)); err != nil {
		t.Errorf("encrypted site behind NAT: %v", err)
	}
}
