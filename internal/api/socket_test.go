package api

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// serveSocket serves s's local handler for acc on a socket in dir and
// returns its path.
func serveSocket(t *testing.T, s *Server, dir string, acc Access) string {
	t.Helper()
	path := filepath.Join(dir, "detour.sock")
	ln, err := ListenSocket(path, acc)
	if err != nil {
		t.Fatal(err)
	}
	srv := LocalServer(s.LocalHandler(acc))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return path
}

// raw sends one request over the socket with a chosen content type.
func raw(t *testing.T, path, method, url, ctype, body string) int {
	t.Helper()
	c := NewSocketClient(path)
	req, _ := http.NewRequest(method, "http://localhost"+url, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestSocketChangesNeedJSON(t *testing.T) {
	s, b := newTestServer()
	path := serveSocket(t, s, t.TempDir(), Access{GID: -1})
	pin := `{"dest":"Seoul","via":[]}`
	for _, c := range []struct {
		method, url, ctype, body string
		want                     int
	}{
		{"POST", "/v1/pins", "text/plain", pin, 415},
		{"POST", "/v1/pins", "", pin, 415},
		{"POST", "/v1/pins", "application/x-www-form-urlencoded", pin, 415},
		{"POST", "/v1/pins", "multipart/form-data; boundary=x", pin, 415},
		{"POST", "/v1/networks", "text/plain", `{"name":"x","id":5}`, 415},
		{"PUT", "/v1/networks/default/limits", "text/plain", `{"max_rate":"1mbit","min_rate":""}`, 415},
		{"PUT", "/v1/egress", "", `{"rate":"1mbit"}`, 415},
		{"POST", "/v1/pins", "application/json", `{"dest":"Seoul","via":[],"x":1}`, 400},
	} {
		if got := raw(t, path, c.method, c.url, c.ctype, c.body); got != c.want {
			t.Errorf("%s %s as %q: %d, want %d", c.method, c.url, c.ctype, got, c.want)
		}
	}
	if ch := b.done(); len(ch) > 0 {
		t.Fatalf("changes made from bodies not sent as JSON: %v", ch)
	}
	if got := raw(t, path, "POST", "/v1/pins", "application/json; charset=utf-8", pin); got != 200 {
		t.Errorf("POST /v1/pins as JSON with a charset: %d", got)
	}
	c := NewSocketClient(path)
	steps := []error{
		c.Post("/v1/pins", Pin{Dest: "Seoul", Via: []string{"Inagi"}}, nil),
		c.Delete("/v1/pins/Seoul", nil),
		c.Post("/v1/forbidden/Inagi", nil, nil),
		c.Delete("/v1/forbidden/Inagi", nil),
		c.Post("/v1/networks", Network{Name: "blue", ID: 5, TAP: "dt-blue"}, nil),
		c.Put("/v1/networks/blue/limits", Limits{MaxRate: "10mbit"}, nil),
		c.Put("/v1/egress", Egress{Rate: "20mbit"}, nil),
		c.Delete("/v1/networks/blue", nil),
	}
	for i, err := range steps {
		if err != nil {
			t.Errorf("change %d through the socket: %v", i, err)
		}
	}
	want := "pin Seoul,pin Seoul,unpin Seoul,forbid Inagi,allow Inagi,attach blue,limit blue 10mbit ,egress 20mbit,detach blue"
	if got := strings.Join(b.done(), ","); got != want {
		t.Errorf("changes %s, want %s", got, want)
	}
	var st Status
	if err := c.Get("/v1/status", &st); err != nil {
		t.Fatal(err)
	}
	lc := st.LastChange
	if lc == nil || lc.What != "net detach blue" || lc.UID != uint32(os.Getuid()) || lc.PID != int32(os.Getpid()) || lc.User == "" {
		t.Errorf("last change %+v, want net detach blue by uid %d pid %d", lc, os.Getuid(), os.Getpid())
	}
}

func TestListenSocketFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "detour.sock")
	ln, err := ListenSocket(path, Access{GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket without a group: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if _, err := ListenSocket(path, Access{GID: -1}); err == nil || !strings.Contains(err.Error(), "another agent listens") {
		t.Errorf("a second agent on the same socket: %v", err)
	}
	// An agent that was killed leaves its socket behind.
	ln.SetUnlinkOnClose(false)
	ln.Close()
	ln, err = ListenSocket(path, Access{GID: -1})
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	ln.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket outlives its listener: %v", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := ListenSocket(file, Access{GID: -1}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a regular file in the way: %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	ln, err = ListenSocket(path, Access{GID: 4242, Group: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, _ := os.Stat(path)
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o660 || st.Gid != 4242 {
		t.Errorf("socket with group 4242: mode %v gid %d, want 0660 and 4242", fi.Mode().Perm(), st.Gid)
	}
}

func TestSocketClientErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.sock")
	err := NewSocketClient(path).Post("/v1/forbidden/Inagi", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "no agent listens on "+path) {
		t.Errorf("missing socket: %v", err)
	}
}

func TestLocalSocket(t *testing.T) {
	if got := NetnsSocket("dt-fujisawa"); got != "/run/detour/netns/dt-fujisawa.sock" {
		t.Errorf("NetnsSocket = %s", got)
	}
	if netnsName() == "" && LocalSocket() != DefaultSocket {
		t.Errorf("outside named namespaces LocalSocket = %s", LocalSocket())
	}
}

// helperEnv makes the test binary act as a caller of the socket named by
// its value (see TestHelperCaller).
const helperEnv = "DETOUR_API_TEST_SOCKET"

// TestHelperCaller is not a test: run by TestSocketPeerCredentials as
// another user, it forbids a relay through the socket and prints the
// outcome.
func TestHelperCaller(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("a helper process of TestSocketPeerCredentials")
	}
	if err := NewSocketClient(path).Post("/v1/forbidden/Inagi", nil, nil); err != nil {
		fmt.Println("RESULT:", err)
		return
	}
	fmt.Println("RESULT: ok")
}

