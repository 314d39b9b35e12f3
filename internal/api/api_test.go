package api

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// fakeBackend records the changes asked of it.
type fakeBackend struct {
	mu      sync.Mutex
	changes []string
}

func (f *fakeBackend) did(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes = append(f.changes, s)
	return nil
}

func (f *fakeBackend) done() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.changes...)
}

func (f *fakeBackend) Status() Status { return Status{Site: "Fujisawa"} }
func (f *fakeBackend) Links() []Link  { return []Link{} }
func (f *fakeBackend) Routes() []Route {
	return []Route{{Dest: "Seoul", Path: []string{"Inagi", "Seoul"}}}
}
func (f *fakeBackend) TIVs() []TIV                       { return []TIV{} }
func (f *fakeBackend) Why(site string) (Why, error)      { return Why{Dest: site}, nil }
func (f *fakeBackend) FDB() []FDBEntry                   { return []FDBEntry{} }
func (f *fakeBackend) Pin(p Pin) error                   { return f.did("pin " + p.Dest) }
func (f *fakeBackend) Unpin(site string) error           { return f.did("unpin " + site) }
func (f *fakeBackend) Forbid(site string) error          { return f.did("forbid " + site) }
func (f *fakeBackend) Allow(site string) error           { return f.did("allow " + site) }
func (f *fakeBackend) Networks() []Network               { return []Network{} }
func (f *fakeBackend) Attach(n Network) (Network, error) { return n, f.did("attach " + n.Name) }
func (f *fakeBackend) Detach(name string) error          { return f.did("detach " + name) }
func (f *fakeBackend) SetLimits(name, mx, mn string) error {
	return f.did("limit " + name + " " + mx + " " + mn)
}
func (f *fakeBackend) SetEgress(rate string) error { return f.did("egress " + rate) }
func (f *fakeBackend) Reload() (Reload, error)     { return Reload{Applied: []string{}}, f.did("reload") }

func newTestServer() (*Server, *fakeBackend) {
	b := &fakeBackend{}
	return NewServer(b, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil))), b
}

// guarded serves the read-only views behind Guard, as the agent's TCP
// listener does.
func guarded(o GuardOptions) (http.Handler, *fakeBackend) {
	s, b := newTestServer()
	return Guard(s.ReadHandler(), o), b
}

