package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

type testSite struct {
	name string
	dev  *device.Fake
	a    *Agent
}

// startAgents runs one agent per name on a fake network, each knowing only
// the first site's address, encrypted when encrypt is set.
func startAgents(t *testing.T, nw *transport.FakeNetwork, encrypt bool, names ...string) []*testSite {
	t.Helper()
	privs := make([]keys.PrivateKey, len(names))
	for i := range privs {
		privs[i], _ = keys.Generate(nil)
	}
	addr := func(i int) string { return fmt.Sprintf("198.18.0.%d:4800", i+1) }
	var sites []*testSite
	for i, name := range names {
		cfg := &config.Agent{Site: name, Listen: addr(i), API: "127.0.0.1:0", APISocket: filepath.Join(t.TempDir(), "api.sock")}
		if encrypt {
			cfg.PrivateKey = privs[i].String()
		}
		for j, other := range names {
			if j == i {
				continue
			}
			p := config.Peer{Name: other}
			if j == 0 {
				p.Address = addr(0) // everyone joins through the first site
			}
			if encrypt {
				p.PublicKey = privs[j].Public().String()
			}
			if p.Address != "" || encrypt {
				cfg.Peers = append(cfg.Peers, p)
			}
		}
		cfg.ApplyDefaults()
		sites = append(sites, runTestAgent(t, name, cfg, nw.Listen(netip.MustParseAddrPort(addr(i)))))
	}
	return sites
}

// runTestAgent starts an agent of site name with cfg on conn and a fake
// device, and stops it when the test ends, failing the test if it stopped
// with an error.
func runTestAgent(t *testing.T, name string, cfg *config.Agent, conn transport.Conn) *testSite {
	t.Helper()
	s := &testSite{name: name, dev: device.NewFake("detour0", 1400, 1024)}
	a, err := New(cfg, Options{Conn: conn, Devices: map[uint32]device.Device{config.DefaultNetworkID: s.dev},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.a = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	return s
}

// waitMembers waits until every site sees every other one alive and has a
// route to it.
func waitMembers(t *testing.T, sites []*testSite) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range sites {
		for {
			alive := 0
			for _, m := range s.a.Status().Members {
				if m.State == "alive" {
					alive++
				}
			}
			if alive == len(sites)-1 && len(s.a.Routes()) == len(sites)-1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %d live members, want %d: %+v", s.name, alive, len(sites)-1, s.a.Status().Members)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func ethernet(dst, src byte, payload string) []byte {
	f := []byte{dst, 0, 0, 0, 0, dst, src, 0, 0, 0, 0, src, 0x08, 0x00}
	if dst == 0xff {
		copy(f, bytes.Repeat([]byte{0xff}, 6))
	}
	return append(f, payload...)
}

func receive(t *testing.T, s *testSite, want []byte) {
	t.Helper()
	timeout := time.After(3 * time.Second)
	for {
		select {
		case got := <-s.dev.Out():
			if bytes.Equal(got, want) {
				return
			}
		case <-timeout:
			t.Fatalf("%s never received %q", s.name, want[14:])
		}
	}
}

func TestAgentsJoinThroughOneMemberAndCarryFrames(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypted=%v", encrypt), func(t *testing.T) {
			nw := transport.NewFakeNetwork()
			sites := startAgents(t, nw, encrypt, "alpha", "beta", "gamma")
			waitMembers(t, sites)
			if got := sites[2].a.Status().Encrypted; got != encrypt {
				t.Errorf("status says encrypted=%v", got)
			}
			// A broadcast from gamma reaches both other sites; then a
			// unicast from alpha to gamma's host is delivered.
			hello := ethernet(0xff, 0xc, "who has the gateway?")
			sites[2].dev.Inject(hello)
			receive(t, sites[0], hello)
			receive(t, sites[1], hello)
			uni := ethernet(0xc, 0xa, "unicast to gamma")
			sites[0].dev.Inject(uni)
			receive(t, sites[2], uni)
			if n := len(sites[0].a.Routes()); n != 2 {
				t.Errorf("alpha has %d routes, want 2", n)
			}
		})
	}
}

