package agent

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// startCAAgent starts an encrypted agent whose configuration has only the
// CA's public key, its certificate file and alpha's address.
func startCAAgent(t *testing.T, nw *transport.FakeNetwork, caKey ed25519.PrivateKey, name string, i int) *testSite {
	t.Helper()
	addr := func(i int) string {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}), 4800).String()
	}
	priv, _ := keys.Generate(nil)
	now := time.Now()
	cert, err := ca.Sign(caKey, &ca.Certificate{Name: name, Key: priv.Public(), Issued: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, name+".crt")
	if err := os.WriteFile(file, []byte(ca.Encode(cert)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Agent{Site: name, Listen: addr(i), API: "127.0.0.1:0", APISocket: filepath.Join(dir, "api.sock"),
		PrivateKey: priv.String(),
		Trust:      config.Trust{CAPublicKey: ca.Encode(caKey.Public().(ed25519.PublicKey)), CertificateFile: file}}
	if i > 0 {
		cfg.Peers = []config.Peer{{Name: "alpha", Address: addr(0)}}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return runTestAgent(t, name, cfg, nw.Listen(netip.MustParseAddrPort(addr(i))))
}

// TestAgentsJoinAndRevokeByCertificate: three agents that know only the
// CA's key (and alpha's address) form an overlay; a fourth joins through
// alpha and carries frames, nothing changed at the three; a revocation
// given to beta alone is applied by all three within 2 s.
func TestAgentsJoinAndRevokeByCertificate(t *testing.T) {
	_, caKey, _ := ed25519.GenerateKey(nil)
	nw := transport.NewFakeNetwork()
	var sites []*testSite
	for i, name := range []string{"alpha", "beta", "gamma"} {
		sites = append(sites, startCAAgent(t, nw, caKey, name, i))
	}
	waitMembers(t, sites)
	start := time.Now()
	sites = append(sites, startCAAgent(t, nw, caKey, "delta", 3))
	waitMembers(t, sites)
	t.Logf("delta a member everywhere %v after its start", time.Since(start).Round(time.Millisecond))
	uni := ethernet(0xd, 0xb, "beta to delta")
	sites[1].dev.Inject(ethernet(0xff, 0xd, "delta's hello"))
	sites[1].dev.Inject(uni)
	receive(t, sites[3], uni)

	// Gamma rotates its key under a stream of frames to delta: none lost.
	newKey, _ := keys.Generate(nil)
	cert, _ := ca.Sign(caKey, &ca.Certificate{Name: "gamma", Key: newKey.Public(), Issued: time.Now(), Expires: time.Now().Add(time.Hour)})
	sites[3].dev.Inject(ethernet(0xff, 0xd, "delta's hello"))
	const frames = 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range frames {
			sites[2].dev.Inject(ethernet(0xd, 0xc, fmt.Sprintf("gamma to delta %03d", i)))
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	rotateByReload(t, sites[2].a, newKey, ca.Encode(cert))
	<-done
	for i := range frames {
		receive(t, sites[3], ethernet(0xd, 0xc, fmt.Sprintf("gamma to delta %03d", i)))
	}
	gammaID := wire.SiteIDFromName("gamma")
	for _, s := range []*testSite{sites[0], sites[1], sites[3]} {
		if k, _ := s.a.sec.Accepts(gammaID); k != newKey.Public() {
			t.Errorf("%s does not hold gamma's new key", s.name)
		}
	}
	t.Logf("gamma rotated its key by reload under %d frames to delta, all delivered in order", frames)

	rev, _ := ca.SignRevocation(caKey, &ca.Revocation{Name: "delta", At: time.Now()})
	at := time.Now()
	if err := sites[1].a.Revoke(rev); err != nil {
		t.Fatal(err)
	}
	id := wire.SiteIDFromName("delta")
	for _, s := range sites[:3] {
		for {
			if _, ok := s.a.sec.Accepts(id); !ok {
				break
			}
			if time.Since(at) > 2*time.Second {
				t.Fatalf("%s still accepts delta 2 s after the revocation", s.name)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Logf("revocation applied at all three within %v", time.Since(at).Round(time.Millisecond))
}

// rotateByReload rotates a's key as an operator does: the new key and its
// certificate are written into the files of a's configuration, and the
// agent reloads it. A certificate for another key is refused first, with
// the running key kept.
func rotateByReload(t *testing.T, a *Agent, key keys.PrivateKey, cert string) {
	t.Helper()
	useFile(t, a, func(c *config.Agent) { c.PrivateKey = key.String() })
	if _, err := a.Reload(); err == nil || !strings.Contains(err.Error(), "another key than this site's private key") {
		t.Errorf("reload with the old certificate and a new key: %v, want the certificate refused", err)
	}
	if err := os.WriteFile(a.file.Trust.CertificateFile, []byte(cert), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := a.Reload()
	if err != nil || len(res.Applied) != 1 || !strings.HasPrefix(res.Applied[0], "rotate the site's key") {
		t.Fatalf("reload with the new key and its certificate: %+v, %v", res, err)
	}
}

// TestRevocationsSurviveRestart: a revocation given to the agent is in
// its state file before the API answers, and an agent started again on
// that file applies it before meeting anyone.
func TestRevocationsSurviveRestart(t *testing.T) {
	_, caKey, _ := ed25519.GenerateKey(nil)
	nw := transport.NewFakeNetwork()
	s := startCAAgent(t, nw, caKey, "alpha", 0)
	cfg := *s.a.cfg
	dir := t.TempDir()
	cfg.APISocket = filepath.Join(dir, "api.sock")
	state := filepath.Join(dir, "alpha.state.json")
	start := func() *Agent {
		a, err := New(&cfg, Options{Conn: nw.Listen(netip.MustParseAddrPort("198.18.0.9:4800")),
			Devices:   map[uint32]device.Device{config.DefaultNetworkID: device.NewFake("detour0", 1400, 64)},
			Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
			StatePath: state})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := start()
	rev, _ := ca.SignRevocation(caKey, &ca.Revocation{Name: "mallory", At: time.Now()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	err := a.Revoke(rev)
	b, _ := os.ReadFile(state)
	cancel()
	if rerr := <-done; err != nil || rerr != nil {
		t.Fatalf("revoke: %v; run: %v", err, rerr)
	}
	if !strings.Contains(string(b), strings.TrimSpace(ca.Encode(rev))) {
		t.Fatalf("state file after the revocation:\n%s", b)
	}

	again := start()
	defer again.closeAll()
	if revs, n := again.core.Revocations(0); n != 1 || string(revs[0]) != string(rev) {
		t.Errorf("restarted agent applied %d revocations, want mallory's", n)
	}
}
