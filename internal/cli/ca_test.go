package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/keys"
)

// TestCACommands: init writes a key and prints its public key; sign
// prints a certificate that key verifies, for the name and key given;
// revoke prints a revocation that revokes it; show describes both; init
// does not overwrite a key.
func TestCACommands(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "ca.key")
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Main(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	pubText := run("ca", "init", "--ca-key", keyFile)
	pub, err := ca.ParsePublic(pubText)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(keyFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key file mode %v", fi.Mode().Perm())
	}
	var out, errb bytes.Buffer
	if Main([]string{"ca", "init", "--ca-key", keyFile}, &out, &errb) == 0 {
		t.Errorf("init overwrote an existing CA key")
	}
	site, _ := keys.Generate(nil)
	certText := run("ca", "sign", "--ca-key", keyFile, "--name", "osaka", "--key", site.Public().String(), "--expires", "48h")
	certBytes, _ := ca.Decode(certText)
	auth := ca.NewAuthority(pub)
	c, err := auth.Verify(certBytes, time.Now())
	if err != nil || c.Name != "osaka" || c.Key != site.Public() || c.Expires.Sub(c.Issued) != 48*time.Hour {
		t.Fatalf("certificate %+v, %v", c, err)
	}
	certFile := filepath.Join(dir, "osaka.crt")
	os.WriteFile(certFile, []byte(certText), 0o644)
	if got := run("ca", "show", certFile); !strings.Contains(got, "site:    osaka") {
		t.Errorf("show: %s", got)
	}
	revText := run("ca", "revoke", "--ca-key", keyFile, "osaka")
	revBytes, _ := ca.Decode(revText)
	if _, fresh, err := auth.Revoke(revBytes); err != nil || !fresh {
		t.Fatalf("revocation: %v %v", fresh, err)
	}
	if _, err := auth.Verify(certBytes, time.Now()); err == nil {
		t.Errorf("certificate still valid after its revocation")
	}
}
