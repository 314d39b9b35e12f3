package runstate

import (
	"reflect"
	"testing"
)

// TestKVPoolsRoundTrip: pools with versions, origins, drained and joining
// servers, and the file's fingerprints survive encoding; a pool without
// a version or listed twice is refused.
func TestKVPoolsRoundTrip(t *testing.T) {
	d := New("lan")
	d.SetKVPools([]KVPool{{Name: "cache", Network: 1, Address: "198.19.255.250:11211", Hash: "ketama", Version: 3, Origin: 77,
		Servers: []KVServer{{Address: "198.19.1.1:11211", Weight: 1, Site: "BOR", Drained: true}, {Address: "198.19.2.1:11211", Weight: 2, Site: "CLU", Joining: true}}}})
	d.KVFile = map[string]string{"cache": "00ff"}
	b := d.Encode()
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Encode()) != string(b) || !got.KVPools[0].Servers[0].Drained || !got.KVPools[0].Servers[1].Joining || got.KVPools[0].Origin != 77 {
		t.Fatalf("round trip:\n%s\n%s", b, got.Encode())
	}
	c := got.Clone()
	c.KVPools[0].Servers[0].Weight = 9
	if got.KVPools[0].Servers[0].Weight == 9 {
		t.Error("Clone shares the servers")
	}
	for name, doc := range map[string]string{
		"shard out of range":  `{"version":1,"site":"a","kv_pools":[{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","version":1,"origin":1,"servers":[{"address":"1.2.3.5:5","weight":1,"site":"s","shard":1}],"shards":[{"weight":1}],"policy":"predicted"}]}`,
		"shard not held":      `{"version":1,"site":"a","kv_pools":[{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","version":1,"origin":1,"servers":[{"address":"1.2.3.5:5","weight":1,"site":"s"}],"shards":[{"weight":1},{"weight":1}],"policy":"predicted"}]}`,
		"shard weight 0":      `{"version":1,"site":"a","kv_pools":[{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","version":1,"origin":1,"servers":[{"address":"1.2.3.5:5","weight":1,"site":"s"}],"shards":[{"weight":0}],"policy":"predicted"}]}`,
		"shards no policy":    `{"version":1,"site":"a","kv_pools":[{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","version":1,"origin":1,"servers":[{"address":"1.2.3.5:5","weight":1,"site":"s"}],"shards":[{"weight":1}]}]}`,
		"tier without shards": `{"version":1,"site":"a","kv_pools":[{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","version":1,"origin":1,"servers":[{"address":"1.2.3.5:5","weight":1,"site":"s","tier":"disk"}]}]}`,
		"near without shards": `{"version":1,"site":"a","kv_pools":[{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","version":1,"origin":1,"servers":[{"address":"1.2.3.5:5","weight":1,"site":"s"}],"near_sites":["b"]}]}`,
		"no version":          `{"version":1,"site":"a","kv_pools":[{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","origin":1,"servers":[{"address":"1.2.3.5:5","weight":1,"site":"s"}]}]}`,
		"twice":               `{"version":1,"site":"a","kv_pools":[{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","version":1,"origin":1,"servers":[{"address":"1.2.3.5:5","weight":1,"site":"s"}]},{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","version":1,"origin":1,"servers":[{"address":"1.2.3.5:5","weight":1,"site":"s"}]}]}`,
		"bad server":          `{"version":1,"site":"a","kv_pools":[{"name":"p","network_id":1,"address":"1.2.3.4:5","hash":"ketama","version":1,"origin":1,"servers":[{"address":"x","weight":1,"site":"s"}]}]}`,
	} {
		if _, err := Decode([]byte(doc)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// TestKVReplicatedPoolRoundTrip: a pool with shards keeps its policy,
// hedge, near sites, shards and each server's shard and tier, and a copy
// shares none of them.
func TestKVReplicatedPoolRoundTrip(t *testing.T) {
	d := New("lan")
	d.SetKVPools([]KVPool{{Name: "objects", Network: 1, Address: "198.19.255.251:11211", Hash: "ketama", Version: 2, Origin: 77,
		Policy: "static-zone", Hedge: true, NearSites: []string{"NEU"}, Shards: []KVShard{{Name: "s0", Weight: 1}, {Weight: 2}},
		Servers: []KVServer{{Address: "198.19.2.1:11211", Weight: 1, Site: "LAN", Tier: "disk"},
			{Address: "198.19.3.1:11211", Weight: 1, Site: "NEU", Tier: "memory"},
			{Address: "198.19.0.1:11211", Weight: 1, Site: "BOR", Shard: 1}}}})
	b := d.Encode()
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.KVPools, d.KVPools) {
		t.Fatalf("round trip:\n%+v\n%+v", got.KVPools, d.KVPools)
	}
	c := got.Clone()
	c.KVPools[0].Shards[0].Name = "x"
	c.KVPools[0].NearSites[0] = "x"
	if got.KVPools[0].Shards[0].Name != "s0" || got.KVPools[0].NearSites[0] != "NEU" {
		t.Error("Clone shares the shards or near sites")
	}
}
