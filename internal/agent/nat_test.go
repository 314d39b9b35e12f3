package agent

import (
	"path/filepath"
	"testing"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/transport"
)

// TestAgentWithoutAddressJoins: edge listens on the wildcard and
// advertises nothing, as a site behind NAT whose public address it does
// not know. It joins through alpha; alpha and beta send to where its
// datagrams come from (127.0.0.1 and its port), never to the 0.0.0.0 it
// advertises, and frames cross. Nothing leaves loopback.
func TestAgentWithoutAddressJoins(t *testing.T) {
	names := []string{"alpha", "beta", "edge"}
	listens := []string{"127.0.0.1:0", "127.0.0.1:0", "0.0.0.0:0"}
	conns := make([]*transport.UDP, 3)
	privs := make([]keys.PrivateKey, 3)
	for i := range names {
		c, err := transport.ListenUDP(mustAddrPort(t, listens[i]))
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		privs[i], _ = keys.Generate(nil)
	}
	alpha := conns[0].LocalAddr().String()
	var sites []*testSite
	for i, name := range names {
		cfg := &config.Agent{Site: name, Listen: conns[i].LocalAddr().String(), API: "127.0.0.1:0",
			APISocket: filepath.Join(t.TempDir(), "api.sock"), PrivateKey: privs[i].String()}
		for j, o := range names {
			if j != i {
				p := config.Peer{Name: o, PublicKey: privs[j].Public().String()}
				if j == 0 {
					p.Address = alpha
				}
				cfg.Peers = append(cfg.Peers, p)
			}
		}
		cfg.ApplyDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		sites = append(sites, runTestAgent(t, name, cfg, conns[i]))
	}
	waitMembers(t, sites)
	want := "127.0.0.1:" + itoa(conns[2].LocalAddr().Port())
	for _, s := range sites[:2] {
		for _, m := range s.a.Status().Members {
			if m.Name == "edge" && m.Address != want {
				t.Errorf("%s sends to edge at %s, want %s", s.name, m.Address, want)
			}
		}
	}
	uni := ethernet(0xe, 0xb, "beta to edge")
	sites[1].dev.Inject(uni)
	receive(t, sites[2], uni)
}
