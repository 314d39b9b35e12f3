//go:build netns

// This file tests issue 24 end to end: only root and the members of group
// detour may change the overlay, through the agent's unix socket; the TCP
// address answers web pages, rebound names and other users with refusals
// and serves only read-only views; a non-loopback API without a token is
// refused.
package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/api"
)

// apPrefix names the namespaces of these tests.
const apPrefix = "dta-"

// apUser is the throwaway member of group detour these tests create.
const apUser = "dtapi-op"

// apGroupMarker records that these tests created group detour, so that
// the suite's sweep removes it after a run that was killed.
const apGroupMarker = "/run/detour/netns-tests-created-group"

// sweepAPIUsers removes the user and group these tests create, if a run
// that was killed left them.
func sweepAPIUsers() {
	if exec.Command("id", "-u", apUser).Run() == nil {
		exec.Command("userdel", apUser).Run()
		fmt.Fprintf(os.Stderr, "netns tests: deleted leftover user %s\n", apUser)
	}
	if _, err := os.Stat(apGroupMarker); err == nil {
		exec.Command("groupdel", api.SocketGroup).Run()
		os.Remove(apGroupMarker)
		fmt.Fprintf(os.Stderr, "netns tests: deleted leftover group %s\n", api.SocketGroup)
	}
}

// withOperator makes sure group detour exists (created, and removed at the
// end, if it did not) and creates user apUser in it, removed at the end
// even if the test fails.
func withOperator(t *testing.T) {
	t.Helper()
	if exec.Command("getent", "group", api.SocketGroup).Run() != nil {
		os.MkdirAll(filepath.Dir(apGroupMarker), 0o755)
		if err := os.WriteFile(apGroupMarker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("groupadd", "--system", api.SocketGroup).CombinedOutput(); err != nil {
			os.Remove(apGroupMarker)
			t.Fatalf("groupadd %s: %v: %s", api.SocketGroup, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("groupdel", api.SocketGroup).CombinedOutput(); err != nil {
				t.Errorf("groupdel %s: %v: %s", api.SocketGroup, err, out)
			}
			os.Remove(apGroupMarker)
		})
	}
	out, err := exec.Command("useradd", "--system", "-M", "-N", "-s", "/usr/sbin/nologin", "-G", api.SocketGroup, apUser).CombinedOutput()
	if err != nil {
		t.Fatalf("useradd %s: %v: %s", apUser, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", apUser).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", apUser, err, out)
		}
	})
}

// as prefixes a command so that it runs as user: "root", apUser (with its
// groups) or "nobody" (no supplementary group).
func as(user string, cmd ...string) []string {
	switch user {
	case "root":
		return cmd
	case "nobody":
		return append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"}, cmd...)
	}
	return append([]string{"setpriv", "--reuid=" + user, "--regid=100", "--init-groups", "--"}, cmd...)
}

// inGateway runs a command in site's gateway namespace and returns its
// combined output.
func (o *overlay) inGateway(site string, cmd ...string) (string, error) {
	gw := o.st.Sites[o.idx(site)].Gateway
	out, err := exec.Command("ip", append([]string{"netns", "exec", gw}, cmd...)...).CombinedOutput()
	return string(out), err
}

