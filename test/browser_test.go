//go:build netns

package test

// This file tests the agent's map page in a real browser: headless
// Chromium, driven through the DevTools protocol over a pipe
// (--remote-debugging-pipe: JSON messages ended by a NUL byte on file
// descriptors 3 and 4), inside a gateway's namespace where the agent's API
// listens on 127.0.0.1:7447.

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/api"
)

// browser is a headless Chromium and one page of it.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      io.WriteCloser // the browser's fd 3: our requests
	out     *bufio.Reader  // the browser's fd 4: its answers and events
	mu      sync.Mutex
	id      int
	session string
}

// chromiumPath returns the browser's binary; CI must have it (the project's
// install script installs Debian's chromium).
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: scripts/install-deps.sh installs it")
	}
	t.Skip("chromium is not installed (scripts/install-deps.sh installs it)")
	return ""
}

// openBrowser starts Chromium in namespace ns ("": this one) and opens url
// in a page.
func openBrowser(t *testing.T, ns, url string) *browser {
	t.Helper()
	bin := chromiumPath(t)
	toBrowser, ourEnd, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	theirEnd, fromBrowser, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{bin}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	cmd := exec.Command(args[0], append(args[1:], "--headless=new", "--no-sandbox", "--disable-gpu",
		"--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), "--window-size=1400,1100",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--metrics-recording-only", "about:blank")...)
	cmd.ExtraFiles = []*os.File{toBrowser, fromBrowser} // fds 3 and 4
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	toBrowser.Close()
	fromBrowser.Close()
	b := &browser{t: t, cmd: cmd, in: ourEnd, out: bufio.NewReader(theirEnd)}
	t.Cleanup(b.close)
	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": url}, &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	return b
}

// call sends one DevTools command and waits for its answer, skipping
// events.
func (b *browser) call(session, method string, params any, result any) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.id++
	msg := map[string]any{"id": b.id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	data, _ := json.Marshal(msg)
	if _, err := b.in.Write(append(data, 0)); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	deadline := time.AfterFunc(30*time.Second, func() { b.cmd.Process.Kill() })
	defer deadline.Stop()
	for {
		raw, err := b.out.ReadBytes(0)
		if err != nil {
			b.t.Fatalf("%s: reading the browser: %v", method, err)
		}
		var ans struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw[:len(raw)-1], &ans); err != nil || ans.ID != b.id {
			continue // an event, or an answer to nobody
		}
		if ans.Error != nil {
			b.t.Fatalf("%s: %s", method, ans.Error.Message)
		}
		if result != nil {
			if err := json.Unmarshal(ans.Result, result); err != nil {
				b.t.Fatalf("%s: %v", method, err)
			}
		}
		return
	}
}

// eval evaluates a JavaScript expression in the page and returns its
// value as a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r)
	if r.Result.Value == nil {
		return ""
	}
	return fmt.Sprint(r.Result.Value)
}

