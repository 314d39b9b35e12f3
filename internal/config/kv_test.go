package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

const kvBase = `site: a
listen: 198.18.0.1:4800
networks:
  - name: lan
    id: 7
    tap: dt-lan
    subnet: 10.20.0.0/16
kv_pools:
  - name: cache
    network: lan
    address: 10.20.0.250
    servers:
      - {address: 10.20.1.1:11211, site: a}
      - {address: 10.20.2.1:11211, site: b, weight: 3}
`

func TestKVPoolDefaults(t *testing.T) {
	a, err := Parse([]byte(kvBase))
	if err != nil {
		t.Fatal(err)
	}
	p := a.KVPools[0]
	if p.Hash != "ketama" || p.Servers[0].Weight != 1 || p.Servers[1].Weight != 3 {
		t.Errorf("defaults not applied: %+v", p)
	}
	if got := p.VirtualAddr(); got != netip.MustParseAddrPort("10.20.0.250:11211") {
		t.Errorf("VirtualAddr = %v", got)
	}
}

// Each bad pool gets one error naming the field and its line, and nothing
// starts.
func TestKVPoolErrors(t *testing.T) {
	for _, c := range []struct{ name, from, to, want string }{
		{"unknown network", "network: lan", "network: wan", `line 10: kv_pools[0].network: unknown network "wan"`},
		{"network without subnet", "    subnet: 10.20.0.0/16\n", "", `line 9: kv_pools[0].network: network "lan" has no subnet`},
		{"address outside", "address: 10.20.0.250", "address: 10.99.0.250", "line 11: kv_pools[0].address: 10.99.0.250 is outside the network's subnet 10.20.0.0/16"},
		{"address not IPv4", "address: 10.20.0.250", "address: '[fd00::1]:11211'", "line 11: kv_pools[0].address: \"[fd00::1]:11211\" is not an IPv4"},
		{"duplicate server", "10.20.2.1:11211, site: b", "10.20.1.1:11211, site: b", "line 14: kv_pools[0].servers[1].address: duplicate server 10.20.1.1:11211"},
		{"bad weight", "weight: 3", "weight: -2", "line 14: kv_pools[0].servers[1].weight: -2 is outside 1..1000"},
		{"server outside", "10.20.1.1:11211", "10.21.1.1:11211", "line 13: kv_pools[0].servers[0].address: 10.21.1.1 is outside"},
		{"server without port", "10.20.1.1:11211", "10.20.1.1", `line 13: kv_pools[0].servers[0].address: "10.20.1.1" is not an IPv4:port`},
		{"unknown hash", "    servers:\n", "    hash: crc32\n    servers:\n", `line 12: kv_pools[0].hash: "crc32" is not a placement`},
		{"no servers", "    servers:\n      - {address: 10.20.1.1:11211, site: a}\n      - {address: 10.20.2.1:11211, site: b, weight: 3}\n", "    servers: []\n", "line 12: kv_pools[0].servers: 0 servers"},
		{"bad subnet", "subnet: 10.20.0.0/16", "subnet: 10.20.0.0/31", `line 7: networks[0].subnet: "10.20.0.0/31" is not an IPv4 prefix`},
		{"server without site", ", site: b, weight: 3", ", weight: 3", `line 14: kv_pools[0].servers[1].site: "" is not a site name`},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := strings.Replace(kvBase, c.from, c.to, 1)
			if doc == kvBase {
				t.Fatalf("%q not in the base document", c.from)
			}
			_, err := Parse([]byte(doc))
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("accepted or wrong error: %v", err)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q: want one line containing %q", err, c.want)
			}
		})
	}
}
