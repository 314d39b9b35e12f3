package agent

import (
	"net/netip"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/transport"
)

// TestAgentsOverIPv6AndIPv4Loopback runs three encrypted agents on real
// UDP sockets: alpha on a dual-stack wildcard socket advertising ::1,
// beta on ::1 only, gamma on a dual-stack socket advertising 127.0.0.1.
// Gamma joins through alpha over IPv4, beta over IPv6. Beta cannot send to
// the IPv4 addresses it is told (alpha's as gamma sees it, gamma's own),
// yet all three become members and frames cross between beta and gamma,
// because every site sends to the address a member's authenticated
// datagrams come from (Roam): gamma reaches beta over IPv6, and beta
// answers there. Nothing leaves loopback.
func TestAgentsOverIPv6AndIPv4Loopback(t *testing.T) {
	type spec struct{ name, listen string }
	specs := []spec{{"alpha", "[::]:0"}, {"beta", "[::1]:0"}, {"gamma", "[::]:0"}}
	conns := make([]*transport.UDP, len(specs))
	privs := make([]keys.PrivateKey, len(specs))
	for i, s := range specs {
		c, err := transport.ListenUDP(mustAddrPort(t, s.listen))
		if err != nil {
			t.Skipf("no %s here: %v", s.listen, err)
		}
		conns[i] = c
		privs[i], _ = keys.Generate(nil)
	}
	port := conns[0].LocalAddr().Port()
	alphaBy := map[string]string{"beta": "[::1]:" + itoa(port), "gamma": "127.0.0.1:" + itoa(port)}
	var sites []*testSite
	for i, s := range specs {
		cfg := &config.Agent{Site: s.name, Listen: conns[i].LocalAddr().String(), API: "127.0.0.1:0",
			APISocket: filepath.Join(t.TempDir(), "api.sock"), PrivateKey: privs[i].String()}
		switch s.name {
		case "alpha":
			cfg.Advertise = "[::1]:" + itoa(port)
		case "gamma":
			cfg.Advertise = "127.0.0.1:" + itoa(conns[i].LocalAddr().Port())
		}
		for j, o := range specs {
			if j == i {
				continue
			}
			p := config.Peer{Name: o.name, PublicKey: privs[j].Public().String()}
			if j == 0 {
				p.Address = alphaBy[s.name]
			}
			cfg.Peers = append(cfg.Peers, p)
		}
		cfg.ApplyDefaults()
		ts := runTestAgent(t, s.name, cfg, conns[i])
		sites = append(sites, ts)
	}
	waitMembers(t, sites)
	uni := ethernet(0xc, 0xb, "beta (IPv6) to gamma (IPv4)")
	sites[1].dev.Inject(uni)
	receive(t, sites[2], uni)
	back := ethernet(0xb, 0xc, "gamma (IPv4) to beta (IPv6)")
	sites[2].dev.Inject(back)
	receive(t, sites[1], back)
	for _, r := range sites[1].a.Routes() {
		t.Logf("beta → %s via %v", r.Dest, r.Path)
	}
	for _, m := range sites[1].a.Status().Members {
		if m.Name == "gamma" && m.Address != "[::1]:"+itoa(conns[2].LocalAddr().Port()) {
			t.Errorf("beta sends to gamma at %s, want its IPv6 source address", m.Address)
		}
	}
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

func itoa(n uint16) string { return strconv.Itoa(int(n)) }
