package reload

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/keys"
)

func parse(t *testing.T, doc string) *config.Agent {
	t.Helper()
	a, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

const base = `site: fujisawa
listen: 127.0.0.1:4800
egress_rate: 100mbit
peers:
  - {name: inagi, address: 127.0.0.2:4800}
networks:
  - {name: default, id: 1, tap: detour0}
  - {name: red, id: 2, tap: dt-red, max_rate: 10mbit}
  - {name: green, id: 3, tap: dt-green}
`

func describe(p Plan) string {
	var s []string
	for _, a := range p.Actions {
		s = append(s, a.String())
	}
	return strings.Join(s, "; ")
}

func TestDiffNothing(t *testing.T) {
	p := Diff(parse(t, base), parse(t, base))
	if len(p.Actions)+len(p.Restart) != 0 || p.Err() != nil {
		t.Errorf("the same file gives %q, restart %v", describe(p), p.Restart)
	}
}

func TestDiffNetworks(t *testing.T) {
	newer := strings.NewReplacer(
		"  - {name: red, id: 2, tap: dt-red, max_rate: 10mbit}\n", "  - {name: red, id: 2, tap: dt-red, max_rate: 20mbit, min_rate: 1mbit}\n",
		"  - {name: green, id: 3, tap: dt-green}\n", "  - {name: green, id: 4, tap: dt-green}\n  - {name: blue, id: 5, tap: dt-blue}\n",
		"  - {name: default, id: 1, tap: detour0}\n", "",
		"egress_rate: 100mbit", "egress_rate: 200mbit\nunderlay_mtu: 9000",
	).Replace(base)
	p := Diff(parse(t, base), parse(t, newer))
	want := "remove network default (id 1); replace network green (id 3, tap dt-green) with id 4, tap dt-green; " +
		"add network blue (id 5, tap dt-blue); set limits of network red: max_rate 20mbit, min_rate 1mbit, flood_rate 0; " +
		"set egress_rate 200mbit; set underlay_mtu 9000"
	if got := describe(p); got != want {
		t.Errorf("plan\n%s\nwant\n%s", got, want)
	}
	if p.Err() != nil {
		t.Errorf("live changes refused: %v", p.Err())
	}
}

func TestDiffNeedsRestart(t *testing.T) {
	newer := strings.NewReplacer("listen: 127.0.0.1:4800", "listen: 127.0.0.1:4801",
		"address: 127.0.0.2:4800", "address: 127.0.0.3:4800", "egress_rate: 100mbit", "egress_rate: 100mbit\nprobe_interval: 200ms").Replace(base)
	p := Diff(parse(t, base), parse(t, newer))
	err := p.Err()
	if err == nil || !strings.Contains(err.Error(), "listen, probe_interval changed") || !strings.Contains(err.Error(), "restart") {
		t.Errorf("restart fields %v, error %v", p.Restart, err)
	}
}

func TestDiffPeers(t *testing.T) {
	newer := strings.Replace(base, "  - {name: inagi, address: 127.0.0.2:4800}\n",
		"  - {name: inagi, address: 127.0.0.3:4800}\n  - {name: seoul, address: 127.0.0.4:4800}\n", 1)
	p := Diff(parse(t, base), parse(t, newer))
	want := "remove peer inagi at 127.0.0.2:4800; add peer inagi at 127.0.0.3:4800; add peer seoul at 127.0.0.4:4800"
	if got := describe(p); got != want || p.Err() != nil {
		t.Errorf("plan %q, error %v; want %q", got, p.Err(), want)
	}
	p = Diff(parse(t, newer), parse(t, base))
	want = "remove peer inagi at 127.0.0.3:4800; remove peer seoul at 127.0.0.4:4800; add peer inagi at 127.0.0.2:4800"
	if got := describe(p); got != want {
		t.Errorf("plan back %q, want %q", got, want)
	}
}

func TestDiffRotatesKeyOnlyUnderCA(t *testing.T) {
	k1, k2, peer := mustKey(t), mustKey(t), mustKey(t)
	peerPub := func() string {
		k, _ := keys.ParsePrivate(peer)
		return k.Public().String()
	}()
	keyed := func(doc, key string) string {
		return strings.NewReplacer("listen: 127.0.0.1:4800", "listen: 127.0.0.1:4800\nprivate_key: "+key,
			"address: 127.0.0.2:4800}", "address: 127.0.0.2:4800, public_key: "+peerPub+"}").Replace(doc)
	}
	trusted := strings.Replace(base, "egress_rate: 100mbit",
		"egress_rate: 100mbit\ntrust:\n  ca_public_key: "+mustCA(t)+"\n  certificate_file: /etc/detour/site.crt", 1)

	p := Diff(parse(t, keyed(trusted, k1)), parse(t, keyed(trusted, k2)))
	if got, want := describe(p), "rotate the site's key (certificate /etc/detour/site.crt)"; got != want || p.Err() != nil {
		t.Errorf("a new key under a CA: plan %q (want %q), error %v", got, want, p.Err())
	}
	p = Diff(parse(t, keyed(base, k1)), parse(t, keyed(base, k2)))
	if len(p.Actions) != 0 || p.Err() == nil || !strings.Contains(p.Err().Error(), "private_key changed") ||
		!strings.Contains(p.Err().Error(), "overlay CA") {
		t.Errorf("a new key with explicit peer keys: plan %q, error %v; want a restart explained", describe(p), p.Err())
	}
}

func mustKey(t *testing.T) string {
	t.Helper()
	k, err := keys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k.String()
}

func mustCA(t *testing.T) string {
	t.Helper()
	priv, err := ca.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))
}

func TestDiffBulk(t *testing.T) {
	p := Diff(parse(t, base), parse(t, base+"bulk:\n  threshold: 1MB\n  dscp: [8]\n"))
	if p.Err() != nil || len(p.Actions) != 1 || p.Actions[0].Kind != SetBulk || p.Actions[0].Bulk.Threshold != 1_000_000 {
		t.Fatalf("a new bulk threshold and dscp: plan %s, %v", describe(p), p.Err())
	}
	if got := describe(p); !strings.Contains(got, "threshold 1MB") || !strings.Contains(got, "dscp [8]") {
		t.Errorf("plan says %q", got)
	}
	p = Diff(parse(t, base), parse(t, base+"bulk:\n  min_gain: 2\n"))
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "bulk.enabled, latency_bound, latency_bound_fraction or min_gain") || !strings.Contains(err.Error(), "applied live") {
		t.Errorf("a new bulk min_gain was not refused with the reason: %v", err)
	}
}