func do(h http.Handler, method, host, path, ctype, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://localhost"+path, strings.NewReader(body))
	req.Host = host
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestGuardHost(t *testing.T) {
	cases := []struct {
		listen string
		host   string
		want   int
	}{
		{"127.0.0.1:7447", "127.0.0.1:7447", 200},
		{"127.0.0.1:7447", "127.0.0.1", 200},
		{"127.0.0.1:7447", "localhost:7447", 200},
		{"127.0.0.1:7447", "localhost", 200},
		{"127.0.0.1:7447", "LocalHost:7447", 200},
		{"127.0.0.1:7447", "evil.example:7447", 403},
		{"127.0.0.1:7447", "evil.example", 403},
		{"127.0.0.1:7447", "localhost.evil.example:7447", 403},
		{"127.0.0.1:7447", "127.0.0.1:8080", 403},
		{"127.0.0.1:7447", "127.0.0.2:7447", 403},
		{"127.0.0.1:7447", "", 403},
		{"[::1]:7447", "[::1]:7447", 200},
		{"[::1]:7447", "[::1]", 200},
		{"[::1]:7447", "localhost:7447", 200},
		{"[::1]:7447", "127.0.0.1:7447", 403},
		{"[::1]:7447", "[::1%lo]:7447", 403},
		{"198.18.0.1:7447", "198.18.0.1:7447", 200},
		{"198.18.0.1:7447", "evil.example:7447", 403},
		{"0.0.0.0:7447", "198.18.0.1:7447", 200},
		{"0.0.0.0:7447", "[2001:db8::1]:7447", 200},
		{"0.0.0.0:7447", "evil.example:7447", 403},
	}
	for _, c := range cases {
		h, _ := guarded(GuardOptions{Addr: netip.MustParseAddrPort(c.listen)})
		w := do(h, "GET", c.host, "/v1/status", "", "")
		if w.Code != c.want {
			t.Errorf("listening on %s, Host %q: %d, want %d (%s)", c.listen, c.host, w.Code, c.want, w.Body)
		}
	}
}

// The requests of issue 24: any web page can send the first two to a
// loopback address; none may change anything on the TCP listener.
func TestGuardRefusesChanges(t *testing.T) {
	h, b := guarded(GuardOptions{Addr: netip.MustParseAddrPort("127.0.0.1:7447")})
	for _, r := range []struct{ method, path, ctype, body string }{
		{"POST", "/v1/pins", "text/plain", `{"dest":"Seoul","via":[]}`},
		{"POST", "/v1/pins", "application/json", `{"dest":"Seoul","via":[]}`},
		{"POST", "/v1/forbidden/Inagi", "", ""},
		{"DELETE", "/v1/forbidden/Inagi", "", ""},
		{"DELETE", "/v1/pins/Seoul", "", ""},
		{"POST", "/v1/networks", "application/json", `{"name":"x","id":5,"tap":"dt-x"}`},
		{"DELETE", "/v1/networks/default", "", ""},
		{"PUT", "/v1/networks/default/limits", "application/json", `{"max_rate":"1mbit"}`},
		{"PUT", "/v1/egress", "application/json", `{"rate":"1mbit"}`},
		{"PATCH", "/v1/status", "", ""},
		{"OPTIONS", "/v1/pins", "", ""},
	} {
		w := do(h, r.method, "127.0.0.1:7447", r.path, r.ctype, r.body)
		if w.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d, want 405", r.method, r.path, w.Code)
		}
		if got := w.Header().Get("Allow"); got != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q", r.method, r.path, got)
		}
	}
	if ch := b.done(); len(ch) > 0 {
		t.Errorf("the backend was changed through the TCP listener: %v", ch)
	}
	for _, path := range []string{"/v1/status", "/v1/routes", "/v1/links", "/v1/tivs", "/v1/fdb", "/v1/why/Seoul", "/v1/networks", "/metrics"} {
		if w := do(h, "GET", "127.0.0.1:7447", path, "", ""); w.Code != 200 {
			t.Errorf("GET %s: %d", path, w.Code)
		}
	}
	if w := do(h, "HEAD", "localhost:7447", "/v1/status", "", ""); w.Code != 200 {
		t.Errorf("HEAD /v1/status: %d", w.Code)
	}
}

func TestGuardSendsNoCORSHeaders(t *testing.T) {
	h, _ := guarded(GuardOptions{Addr: netip.MustParseAddrPort("127.0.0.1:7447")})
	for _, method := range []string{"GET", "OPTIONS"} {
		w := do(h, method, "127.0.0.1:7447", "/v1/status", "", "", "Origin", "http://evil.example",
			"Access-Control-Request-Method", "POST")
		for k := range w.Header() {
			if strings.HasPrefix(strings.ToLower(k), "access-control-") {
				t.Errorf("%s with an Origin: answer has %s: %s", method, k, w.Header().Get(k))
			}
		}
	}
}

