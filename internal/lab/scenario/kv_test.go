package scenario

import (
	"errors"
	"strings"
	"testing"
)

func TestKVPools(t *testing.T) {
	b, err := ShippedSource("lanman2017-kv")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(s.KVPools) != 1 || len(s.KVPools[0].Servers) != 3 || s.KVPools[0].Servers[0].Port != DefaultKVPort || s.KVPools[0].Servers[0].Host != 1 {
		t.Fatalf("pools %+v", s.KVPools)
	}
	for _, c := range []struct{ patch, field string }{
		{"{site: XYZ}", "kv_pools[0].servers[3].site"},
		{"{site: BOR, host: 3}", "kv_pools[0].servers[3].host"},
		{"{site: BOR}", "kv_pools[0].servers[3]"},
	} {
		bad := strings.Replace(string(b), "      - {site: NEU}\n", "      - {site: NEU}\n      - "+c.patch+"\n", 1)
		s, err := Parse([]byte(bad))
		if err == nil {
			s.ApplyDefaults()
			err = s.Validate()
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || fe.Line == 0 {
			t.Fatalf("%s: %v", c.patch, err)
		}
	}
}

// TestKVReplicatedPools parses the locality scenario and checks that a
// bad replicated pool is refused with the field and line at fault.
func TestKVReplicatedPools(t *testing.T) {
	b, err := ShippedSource("locality")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	p := s.KVPools[0]
	if !p.Replicated() || p.Policy != "predicted" || len(p.AllServers()) != 3 || p.Shards[0].Replicas[0].Tier != TierDisk ||
		p.Shards[0].Replicas[1].Tier != TierMemory || s.KVDisk == nil || s.KVDisk.ReadIOPS != 500 {
		t.Fatalf("pool %+v, disk %+v", p, s.KVDisk)
	}
	if s.KVPools[2].Policy != "static-zone" || s.KVPools[2].NearSites[0] != "MXP" || s.KVPools[4].Replicated() {
		t.Fatalf("pools %+v", s.KVPools)
	}
	for _, c := range []struct{ old, new, field string }{
		{"{site: MXP, tier: memory}", "{site: XYZ, tier: memory}", "kv_pools[0].shards[0].replicas[1].site"},
		{"{site: MXP, tier: memory}", "{site: MXP, tier: flash}", "kv_pools[0].shards[0].replicas[1].tier"},
		{"{site: MXP, tier: memory}", "{site: MXP, tier: [memory]}", ""},
		{"      - {name: s0, replicas: *replicas}\n  - name: obj-static-zone", "      - {name: s0, replicas: []}\n  - name: obj-static-zone", "kv_pools[1].shards[0].replicas"},
		{"    near_sites: [MXP]", "    near_sites: [NOWHERE]", "kv_pools[2].near_sites[0]"},
		{"    policy: nearest-rtt", "    policy: fastest", "kv_pools[3].policy"},
		{"  load_depth: 8", "  load_depth: 999", "kv_disk.load_depth"},
		{"      - {site: ZRH, host: 3}", "      - {site: ZRH, host: 2}", "kv_pools[4].servers[0].tier"},
	} {
		if !strings.Contains(string(b), c.old) {
			t.Fatalf("the scenario has no %q", c.old)
		}
		bad := strings.Replace(string(b), c.old, c.new, 1)
		s, err := Parse([]byte(bad))
		if err == nil {
			s.ApplyDefaults()
			err = s.Validate()
		}
		if c.field == "" {
			// A type error comes from the YAML decoder, with its line.
			if err == nil || !strings.Contains(err.Error(), "line 69") {
				t.Fatalf("%s: %v", c.new, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Line == 0 || fe.Field != c.field {
			t.Fatalf("%s: %v", c.new, err)
		}
	}
}
