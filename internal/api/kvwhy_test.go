package api

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func (f *fakeBackend) KVWhy(pool, key string) (KVWhy, error) {
	if pool != "cache" {
		return KVWhy{}, fmt.Errorf("%w: no kv pool %q", ErrNotFound, pool)
	}
	return KVWhy{Pool: pool, Key: key, Chosen: "10.20.0.11:11211", Replicas: []KVReplicaWhy{{Address: "10.20.0.11:11211", PredictedMs: 1.5}}}, nil
}

// kv why is read on the TCP listener with the key in the query; an
// unknown pool is a 404 and a missing key a 400.
func TestKVWhyRoute(t *testing.T) {
	h, _ := guarded(GuardOptions{Addr: netip.MustParseAddrPort("127.0.0.1:7447")})
	w := do(h, "GET", "127.0.0.1:7447", "/v1/kv/pools/cache/why?key=a%2Fb+c", "", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"key": "a/b c"`) || !strings.Contains(w.Body.String(), `"predicted_ms": 1.5`) {
		t.Fatalf("why: %d %s", w.Code, w.Body)
	}
	if w = do(h, "GET", "127.0.0.1:7447", "/v1/kv/pools/nope/why?key=k", "", ""); w.Code != 404 {
		t.Errorf("unknown pool: %d", w.Code)
	}
	if w = do(h, "GET", "127.0.0.1:7447", "/v1/kv/pools/cache/why", "", ""); w.Code != 400 || !strings.Contains(w.Body.String(), "key is missing") {
		t.Errorf("no key: %d %s", w.Code, w.Body)
	}
}