func TestGuardToken(t *testing.T) {
	const tok = "0123456789abcdef0123"
	h, _ := guarded(GuardOptions{Addr: netip.MustParseAddrPort("0.0.0.0:7447"), Token: tok})
	for _, c := range []struct {
		auth string
		want int
	}{
		{"", 401},
		{"Bearer wrong", 401},
		{"Bearer " + tok + "x", 401},
		{"Basic " + tok, 401},
		{"Bearer", 401},
		{"Bearer " + tok, 200},
		{"bearer " + tok, 200},
	} {
		w := do(h, "GET", "198.18.0.1:7447", "/metrics", "", "", "Authorization", c.auth)
		if w.Code != c.want {
			t.Errorf("Authorization %q: %d, want %d", c.auth, w.Code, c.want)
		}
		if c.want == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: 401 without WWW-Authenticate", c.auth)
		}
	}
	// The token does not open the door to changes.
	w := do(h, "POST", "198.18.0.1:7447", "/v1/forbidden/Inagi", "", "", "Authorization", "Bearer "+tok)
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST with the token: %d, want 405", w.Code)
	}
	// Without a token, none is asked for.
	h, _ = guarded(GuardOptions{Addr: netip.MustParseAddrPort("127.0.0.1:7447")})
	if w := do(h, "GET", "127.0.0.1:7447", "/metrics", "", ""); w.Code != 200 {
		t.Errorf("no token configured: %d", w.Code)
	}
}

func TestParseGroups(t *testing.T) {
	status := "Name:\tcat\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 27 1001 \nNgid:\t0\n"
	got, err := parseGroups(status)
	if err != nil || len(got) != 4 || got[0] != 4 || got[3] != 1001 {
		t.Errorf("parseGroups = %v, %v", got, err)
	}
	if got, err := parseGroups("Groups:\t\n"); err != nil || len(got) != 0 {
		t.Errorf("no groups: %v, %v", got, err)
	}
	if _, err := parseGroups("Name: x\n"); err == nil {
		t.Error("a status without a Groups line was accepted")
	}
}

func TestAccessAllow(t *testing.T) {
	groups := func(pid int32) ([]uint32, error) {
		if pid == 10 {
			return []uint32{4, 4242}, nil
		}
		if pid == 11 {
			return nil, errors.New("gone")
		}
		return []uint32{4}, nil
	}
	acc := Access{GID: 4242, Group: "detour"}
	for _, c := range []struct {
		p    Peer
		acc  Access
		want bool
	}{
		{Peer{UID: 0, GID: 0, PID: 1}, acc, true},
		{Peer{UID: 1000, GID: 1000, PID: 10}, acc, true}, // supplementary group
		{Peer{UID: 1000, GID: 4242, PID: 12}, acc, true}, // primary group
		{Peer{UID: 1000, GID: 1000, PID: 12}, acc, false},
		{Peer{UID: 1000, GID: 1000, PID: 11}, acc, false},               // groups unreadable
		{Peer{UID: 65534, GID: 65534, PID: 10}, Access{GID: -1}, false}, // no group: root only
		{Peer{UID: 65534, GID: 4242, PID: 10}, Access{GID: -1}, false},
	} {
		err := c.acc.allow(c.p, groups)
		if (err == nil) != c.want {
			t.Errorf("%+v with %+v: %v, want allowed %v", c.p, c.acc, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "neither root nor a member of group detour") {
			t.Errorf("refusal %q does not say who may", err)
		}
	}
}

func TestStatusShowsLastChange(t *testing.T) {
	s, _ := newTestServer()
	h := s.LocalHandler(Access{GID: -1})
	req := httptest.NewRequest("POST", "http://localhost/v1/forbidden/Inagi", nil)
	req = req.WithContext(withPeer(req.Context(), Peer{UID: 0, User: "root", PID: 4321}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 200 {
		t.Fatalf("forbid: %d %s", w.Code, w.Body)
	}
	for _, rh := range []http.Handler{s.ReadHandler(), h} {
		req := httptest.NewRequest("GET", "http://localhost/v1/status", nil)
		req = req.WithContext(withPeer(req.Context(), Peer{UID: 0, User: "root", PID: 1}))
		w := httptest.NewRecorder()
		rh.ServeHTTP(w, req)
		var st Status
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		if c := st.LastChange; c == nil || c.What != "route forbid Inagi" || c.User != "root" || c.PID != 4321 || c.At.IsZero() {
			t.Errorf("last change %+v", c)
		}
	}
}
