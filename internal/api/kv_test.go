package api

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// The fake backend's key router has one pool, "cache".
func (f *fakeBackend) KVPools() []KVPool {
	p, _ := f.KVPool("cache")
	return []KVPool{p}
}

func (f *fakeBackend) KVPool(name string) (KVPool, error) {
	if name != "cache" {
		return KVPool{}, fmt.Errorf("%w: no kv pool %q", ErrNotFound, name)
	}
	return KVPool{Name: "cache", Address: "10.20.0.250:11211", Hash: "ketama", Version: 1,
		Servers: []KVServer{{Address: "10.20.0.11:11211", Site: "lan", Weight: 1, State: "up"}}}, nil
}

func (f *fakeBackend) KVChange(pool string, c KVChange) (KVPool, error) {
	p, err := f.KVPool(pool)
	if err != nil {
		return p, err
	}
	if !strings.Contains(c.Address, ":") {
		return p, fmt.Errorf("%w: %q is not IPv4:port", ErrBadRequest, c.Address)
	}
	p.Version++
	return p, f.did(fmt.Sprintf("%s %s %s %s %d", c.Op, pool, c.Address, c.Site, c.Weight))
}

// The pools are read on the TCP listener; an unknown pool is a 404 with
// a JSON error; changes are not served there.
func TestKVReads(t *testing.T) {
	h, _ := guarded(GuardOptions{Addr: netip.MustParseAddrPort("127.0.0.1:7447")})
	w := do(h, "GET", "127.0.0.1:7447", "/v1/kv/pools", "", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"address": "10.20.0.250:11211"`) || !strings.Contains(w.Body.String(), `"version": 1`) {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	w = do(h, "GET", "127.0.0.1:7447", "/v1/kv/pools/cache", "", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"name": "cache"`) {
		t.Fatalf("show: %d %s", w.Code, w.Body)
	}
	w = do(h, "GET", "127.0.0.1:7447", "/v1/kv/pools/nope", "", "")
	if w.Code != 404 || w.Body.String() != `{"error":"not found: no kv pool \"nope\""}`+"\n" {
		t.Fatalf("unknown pool: %d %q", w.Code, w.Body)
	}
	w = do(h, "POST", "127.0.0.1:7447", "/v1/kv/pools/cache/servers", "application/json", `{"address":"10.20.0.14:11211","site":"lan"}`)
	if w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("a change on the TCP listener: %d", w.Code)
	}
}

// Changes go through the unix socket to the backend, which gets each
// with its operation; its errors come back with their status.
func TestKVChanges(t *testing.T) {
	s, b := newTestServer()
	c := NewSocketClient(serveSocket(t, s, t.TempDir(), Access{GID: -1}))
	var p KVPool
	if err := c.Post("/v1/kv/pools/cache/servers", KVServerAdd{Address: "10.20.0.14:11211", Site: "lan", Weight: 2}, &p); err != nil || p.Version != 2 {
		t.Fatalf("add: %v, version %d", err, p.Version)
	}
	for _, call := range []func() error{
		func() error { return c.Post("/v1/kv/pools/cache/servers/10.20.0.14:11211/drain", nil, nil) },
		func() error { return c.Delete("/v1/kv/pools/cache/servers/10.20.0.14:11211/drain", nil) },
		func() error { return c.Delete("/v1/kv/pools/cache/servers/10.20.0.14:11211", nil) },
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"add-server cache 10.20.0.14:11211 lan 2", "drain cache 10.20.0.14:11211  0",
		"undrain cache 10.20.0.14:11211  0", "remove-server cache 10.20.0.14:11211  0"}
	if got := b.done(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("backend got %q, want %q", got, want)
	}
	if err := c.Post("/v1/kv/pools/nope/servers", KVServerAdd{Address: "10.20.0.14:11211"}, nil); err == nil || !strings.Contains(err.Error(), `no kv pool "nope"`) {
		t.Errorf("unknown pool: %v", err)
	}
	if err := c.Post("/v1/kv/pools/cache/servers", KVServerAdd{Address: "bad"}, nil); err == nil || !strings.Contains(err.Error(), `"bad" is not IPv4:port`) {
		t.Errorf("bad address: %v", err)
	}
	if code := raw(t, c.Socket, "POST", "/v1/kv/pools/cache/servers", "application/json", `{"address":"10.20.0.14:11211","bogus":1}`); code != 400 {
		t.Errorf("unknown field: %d, want 400", code)
	}
	if code := raw(t, c.Socket, "POST", "/v1/kv/pools/cache/servers", "text/plain", `{}`); code != 415 {
		t.Errorf("not JSON: %d, want 415", code)
	}
}