// waitFor evaluates expr every 50 ms until it returns want, and returns
// how long that took.
func (b *browser) waitFor(expr, want string, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	got := ""
	for time.Since(t0) < timeout {
		if got = b.eval(expr); got == want {
			return time.Since(t0), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(t0), fmt.Errorf("%s is %q after %v, want %q", expr, got, timeout, want)
}

// screenshot saves the page as a PNG in dir and returns the file.
func (b *browser) screenshot(dir, name string) string {
	b.t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return file
}

// close ends the browser: politely, then by its PID.
func (b *browser) close() {
	done := make(chan struct{})
	go func() { b.cmd.Wait(); close(done) }()
	msg, _ := json.Marshal(map[string]any{"id": 1 << 30, "method": "Browser.close"})
	b.in.Write(append(msg, 0))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		b.cmd.Process.Kill()
		<-done
	}
	b.in.Close()
}

// screenshotDir is where the browser test leaves its screenshots:
// $DETOUR_SCREENSHOTS, or a directory of the test's own.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("DETOUR_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

const uiPrefix = "dtu-"

// TestMapPage: on leon-japan, Fujisawa's map page in headless Chromium
// shows Fujisawa→Seoul relayed through Inagi; after the direct link is made
// the fastest, the page shows the direct path within 2 s; after the agent
// restarts, the page reconnects by itself. Screenshots are saved.
func TestMapPage(t *testing.T) {
	o := withAgents(t, upWith(t, uiPrefix, "leon-japan", "--overlay", "detour"))
	if _, err := o.waitPath("Fujisawa", "Seoul", "Inagi>Seoul", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	gw := o.st.Sites[o.idx("Fujisawa")].Gateway
	b := openBrowser(t, gw, "http://127.0.0.1:7447/")
	dir := screenshotDir(t)
	const path = `(document.querySelector('#routes tr[data-dest="Seoul"]') || {dataset: {}}).dataset.path || ""`
	if _, err := b.waitFor(path, "Fujisawa>Inagi>Seoul", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := b.eval(`document.querySelectorAll('#matrix td.tiv').length > 0 && document.querySelector('#matrix td[data-from="Fujisawa"][data-to="Seoul"]').classList.contains("tiv")`); got != "true" {
		t.Errorf("the matrix does not frame Fujisawa→Seoul as a detour: %q", got)
	}
	// Headless Chromium records the paint when it produces the frame,
	// which may come after the page's script has filled the table: wait
	// for the entry, and judge the time it gives.
	if _, err := b.waitFor(`performance.getEntriesByName("first-contentful-paint").length > 0`, "true", 3*time.Second); err != nil {
		t.Errorf("no first contentful paint recorded: %v", err)
	}
	paint := b.eval(`(performance.getEntriesByName("first-contentful-paint")[0] || {startTime: -1}).startTime`)
	t.Logf("first contentful paint %s ms after navigation started", paint)
	if ms, err := strconv.ParseFloat(paint, 64); err != nil || ms < 0 || ms > 1000 {
		t.Errorf("first paint at %q ms, want under 1000", paint)
	}
	if got := b.eval(`document.querySelectorAll('#map circle').length`); got != "3" {
		t.Errorf("the map shows %s sites, want 3", got)
	}
	// A click on the relayed route shows the history of both its links.
	b.eval(`document.querySelector('#routes tr[data-dest="Seoul"]').click(), ""`)
	// The panel refreshes every 5 s: a link whose record has no second up
	// yet (the agent records once a second) is drawn at the next refresh.
	if _, err := b.waitFor(`String(document.querySelectorAll('#charts svg path').length)`, "2", 12*time.Second); err != nil {
		t.Errorf("clicking the relayed route: %v", err)
	}
	if got := b.eval(`[...document.querySelectorAll('#charts svg')].map(s => s.dataset.link).join(" ")`); got != "Fujisawa>Inagi Inagi>Seoul" {
		t.Errorf("the charts are of %q, want the path's two links", got)
	}
	t.Logf("screenshot: %s", b.screenshot(dir, "leon-japan-relayed.png"))

	if _, e, err := o.run("link", "set", "Fujisawa", "Seoul", "--delay", "3ms", "--both"); err != nil {
		t.Fatalf("link set: %v: %s", err, e)
	}
	took, err := b.waitFor(path, "Fujisawa>Seoul", 2*time.Second+500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the page showed the direct path %v after the link changed", took.Round(10*time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the page showed the direct path after %v, want within 2 s", took)
	}
	if got := b.eval(`document.querySelector('#timeline li') ? document.querySelector('#timeline li').textContent : ""`); !strings.Contains(got, "Seoul") {
		t.Errorf("the timeline shows no route change to Seoul: %q", got)
	}
	b.eval(`document.querySelector('#matrix td[data-from="Fujisawa"][data-to="Seoul"]').click(), ""`)
	if _, err := b.waitFor(`String(document.querySelectorAll('#charts svg path').length)`, "1", 5*time.Second); err != nil {
		t.Errorf("clicking a pair draws no history: %v", err)
	}
	t.Logf("screenshot: %s", b.screenshot(dir, "leon-japan-direct.png"))

	// In the lab, detour-lab testbed ui serves the same page with the
	// emulator's truth beside the estimates.
	t.Run("lab page with the emulator's truth", func(t *testing.T) {
		const listen = "127.0.0.1:7457"
		ui := exec.Command(o.lab, "testbed", "ui", "Fujisawa", "--listen", listen)
		ui.Env = append(os.Environ(), "DETOUR_TESTBED_STATE="+o.dir)
		var out strings.Builder
		ui.Stdout, ui.Stderr = &out, &out
		if err := ui.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { ui.Process.Signal(syscall.SIGTERM); ui.Wait() }()
		lab := openBrowser(t, "", "http://"+listen+"/")
		const truth = `(document.querySelector('#matrix td[data-from="Fujisawa"][data-to="Inagi"]') || {dataset: {}}).dataset.truth || ""`
		if _, err := lab.waitFor(truth, "1.80", 10*time.Second); err != nil {
			t.Fatalf("%v (detour-lab testbed ui: %s)", err, out.String())
		}
		if got := lab.eval(`(document.querySelector('#routes tr[data-dest="Seoul"]') || {dataset: {}}).dataset.path`); got != "Fujisawa>Seoul" {
			t.Errorf("the lab page shows the path %q, want the agent's Fujisawa>Seoul", got)
		}
		t.Logf("screenshot: %s", lab.screenshot(dir, "leon-japan-lab.png"))
	})

	// The agent restarts: the page says so and comes back by itself.
	if _, e, err := o.run("restart-agent", "Fujisawa", "--pause", "2s"); err != nil {
		t.Fatalf("restart: %v: %s", err, e)
	}
	if _, err := b.waitFor(`document.body.dataset.connected`, "yes", 20*time.Second); err != nil {
		t.Errorf("after the agent restarted: %v", err)
	}
	if _, err := b.waitFor(path, "Fujisawa>Seoul", 20*time.Second); err != nil {
		t.Errorf("after the agent restarted: %v", err)
	}
}

func TestUIZZNothingLeftBehind(t *testing.T) { nothingLeftBehind(t, uiPrefix) }

// TestMapPageAzure16: on azure-16 the page shows all 16 sites and frames
// exactly the detours the agent reports.
func TestMapPageAzure16(t *testing.T) {
	o := withAgents(t, upWith(t, uiPrefix, "azure-16", "--overlay", "detour"))
	site := o.st.Sites[0]
	var tivs []api.TIV
	deadline := time.Now().Add(30 * time.Second)
	for len(tivs) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		o.api[0].Get("/v1/tivs", &tivs)
	}
	if len(tivs) == 0 {
		t.Fatalf("%s reports no detours on azure-16 after 30 s", site.Name)
	}
	time.Sleep(3 * time.Second) // let the estimates settle
	b := openBrowser(t, site.Gateway, "http://127.0.0.1:7447/")
	if _, err := b.waitFor(`String(document.querySelectorAll('#map circle').length)`, "16", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := o.api[0].Get("/v1/tivs", &tivs); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // one more update of the page
	framed := b.eval(`String(document.querySelectorAll('#matrix td.tiv').length)`)
	t.Logf("%s reports %d detours; the page frames %s cells", site.Name, len(tivs), framed)
	if n, _ := strconv.Atoi(framed); n == 0 || n < len(tivs)*8/10 || n > len(tivs)*12/10 {
		t.Errorf("the page frames %s cells for %d detours", framed, len(tivs))
	}
	t.Logf("screenshot: %s", b.screenshot(screenshotDir(t), "azure-16.png"))
}
