package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/detour-overlay/detour/internal/history"
	"github.com/detour-overlay/detour/internal/ui"
)

func TestPageServedWithinBudget(t *testing.T) {
	h, _ := guarded(GuardOptions{Addr: netip.MustParseAddrPort("127.0.0.1:7447")})
	for path, want := range map[string]string{"/": "text/html", "/ui/app.js": "javascript", "/ui/style.css": "text/css"} {
		w := do(h, "GET", "127.0.0.1:7447", path, "", "")
		if w.Code != 200 || !strings.Contains(w.Header().Get("Content-Type"), want) {
			t.Errorf("GET %s: %d %q", path, w.Code, w.Header().Get("Content-Type"))
		}
		if strings.Contains(w.Body.String(), "https://") || strings.Contains(w.Body.String(), "http://") && path != "/ui/app.js" {
			t.Errorf("%s refers to another server", path)
		}
	}
	if n := ui.Size(); n > 500_000 || n < 5_000 {
		t.Errorf("the page weighs %d bytes; the budget is 500 KB", n)
	}
	if w := do(h, "GET", "127.0.0.1:7447", "/ui/nothing.js", "", ""); w.Code != 404 {
		t.Errorf("a missing asset: %d", w.Code)
	}
}

func TestHistoryEndpoints(t *testing.T) {
	s, _ := newTestServer()
	rec := history.New(time.Now().Add(-3 * time.Second))
	s.SetHistory(rec)
	rec.Record(time.Now(), []history.Link{{From: "Fujisawa", To: "Seoul", Up: true, OneWayMs: 17.5}})
	rec.RouteChange(history.Event{Dest: "Seoul", To: []string{"Inagi", "Seoul"}, Reason: "better"})
	h := Guard(s.ReadHandler(), GuardOptions{Addr: netip.MustParseAddrPort("127.0.0.1:7447")})
	w := do(h, "GET", "127.0.0.1:7447", "/v1/history/Fujisawa/Seoul", "", "")
	var hl HistoryLink
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &hl) != nil || len(hl.Samples) == 0 || hl.Samples[len(hl.Samples)-1].OneWayMs != 17.5 {
		t.Errorf("history of a link: %d %s", w.Code, w.Body)
	}
	w = do(h, "GET", "127.0.0.1:7447", "/v1/history/Fujisawa/Nowhere", "", "")
	var e Error
	if w.Code != 404 || json.Unmarshal(w.Body.Bytes(), &e) != nil || !strings.Contains(e.Error, "Fujisawa → Nowhere") {
		t.Errorf("unknown pair: %d %s, want 404 with a JSON error", w.Code, w.Body)
	}
	w = do(h, "GET", "127.0.0.1:7447", "/v1/history", "", "")
	var idx HistoryIndex
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &idx) != nil || len(idx.Links) != 1 || len(idx.Events) != 1 || idx.Bytes == 0 {
		t.Errorf("history index: %d %s", w.Code, w.Body)
	}
}

// The event stream sends an update at once and then one a period, each
// with the route changes not sent before; a token in the query opens it.
func TestEventStream(t *testing.T) {
	defer func(p, c time.Duration) { EventPeriod, EventCheck = p, c }(EventPeriod, EventCheck)
	EventPeriod, EventCheck = 200*time.Millisecond, 10*time.Millisecond
	s, _ := newTestServer()
	rec := history.New(time.Now())
	s.SetHistory(rec)
	rec.RouteChange(history.Event{Dest: "Seoul", To: []string{"Inagi", "Seoul"}, Reason: "first"})
	const tok = "0123456789abcdef0123"
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.Handler = Guard(s.ReadHandler(), GuardOptions{Addr: netip.MustParseAddrPort(srv.Listener.Addr().String()), Token: tok})
	srv.Start()
	defer srv.Close()
	if r, err := http.Get(srv.URL + "/v1/events"); err != nil || r.StatusCode != 401 {
		t.Fatalf("without the token: %v %v", r.StatusCode, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/events?access_token="+tok, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %v %+v", err, resp)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var updates []Live
	for sc.Scan() && len(updates) < 3 {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var u Live
			if err := json.Unmarshal([]byte(data), &u); err != nil {
				t.Fatal(err)
			}
			updates = append(updates, u)
			if len(updates) == 1 {
				rec.RouteChange(history.Event{Dest: "Seoul", To: []string{"Seoul"}, Reason: "second"})
			}
		}
	}
	if len(updates) < 3 {
		t.Fatalf("%d updates: %v", len(updates), sc.Err())
	}
	if u := updates[0]; u.Site != "Fujisawa" || len(u.Changes) != 1 || u.Changes[0].Reason != "first" || len(u.Routes) != 1 {
		t.Errorf("first update: %+v", u)
	}
	if c := updates[1].Changes; len(c) != 1 || c[0].Reason != "second" {
		t.Errorf("second update's changes: %+v", c)
	}
	if c := updates[2].Changes; len(c) != 0 {
		t.Errorf("third update repeats changes: %+v", c)
	}
}

func TestMatrix(t *testing.T) {
	m := matrix("B", []Link{{From: "A", To: "C", Up: true, OneWayMs: 12.345, LossPct: 1.5}, {From: "C", To: "A", Up: false}})
	if strings.Join(m.Sites, ",") != "A,B,C" {
		t.Fatalf("sites %v", m.Sites)
	}
	if v := m.OneWayMs[0][2]; v == nil || *v != 12.35 || m.LossPct[0][2] != 1.5 {
		t.Errorf("A→C: %v %v", v, m.LossPct[0][2])
	}
	if m.OneWayMs[2][0] != nil || m.OneWayMs[1][0] != nil {
		t.Error("a link down or unmeasured has a delay")
	}
}

// bigBackend is a backend of a 54-site overlay: every link measured, a
// route to every site.
type bigBackend struct {
	fakeBackend
	links  []Link
	routes []Route
}

func newBigBackend(n int) *bigBackend {
	b := &bigBackend{}
	name := func(i int) string { return fmt.Sprintf("site-%02d", i) }
	for i := range n {
		for j := range n {
			if i != j {
				b.links = append(b.links, Link{From: name(i), To: name(j), Up: true, OneWayMs: float64(10+i+j) + 0.123, LossPct: 0.1, RTTMs: 40})
			}
		}
		if i > 0 {
			b.routes = append(b.routes, Route{Dest: name(i), Path: []string{name(i)}, LatencyMs: 20})
		}
	}
	return b
}

func (b *bigBackend) Status() Status  { return Status{Site: "site-00"} }
func (b *bigBackend) Links() []Link   { return b.links }
func (b *bigBackend) Routes() []Route { return b.routes }

// BenchmarkLiveUpdate54 is what one open map page costs the agent each
// second at 54 sites (beyond reading its own state): building and encoding
// one update. Its ns/op divided by 1e9 is the share of a core.
func BenchmarkLiveUpdate54(b *testing.B) {
	s := NewServer(newBigBackend(54), prometheus.NewRegistry(), nil)
	s.SetHistory(history.New(time.Now()))
	var size int
	for b.Loop() {
		u := s.liveUpdate(0, s.b.Routes())
		data, err := json.Marshal(u)
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "bytes/update")
}

// BenchmarkHistoryRecord54 is the history's cost each second at 54 sites.
func BenchmarkHistoryRecord54(b *testing.B) {
	be := newBigBackend(54)
	rec := history.New(time.Unix(0, 0))
	links := historyLinks(be.links)
	sec := 0
	for b.Loop() {
		sec++
		rec.Record(time.Unix(int64(sec), 0), links)
	}
}