// TestSocketPeerCredentials runs callers as user nobody, with and without
// the socket's group among their supplementary groups, against the
// socket's file mode and against SO_PEERCRED alone (the file opened to
// everyone).
func TestSocketPeerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run callers as another user")
	}
	const gid = 4242 // a group no one has; the callers are given it or not
	dir, err := os.MkdirTemp("", "detour-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "api.test")
	self, _ := os.Executable()
	if b, err := os.ReadFile(self); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copying the test binary: %v", err)
	}
	s, b := newTestServer()
	path := serveSocket(t, s, dir, Access{GID: gid, Group: SocketGroup})
	call := func(groups ...uint32) string {
		cmd := exec.Command(bin, "-test.run=^TestHelperCaller$", "-test.v")
		cmd.Env = []string{helperEnv + "=" + path}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}}
		out, err := cmd.CombinedOutput()
		for _, l := range strings.Split(string(out), "\n") {
			if r, ok := strings.CutPrefix(l, "RESULT: "); ok {
				return r
			}
		}
		t.Fatalf("helper: %v: %s", err, out)
		return ""
	}
	// The file's mode: only the group may connect.
	if got := call(); !strings.Contains(got, "permission denied on "+path+": run as root or as a member of group detour") {
		t.Errorf("nobody outside the group: %q", got)
	}
	if got := call(gid); got != "ok" {
		t.Errorf("nobody in the group: %q", got)
	}
	// SO_PEERCRED alone, should the file's mode be opened.
	os.Chmod(path, 0o666)
	if got := call(); !strings.Contains(got, "permission denied: uid 65534") || !strings.Contains(got, "neither root nor a member of group detour") {
		t.Errorf("nobody outside the group, socket mode 0666: %q", got)
	}
	if got := call(gid); got != "ok" {
		t.Errorf("nobody in the group, socket mode 0666: %q", got)
	}
	if got := strings.Join(b.done(), ","); got != "forbid Inagi,forbid Inagi" {
		t.Errorf("changes made: %s, want two by the group's member", got)
	}
	lc := s.lastChange()
	if lc == nil || lc.UID != 65534 || lc.What != "route forbid Inagi" {
		t.Errorf("last change %+v, want one by uid 65534", lc)
	}
}