func TestEncryptedAgentIgnoresPlaintextControl(t *testing.T) {
	nw := transport.NewFakeNetwork()
	sites := startAgents(t, nw, true, "alpha", "beta")
	waitMembers(t, sites)
	// A site without keys sends alpha a probe in the clear.
	rogue := nw.Listen(netip.MustParseAddrPort("198.18.0.9:4800"))
	defer rogue.Close()
	probe := []byte{0xD7, 1, 2, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}
	rogue.WriteBatch([]transport.Message{{Buf: probe, N: len(probe), Addr: netip.MustParseAddrPort("198.18.0.1:4800")}})
	deadline := time.Now().Add(2 * time.Second)
	for sites[0].a.Status().Counters["control_unsealed_dropped"] == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a plaintext probe was not dropped and counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, m := range sites[0].a.Status().Members {
		if m.Name != "alpha" && m.Name != "beta" {
			t.Errorf("alpha accepted %s as a member", m.Name)
		}
	}
}

// A flood of forged initiations naming a member, from a host that does
// not know the key (random Noise bytes) and from one that does (valid
// mac1), neither stops the frames between members nor reaches the
// Diffie-Hellman work beyond the rate limits: the first is dropped on mac1,
// the second puts the site under load, where it gets cookie replies or
// nothing.
func TestAgentForwardsUnderHandshakeFlood(t *testing.T) {
	nw := transport.NewFakeNetwork()
	sites := startAgents(t, nw, true, "alpha", "beta")
	waitMembers(t, sites)
	alpha, beta := sites[0], sites[1]
	target := netip.MustParseAddrPort("198.18.0.1:4800")
	flooder := nw.Listen(netip.MustParseAddrPort("198.18.0.9:4800"))
	defer flooder.Close()
	rogueKey, _ := keys.Generate(nil)
	rogue, err := session.NewNode(session.Config{Self: wire.SiteIDFromName("beta"), Private: rogueKey,
		Peers: map[wire.SiteID]keys.PublicKey{wire.SiteIDFromName("alpha"): alpha.a.sec.PublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	stop := make(chan struct{})
	flooded := make(chan int)
	go func() {
		n := 0
		defer func() { flooded <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			batch := make([]transport.Message, 0, 64)
			for i := range 64 {
				var pkt []byte
				if i%2 == 0 {
					pkt = make([]byte, wire.HandshakeInitLen)
					for j := range pkt {
						pkt[j] = byte(rng.Uint32())
					}
					wire.PutHandshakeHeader(pkt, wire.TypeHandshakeInit, wire.SiteIDFromName("beta"), rng.Uint32())
				} else {
					rogue.Tick(time.Now().Add(time.Duration(n) * time.Hour)) // give up the last one
					pkt, _ = rogue.Connect(time.Now(), wire.SiteIDFromName("alpha"))
				}
				if pkt != nil {
					batch = append(batch, transport.Message{Buf: pkt, N: len(pkt), Addr: target})
				}
			}
			flooder.WriteBatch(batch)
			n += len(batch)
			time.Sleep(time.Millisecond) // leave room in the fake network's queues
		}
	}()
	for i := range 50 {
		f := ethernet(0xa, 0xb, fmt.Sprintf("frame %d under flood", i))
		beta.dev.Inject(f)
		receive(t, alpha, f)
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	sent := <-flooded
	c := alpha.a.hs.counters()
	t.Logf("flood of %d messages: %v", sent, c)
	if c["dropped_mac1"] < uint64(sent)/4 {
		t.Errorf("%d of %d dropped on mac1", c["dropped_mac1"], sent)
	}
	if c["dropped_mac2"]+c["dropped_rate_limited"] < uint64(sent)/4 {
		t.Errorf("%d of %d valid-mac1 initiations dropped on mac2 or rate", c["dropped_mac2"]+c["dropped_rate_limited"], sent)
	}
	// The flooder's address is allowed its burst and 20 a second.
	if c["admitted"] > session.DefaultBurst+uint64(session.DefaultPerSource*2) {
		t.Errorf("%d initiations admitted to Diffie-Hellman work", c["admitted"])
	}
	if !alpha.a.sec.Ready(wire.SiteIDFromName("beta")) {
		t.Error("alpha lost its session with beta")
	}
}
