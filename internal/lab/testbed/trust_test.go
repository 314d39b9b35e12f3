package testbed

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// TestCAConfigsWithHeldSite: with an overlay CA every agent's
// configuration names its key file, its certificate and the CA, and its
// peers by address only; a held site is in no configuration but its own,
// which lists every other site. Each configuration loads and validates.
func TestCAConfigsWithHeldSite(t *testing.T) {
	sc, err := scenario.Load("leon-japan")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "detour"), 0o755); err != nil {
		t.Fatal(err)
	}
	held := sc.Sites[len(sc.Sites)-1].Name
	o := Options{Scenario: "leon-japan", Overlay: "detour", Prefix: DefaultPrefix, StateDir: dir, CA: true, Hold: []string{held}}
	if err := validHold(&o, sc); err != nil {
		t.Fatal(err)
	}
	st := newState(sc, o)
	privs, err := siteKeys(len(st.Sites), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeTrust(dir, st, privs); err != nil {
		t.Fatal(err)
	}
	for i, s := range st.Sites {
		file := filepath.Join(dir, "detour", s.Name+".yaml")
		if err := writeAgentConfig(st, sc, i, privs, file, o); err != nil {
			t.Fatal(err)
		}
		a, err := config.Load(file)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if a.PrivateKey != privs[i].String() || a.PrivateKeyFile != SiteKeyFile(dir, s.Name) ||
			!a.Trust.Enabled() || a.Trust.CertificateFile != SiteCertFile(dir, s.Name) {
			t.Errorf("%s: key file %q, trust %+v", s.Name, a.PrivateKeyFile, a.Trust)
		}
		var names []string
		for _, p := range a.Peers {
			if p.PublicKey != "" {
				t.Errorf("%s: peer %s listed with a key under a CA", s.Name, p.Name)
			}
			names = append(names, p.Name)
		}
		want := len(st.Sites) - 2
		if s.Name == held {
			want = len(st.Sites) - 1
		}
		if len(names) != want || (s.Name != held && slices.Contains(names, held)) {
			t.Errorf("%s: peers %v", s.Name, names)
		}
	}
}

// TestHoldRefused: held sites must exist, not be the first, and run
// detour; a CA needs the encrypted detour overlay.
func TestHoldRefused(t *testing.T) {
	sc, err := scenario.Load("leon-japan")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Overlay: "detour", Hold: []string{"Atlantis"}}, "no such site"},
		{Options{Overlay: "detour", Hold: []string{sc.Sites[0].Name}}, "first site"},
		{Options{Overlay: "tinc", Hold: []string{sc.Sites[1].Name}}, "needs a detour overlay"},
	} {
		if err := validHold(&c.o, sc); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o.Hold, err, c.want)
		}
	}
	o := Options{Scenario: "leon-japan", Overlay: "detour-plain", CA: true}
	if _, err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--ca needs --overlay detour") {
		t.Errorf("--ca over detour-plain: %v", err)
	}
}

// --measurement takes the agent's schemes, on detour overlays only.
func TestValidMeasurement(t *testing.T) {
	for _, c := range []struct {
		overlay, scheme string
		ok              bool
	}{
		{"detour", "", true}, {"detour", "economy", true}, {"detour-plain", "full", true},
		{"detour", "cheap", false}, {"tinc", "economy", false}, {"none", "", true},
	} {
		err := validMeasurement(&Options{Overlay: c.overlay, Measurement: c.scheme})
		if (err == nil) != c.ok {
			t.Errorf("--overlay %s --measurement %q: %v, want ok %v", c.overlay, c.scheme, err, c.ok)
		}
	}
}
