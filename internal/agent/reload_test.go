package agent

import (
	"bytes"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// TestReload: a new network and a new limit in the file are applied; a
// broken file and a new listen address are refused with their field (and
// line), and the running networks stay.
func TestReload(t *testing.T) {
	const base = "site: fujisawa\nlisten: 198.18.0.1:4800\napi: 127.0.0.1:0\nnetworks:\n  - {name: default, id: 1, tap: detour0}\n"
	def := device.NewFake("detour0", 1400, 64)
	a, write := agentFromFile(t, base, map[uint32]device.Device{1: def, 7: device.NewFake("dt-blue", 1400, 64)})
	nets := func() string {
		var s []string
		for _, n := range a.Networks() {
			s = append(s, n.Name+":"+n.MaxRate)
		}
		return strings.Join(s, " ")
	}

	write(base + "  - {name: blue, id: 7, tap: dt-blue, max_rate: 5 furlongs}\n")
	if _, err := a.Reload(); err == nil || !strings.Contains(err.Error(), "line 6: networks[1]") || !strings.Contains(err.Error(), "not a rate") {
		t.Errorf("a broken file: %v", err)
	}
	write(strings.Replace(base, "detour0}", "detour0, max_rate: 10mbit, flood_rate: 500}", 1) + "  - {name: blue, id: 7, tap: dt-blue}\n")
	res, err := a.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if got := nets(); got != "default:10mbit blue:" || len(res.Applied) != 2 {
		t.Errorf("after the reload: %q, applied %q", got, res.Applied)
	}
	if p := a.engine.Ports(); len(p) != 2 || p[0].Dev != def && p[1].Dev != def {
		t.Errorf("the untouched network's device was replaced: %v", p)
	}
	if r := a.engine.Port(1).Flood.Rate(); r != 500 {
		t.Errorf("flood_rate %d after the reload, want 500", r)
	}
	write(strings.Replace(base, "198.18.0.1:4800", "198.18.0.2:4800", 1))
	if _, err := a.Reload(); err == nil || !strings.Contains(err.Error(), "listen changed") || !strings.Contains(err.Error(), "restart") {
		t.Errorf("a new listen address: %v", err)
	}
	if got := nets(); got != "default:10mbit blue:" {
		t.Errorf("after a refused reload: %q", got)
	}
}

// TestReloadKVPools: a pool added to the file by a reload, then edited,
// becomes a new version of this site each time, held by the core (to be
// flooded) and stored; an unchanged pool is left alone.
func TestReloadKVPools(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "site.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const base = "site: lan\nlisten: 198.18.0.1:4800\napi: 127.0.0.1:0\nnetworks:\n  - {name: default, id: 1, tap: detour0, subnet: 10.20.0.0/24}\n"
	const pool = "kv_pools:\n  - name: cache\n    network: default\n    address: 10.20.0.250\n    servers:\n      - {address: \"10.20.0.11:11211\", site: lan}\n"
	write(base)
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Options{
		Conn:       transport.NewFakeNetwork().Listen(netip.MustParseAddrPort("198.18.0.1:4800")),
		Devices:    map[uint32]device.Device{1: device.NewFake("detour0", 1400, 64)},
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		StatePath:  filepath.Join(dir, "site.state.json"),
		ConfigPath: file,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.closeAll()
	version := func() uint64 {
		for _, p := range a.core.KVPools() {
			if p.Name == "cache" {
				return p.Version
			}
		}
		return 0
	}
	for i, step := range []struct {
		file string
		want uint64
	}{
		{base + pool, 1},
		{base + pool, 1},
		{base + pool + "      - {address: \"10.20.0.12:11211\", site: man}\n", 2},
	} {
		write(step.file)
		res, err := a.Reload()
		if err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		if v := version(); v != step.want {
			t.Errorf("reload %d: version %d, want %d (applied %q)", i, v, step.want, res.Applied)
		}
	}
	if a.state.KVFile["cache"] == "" || len(a.state.KVPools) != 1 || len(a.state.KVPools[0].Servers) != 2 {
		t.Errorf("state after the reloads: %+v %+v", a.state.KVFile, a.state.KVPools)
	}
}

// TestReloadPeers: with explicit key lists, a site added to each member's
// file and reloaded there joins with nothing restarted and carries
// frames; removed from one member's file, its key is no longer accepted
// there and its frames are not delivered, while the other member keeps
// it.
func TestReloadPeers(t *testing.T) {
	nw := transport.NewFakeNetwork()
	sites := startAgents(t, nw, true, "alpha", "beta")
	waitMembers(t, sites)
	gkey, _ := keys.Generate(nil)
	gamma := config.Peer{Name: "gamma", Address: "198.18.0.3:4800", PublicKey: gkey.Public().String()}
	for _, s := range sites {
		res := reloadWith(t, s.a, func(c *config.Agent) { c.Peers = append(c.Peers, gamma) })
		if len(res.Applied) != 1 || !strings.HasPrefix(res.Applied[0], "add peer gamma at 198.18.0.3:4800") {
			t.Fatalf("%s: reload applied %v", s.name, res.Applied)
		}
	}
	cfg := &config.Agent{Site: "gamma", Listen: gamma.Address, API: "127.0.0.1:0", APISocket: filepath.Join(t.TempDir(), "api.sock"),
		PrivateKey: gkey.String()}
	for _, s := range sites {
		cfg.Peers = append(cfg.Peers, config.Peer{Name: s.name, Address: s.a.cfg.Listen, PublicKey: publicOf(t, s.a)})
	}
	cfg.ApplyDefaults()
	sites = append(sites, runTestAgent(t, "gamma", cfg, nw.Listen(netip.MustParseAddrPort(gamma.Address))))
	waitMembers(t, sites)
	frame := ethernet(0xa, 0xc, "gamma to alpha")
	sites[2].dev.Inject(frame)
	receive(t, sites[0], frame)

	reloadWith(t, sites[0].a, func(c *config.Agent) {
		c.Peers = slices.DeleteFunc(c.Peers, func(p config.Peer) bool { return p.Name == "gamma" })
	})
	gid := wire.SiteIDFromName("gamma")
	if _, ok := sites[0].a.sec.Accepts(gid); ok {
		t.Error("alpha still accepts gamma's key after gamma left its file")
	}
	if _, ok := sites[1].a.sec.Accepts(gid); !ok {
		t.Error("beta, whose file still lists gamma, no longer accepts it")
	}
	toBeta, toAlpha := ethernet(0xb, 0xc, "gamma to beta"), ethernet(0xa, 0xc, "gamma to alpha, refused")
	sites[2].dev.Inject(ethernet(0xff, 0xb, "beta's hello"))
	sites[2].dev.Inject(toAlpha)
	sites[2].dev.Inject(toBeta)
	receive(t, sites[1], toBeta)
	deadline := time.After(time.Second)
	for {
		select {
		case got := <-sites[0].dev.Out():
			if bytes.Equal(got, toAlpha) {
				t.Fatal("alpha delivered a frame of gamma after gamma left its file")
			}
			continue
		case <-deadline:
		}
		break
	}
}

// reloadWith writes a's configuration file changed by edit and reloads it.
func reloadWith(t *testing.T, a *Agent, edit func(*config.Agent)) api.Reload {
	t.Helper()
	useFile(t, a, edit)
	res, err := a.Reload()
	if err != nil {
		t.Fatalf("%s: reload: %v", a.cfg.Site, err)
	}
	return res
}

// useFile writes a's configuration changed by edit into a file of its own
// and makes it the file a reload reads.
// agentFromFile starts an agent (on a fake network, with devs) from a
// file holding content, and returns it with a function that rewrites the
// file, for Reload to read.
func agentFromFile(t *testing.T, content string, devs map[uint32]device.Device) (*Agent, func(string)) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "site.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(content)
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Options{
		Conn:       transport.NewFakeNetwork().Listen(netip.MustParseAddrPort(cfg.Listen)),
		Devices:    devs,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		StatePath:  filepath.Join(dir, "site.state.json"),
		ConfigPath: file,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.closeAll)
	return a, write
}

func useFile(t *testing.T, a *Agent, edit func(*config.Agent)) {
	t.Helper()
	cfg := *a.file
	cfg.Peers = slices.Clone(cfg.Peers)
	edit(&cfg)
	b, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), cfg.Site+".yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	a.cfgPath = file
}

func publicOf(t *testing.T, a *Agent) string {
	t.Helper()
	k, err := keys.ParsePrivate(a.cfg.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return k.Public().String()
}