// curlCode sends one request with curl from site's gateway as user and
// returns the HTTP status.
func (o *overlay) curlCode(t *testing.T, site, user string, args ...string) string {
	t.Helper()
	cmd := as(user, append([]string{"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "3"}, args...)...)
	out, err := o.inGateway(site, cmd...)
	if err != nil {
		t.Fatalf("curl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

// overrides is what the refused requests must leave alone: site's path to
// dest, its forbidden relays, pins and networks.
func (o *overlay) overrides(t *testing.T, site, dest string) string {
	t.Helper()
	s, err := o.status(o.idx(site))
	if err != nil {
		t.Fatal(err)
	}
	var nets []api.Network
	if err := o.api[o.idx(site)].Get("/v1/networks", &nets); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"path": o.path(o.idx(site), dest), "forbidden": s.Forbidden, "pins": s.Pins, "networks": nets})
	return string(b)
}

// TestAPIAccess: on leon-japan, inside Fujisawa's gateway, the requests of
// issue 24 are refused and change nothing; the CLI changes the overlay as
// root and as a member of group detour, and refuses user nobody with a
// clear message; every change is logged with its author and shown by
// `detour status`; reads from loopback (metrics, status) keep working.
func TestAPIAccess(t *testing.T) {
	withOperator(t)
	o := withAgents(t, upWith(t, apPrefix, "leon-japan", "--overlay", "detour"))
	if _, err := o.waitPath("Fujisawa", "Seoul", "Inagi>Seoul", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	sock := api.NetnsSocket(o.st.Sites[o.idx("Fujisawa")].Gateway)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("Fujisawa's agent socket %s: %v, %v; want mode 0660", sock, fi, err)
	}

	t.Run("web page, rebinding and other users refused", func(t *testing.T) {
		before := o.overrides(t, "Fujisawa", "Seoul")
		base := "http://127.0.0.1:7447"
		for _, c := range []struct {
			user string
			args []string
		}{
			{"root", []string{"-X", "POST", "-H", "Content-Type: text/plain", "--data", `{"dest":"Seoul","via":[]}`, base + "/v1/pins"}},
			{"root", []string{"-X", "POST", base + "/v1/forbidden/Inagi"}},
			{"root", []string{"-H", "Host: evil.example:7447", base + "/v1/status"}},
			{"nobody", []string{"-X", "POST", "-H", "Content-Type: application/json", "--data", `{"name":"evil","id":66,"tap":"dt-evil"}`, base + "/v1/networks"}},
			{"nobody", []string{"-X", "PUT", "-H", "Content-Type: application/json", "--data", `{"max_rate":"1mbit","min_rate":""}`, base + "/v1/networks/default/limits"}},
		} {
			code := o.curlCode(t, "Fujisawa", c.user, c.args...)
			if code != "403" && code != "405" {
				t.Errorf("as %s: curl %s: %s, want 403 or 405", c.user, strings.Join(c.args, " "), code)
			}
			t.Logf("as %s: curl %s: %s", c.user, strings.Join(c.args, " "), code)
		}
		time.Sleep(500 * time.Millisecond)
		if after := o.overrides(t, "Fujisawa", "Seoul"); after != before {
			t.Errorf("Fujisawa changed:\nbefore %s\nafter  %s", before, after)
		}
		// nobody's DELETE must leave a forbidden relay forbidden.
		o.mustDetour(t, "Fujisawa", "route", "forbid", "Inagi")
		forbidden := o.overrides(t, "Fujisawa", "Seoul")
		code := o.curlCode(t, "Fujisawa", "nobody", "-X", "DELETE", base+"/v1/forbidden/Inagi")
		if code != "403" && code != "405" {
			t.Errorf("as nobody: DELETE /v1/forbidden/Inagi: %s, want 403 or 405", code)
		}
		time.Sleep(500 * time.Millisecond)
		if after := o.overrides(t, "Fujisawa", "Seoul"); after != forbidden {
			t.Errorf("nobody's DELETE changed Fujisawa:\nbefore %s\nafter  %s", forbidden, after)
		}
		o.mustDetour(t, "Fujisawa", "route", "allow", "Inagi")
		if _, err := o.waitPath("Fujisawa", "Seoul", "Inagi>Seoul", 15*time.Second); err != nil {
			t.Fatal(err)
		}
		if after := o.overrides(t, "Fujisawa", "Seoul"); after != before {
			t.Errorf("Fujisawa changed:\nbefore %s\nafter  %s", before, after)
		}
	})

	for _, user := range []string{"root", apUser} {
		t.Run("CLI as "+user, func(t *testing.T) {
			o.cliChanges(t, user)
		})
	}

	t.Run("nobody refused with a clear message", func(t *testing.T) {
		before := o.overrides(t, "Fujisawa", "Seoul")
		want := "permission denied on " + sock + ": run as root or as a member of group detour"
		for _, args := range [][]string{
			{"route", "pin", "Seoul"},
			{"route", "forbid", "Inagi"},
			{"net", "attach", "evil", "--id", "66", "--tap", "dt-evil"},
			{"net", "limit", "default", "--max-rate", "1mbit"},
			{"net", "egress", "1mbit"},
		} {
			out, err := o.inGateway("Fujisawa", as("nobody", append([]string{o.bin}, args...)...)...)
			if err == nil || !strings.Contains(out, want) {
				t.Errorf("as nobody: detour %s: %v: %q, want an error saying %q", strings.Join(args, " "), err, out, want)
			}
		}
		out, _ := o.inGateway("Fujisawa", as("nobody", o.bin, "route", "pin", "Seoul")...)
		t.Logf("as nobody: detour route pin Seoul: %s", strings.TrimSpace(out))
		time.Sleep(500 * time.Millisecond)
		if after := o.overrides(t, "Fujisawa", "Seoul"); after != before {
			t.Errorf("Fujisawa changed:\nbefore %s\nafter  %s", before, after)
		}
		// Reading is for everyone.
		if out, err := o.inGateway("Fujisawa", as("nobody", o.bin, "routes")...); err != nil || !strings.Contains(out, "Seoul") {
			t.Errorf("as nobody: detour routes: %v: %s", err, out)
		}
	})

	t.Run("metrics and status from loopback", func(t *testing.T) {
		for _, site := range []string{"Fujisawa", "Inagi", "Seoul"} {
			code := o.curlCode(t, site, "nobody", "http://127.0.0.1:7447/metrics")
			out, err := o.inGateway(site, "curl", "-s", "--max-time", "3", "http://localhost:7447/metrics")
			if code != "200" || err != nil || !strings.Contains(out, "detour_members 3") {
				t.Errorf("%s: GET /metrics: %s, %v, detour_members 3 in it: %v", site, code, err, strings.Contains(out, "detour_members 3"))
			}
			if code := o.curlCode(t, site, "nobody", "http://127.0.0.1:7447/v1/status"); code != "200" {
				t.Errorf("%s: GET /v1/status: %s", site, code)
			}
			if _, err := o.status(o.idx(site)); err != nil {
				t.Errorf("%s: status through the API client: %v", site, err)
			}
		}
	})
}

// cliChanges pins, forbids, attaches, limits and detaches with the CLI in
// Fujisawa's gateway as user, and checks each change and its record in
// `detour status`.
func (o *overlay) cliChanges(t *testing.T, user string) {
	t.Helper()
	run := func(args ...string) string {
		t.Helper()
		out, err := o.inGateway("Fujisawa", as(user, append([]string{o.bin}, args...)...)...)
		if err != nil {
			t.Fatalf("as %s: detour %s: %v: %s", user, strings.Join(args, " "), err, out)
		}
		t.Logf("as %s: detour %s: %s", user, strings.Join(args, " "), strings.TrimSpace(out))
		return out
	}
	run("route", "pin", "Seoul")
	if _, err := o.waitPath("Fujisawa", "Seoul", "Seoul", 5*time.Second); err != nil {
		t.Error(err)
	}
	run("route", "unpin", "Seoul")
	run("route", "forbid", "Inagi")
	if s, _ := o.status(o.idx("Fujisawa")); !slices.Contains(s.Forbidden, "Inagi") {
		t.Errorf("forbidden relays %v after route forbid Inagi", s.Forbidden)
	}
	run("route", "allow", "Inagi")
	if s, _ := o.status(o.idx("Fujisawa")); len(s.Forbidden) != 0 || len(s.Pins) != 0 {
		t.Errorf("forbidden relays %v, pins %v after allow and unpin", s.Forbidden, s.Pins)
	}
	run("net", "attach", "blue", "--id", "77", "--tap", "dt-blue")
	run("net", "limit", "blue", "--max-rate", "10mbit")
	if list := run("net", "list"); !strings.Contains(list, "blue") || !strings.Contains(list, "10mbit") {
		t.Errorf("net list after attach and limit:\n%s", list)
	}
	run("net", "detach", "blue")
	status := run("status")
	want := fmt.Sprintf("last change: net detach blue, by %s (uid ", user)
	if !strings.Contains(status, want) {
		t.Errorf("detour status does not show %q:\n%s", want, status)
	}
	if _, err := o.waitPath("Fujisawa", "Seoul", "Inagi>Seoul", 15*time.Second); err != nil {
		t.Error(err)
	}
}

// TestAPIConfigNeedsToken: an agent configuration whose api is not a
// loopback address and has no api_token_file is refused by --check and
// at start, naming the field and its line.
func TestAPIConfigNeedsToken(t *testing.T) {
	bin := detourBin(t)
	file := filepath.Join(t.TempDir(), "site.yaml")
	// The listen address is the testbed's, absent outside its namespaces:
	// an agent that accepted the file would stop at once.
	doc := "site: fujisawa\nlisten: 198.18.0.1:4800\nprobe_interval: 100ms\napi: 0.0.0.0:7447\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "line 4: api: 0.0.0.0:7447 is not a loopback address, so the API needs a token: set api_token_file"
	for _, args := range [][]string{{"agent", "--config", file, "--check"}, {"agent", "--config", file}} {
		cmd := exec.Command(bin, args...)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("detour %s ran on", strings.Join(args, " "))
		}
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("detour %s: %v: %s; want an error with %q", strings.Join(args, " "), err, out, want)
		}
	}
}
