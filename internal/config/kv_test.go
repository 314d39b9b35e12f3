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

const kvShards = `site: LAN
listen: 198.18.0.1:4800
peers:
  - {name: NEU, address: 198.18.0.2:4800}
  - {name: BOR, address: 198.18.0.3:4800}
networks:
  - name: tenant
    id: 7
    tap: dt-lan
    subnet: 198.19.0.0/16
kv_pools:
  - name: objects
    network: tenant
    address: 198.19.255.251
    near_sites: [NEU]
    shards:
      - name: s0
        replicas:
          - {address: 198.19.2.1:11211, site: LAN, tier: disk}
          - {address: 198.19.3.1:11211, site: NEU, tier: memory}
          - {address: 198.19.0.1:11211, site: BOR, tier: memory}
      - weight: 2
        replicas:
          - {address: 198.19.2.2:11211, site: LAN}
`

func TestKVShardDefaults(t *testing.T) {
	a, err := Parse([]byte(kvShards))
	if err != nil {
		t.Fatal(err)
	}
	p := a.KVPools[0]
	if p.Policy != "predicted" || !p.HedgeOn() || p.Shards[0].Weight != 1 || p.Shards[1].Weight != 2 {
		t.Errorf("defaults not applied: %+v", p)
	}
	if r := p.Shards[0].Replicas[0]; r.Tier != "disk" || r.Site != "LAN" {
		t.Errorf("replica %+v", r)
	}
	doc := strings.Replace(kvShards, "    near_sites", "    policy: local-first\n    near_sites", 1)
	if a, err = Parse([]byte(doc)); err != nil {
		t.Fatal(err)
	}
	if a.KVPools[0].HedgeOn() {
		t.Error("hedging is on by default for local-first")
	}
}

// Each bad replicated pool gets one error naming the field and its line.
func TestKVShardErrors(t *testing.T) {
	for _, c := range []struct{ name, from, to, want string }{
		{"unknown replica site", "site: BOR, tier", "site: CLU, tier", `line 21: kv_pools[0].shards[0].replicas[2].site: unknown site "CLU"`},
		{"tier not a string", "tier: disk", "tier: [disk, ssd]", "line 19: kv_pools[0].shards[0].replicas[0].tier: a list where text was expected"},
		{"shard without replica", "        replicas:\n          - {address: 198.19.2.2:11211, site: LAN}\n", "        replicas: []\n", "line 23: kv_pools[0].shards[1].replicas: 0 replicas: a shard needs 1..8"},
		{"both servers and shards", "    shards:\n", "    servers:\n      - {address: 198.19.9.9:11211, site: LAN}\n    shards:\n", "line 19: kv_pools[0].shards: a pool has either servers or shards"},
		{"duplicate replica", "198.19.2.2:11211", "198.19.3.1:11211", "line 24: kv_pools[0].shards[1].replicas[0].address: duplicate server 198.19.3.1:11211"},
		{"unknown policy", "    near_sites", "    policy: fastest\n    near_sites", `line 15: kv_pools[0].policy: "fastest" is not a policy`},
		{"static-zone without zone", "    near_sites: [NEU]\n", "    policy: static-zone\n", "line 12: kv_pools[0].near_sites: missing: static-zone needs"},
		{"unknown near site", "near_sites: [NEU]", "near_sites: [XYZ]", `line 15: kv_pools[0].near_sites[0]: unknown site "XYZ"`},
		{"shard weight", "      - weight: 2", "      - weight: -1", "line 22: kv_pools[0].shards[1].weight: -1 is outside"},
		{"duplicate shard name", "      - weight: 2", "      - name: s0\n        weight: 2", `line 22: kv_pools[0].shards[1].name: duplicate shard name "s0"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := strings.Replace(kvShards, c.from, c.to, 1)
			if doc == kvShards {
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
