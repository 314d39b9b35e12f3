package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/detour-overlay/detour/internal/api"
)

func TestKVUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kv"}, "usage"},
		{[]string{"kv", "bogus"}, `unknown subcommand "bogus"`},
		{[]string{"kv", "show"}, "kv show takes 1 argument(s), not 0"},
		{[]string{"kv", "list", "x"}, "kv list takes 0 argument(s), not 1"},
		{[]string{"kv", "add-server", "cache", "10.20.0.14:11211"}, "add-server needs --site"},
		{[]string{"kv", "drain", "cache"}, "kv drain takes 2 argument(s), not 1"},
		{[]string{"kv", "drain", "cache", "10.20.0.14:11211", "--weight", "3"}, "--site and --weight go with add-server only"},
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: %q does not say %q", c.args, errb.String(), c.want)
		}
	}
}

// kvAgent is a fake agent API: it records each request and answers with
// one pool (404 for any other).
type kvAgent struct {
	mu   sync.Mutex
	reqs []string
}

func (f *kvAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(body)))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !strings.HasPrefix(r.URL.Path, "/v1/kv/pools/cache") && r.URL.Path != "/v1/kv/pools" {
		w.WriteHeader(404)
		w.Write([]byte(`{"error":"not found: no kv pool \"nope\" at this gateway"}`))
		return
	}
	p := api.KVPool{Name: "cache", Network: "default", Address: "10.20.0.250:11211", Hash: "ketama", Version: 3,
		Counters: map[string]uint64{"requests": 10, "failed_over": 2},
		Servers: []api.KVServer{
			{Address: "10.20.0.11:11211", Site: "lan", Weight: 1, Local: true, State: "up", SinceSeconds: 12, Requests: 6, Replies: 6, PaceMs: 0.4,
				Latency: &api.KVLatency{P50Ms: 0.25, P99Ms: 1.5, Samples: 100}},
			{Address: "10.20.0.12:11211", Site: "man", Weight: 2, State: "drained", Requests: 4, Replies: 3, Failovers: 2},
		}}
	var v any = p
	if r.URL.Path == "/v1/kv/pools" {
		v = []api.KVPool{p}
	}
	json.NewEncoder(w).Encode(v)
}

func TestKVCommands(t *testing.T) {
	f := &kvAgent{}
	tcp := httptest.NewServer(f)
	defer tcp.Close()
	sock := filepath.Join(t.TempDir(), "detour.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	go srv.Serve(ln)
	defer srv.Close()
	addr := strings.TrimPrefix(tcp.URL, "http://")
	for _, c := range []struct {
		args []string
		want []string // in the output
		req  string   // the request the agent got
	}{
		{[]string{"kv", "list", "--api", addr}, []string{"POOL", "cache default 10.20.0.250:11211 ketama 3 2 1 10 0 0 2"}, "GET /v1/kv/pools"},
		{[]string{"kv", "show", "cache", "--api", addr}, []string{"version 3", "10.20.0.11:11211 lan (here) 1 up 12.0s 6 6 0 0 0.40 0.25 1.50", "0.25", "1.50", "drained", "failed_over 2"}, "GET /v1/kv/pools/cache"},
		{[]string{"kv", "show", "--api", addr, "cache", "--json"}, []string{`"version":3`}, "GET /v1/kv/pools/cache"},
		{[]string{"kv", "add-server", "cache", "10.20.0.14:11211", "--site", "man", "--weight", "2", "--socket", sock}, []string{"ok: kv add-server cache 10.20.0.14:11211: pool cache is at version 3"},
			`POST /v1/kv/pools/cache/servers {"address":"10.20.0.14:11211","site":"man","weight":2}`},
		{[]string{"kv", "remove-server", "--socket", sock, "cache", "10.20.0.14:11211"}, []string{"ok"}, "DELETE /v1/kv/pools/cache/servers/10.20.0.14:11211"},
		{[]string{"kv", "drain", "cache", "10.20.0.12:11211", "--socket", sock}, []string{"ok"}, "POST /v1/kv/pools/cache/servers/10.20.0.12:11211/drain"},
		{[]string{"kv", "undrain", "cache", "10.20.0.12:11211", "--socket", sock, "--json"}, []string{`"version":3`}, "DELETE /v1/kv/pools/cache/servers/10.20.0.12:11211/drain"},
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != 0 {
			t.Errorf("%v: exit %d: %s", c.args, code, errb.String())
			continue
		}
		flat := strings.Join(strings.Fields(out.String()), " ")
		for _, w := range c.want {
			if !strings.Contains(flat, w) {
				t.Errorf("%v: output does not say %q:\n%s", c.args, w, out.String())
			}
		}
		f.mu.Lock()
		got := f.reqs[len(f.reqs)-1]
		f.mu.Unlock()
		if got != c.req {
			t.Errorf("%v: agent got %q, want %q", c.args, got, c.req)
		}
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"kv", "show", "nope", "--api", addr}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `no kv pool "nope"`) {
		t.Errorf("unknown pool: exit %d, %q", code, errb.String())
	}
}

// detour status lists the pools with their versions and counters.
func TestStatusShowsKVPools(t *testing.T) {
	raw, _ := json.Marshal(api.Status{Site: "lan", KVPools: []api.KVPoolSummary{{Name: "cache", Address: "10.20.0.250:11211", Version: 2,
		Servers: 4, Up: 3, Requests: 100, Replies: 98, Errors: 1, FailedOver: 5}}})
	var out bytes.Buffer
	if err := printStatus(&out, raw); err != nil {
		t.Fatal(err)
	}
	if flat := strings.Join(strings.Fields(out.String()), " "); !strings.Contains(flat, "cache 10.20.0.250:11211 2 3/4 100 98 1 5") {
		t.Errorf("status does not show the pool:\n%s", out.String())
	}
}

// detour kv why shows each replica's prediction and its parts.
func TestKVWhy(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path + "?" + r.URL.RawQuery
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(api.KVWhy{Pool: "objects", Key: r.URL.Query().Get("key"), Shard: 0, ShardName: "s0", Policy: "predicted",
			SizeBytes: 102400, SizeKnown: true, SizeClass: "<= 256 KB", Chosen: "198.19.3.1:11211", Reads: 100, Explored: 3, Hedges: 1,
			Replicas: []api.KVReplicaWhy{
				{Address: "198.19.2.1:11211", Site: "LAN", Tier: "disk", Local: true, Usable: true, PredictedMs: 21.5, ServiceMs: 21, TransferMs: 0.5,
					ThroughputMBps: 200, Samples: 4, SampleAgeSeconds: 0.2},
				{Address: "198.19.3.1:11211", Site: "NEU", Tier: "memory", Usable: true, Chosen: true, PredictedMs: 9.1, RTTMs: 4, ServiceMs: 0.1,
					TransferMs: 5, ThroughputMBps: 20, Samples: 90},
				{Address: "198.19.0.1:11211", Site: "BOR", Tier: "memory", PredictedMs: 70, RTTMs: 60},
			}})
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := Main([]string{"kv", "why", "objects", "user/1 x", "--api", strings.TrimPrefix(srv.URL, "http://")}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got != "/v1/kv/pools/objects/why?key=user%2F1+x" {
		t.Errorf("agent asked %q", got)
	}
	flat := strings.Join(strings.Fields(out.String()), " ")
	for _, w := range []string{`key "user/1 x": shard 0 (s0), policy predicted`, "102400 bytes (last seen for this key; class <= 256 KB)",
		"reads go to 198.19.3.1:11211", "198.19.2.1:11211 LAN (here) disk 21.50 0.00 21.00 0.00 0.50 200.0 0 4",
		"198.19.3.1:11211 NEU memory 9.10 4.00 0.10 0.00 5.00 20.0 0 90 chosen", "70.00 60.00", "down, service time not measured yet"} {
		if !strings.Contains(flat, w) {
			t.Errorf("output does not say %q:\n%s", w, out.String())
		}
	}
	out.Reset()
	if code := Main([]string{"kv", "why", "objects", "k", "--json", "--api", strings.TrimPrefix(srv.URL, "http://")}, &out, &errb); code != 0 || !strings.Contains(out.String(), `"predicted_ms":9.1`) {
		t.Errorf("--json: exit %d, %s", code, out.String())
	}
}

// detour kv show says a replicated pool's policy, hedge and near sites,
// and every replica's shard and tier.
func TestKVShowReplicated(t *testing.T) {
	raw, _ := json.Marshal(api.KVPool{Name: "objects", Network: "tenant", Address: "198.19.255.251:11211", Hash: "ketama", Version: 2,
		Shards: []api.KVShard{{Name: "s0", Weight: 1}}, Policy: "static-zone", Hedge: false, NearSites: []string{"NEU"},
		Servers: []api.KVServer{{Address: "198.19.2.1:11211", Site: "LAN", Weight: 1, Local: true, State: "up", Tier: "disk"},
			{Address: "198.19.0.1:11211", Site: "BOR", Weight: 1, State: "up"}}})
	var out bytes.Buffer
	if err := printKVPool(&out, raw); err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(out.String()), " ")
	for _, w := range []string{"1 shards of replicas, policy static-zone, hedge off, near sites NEU", "LAN (here) shard 0 disk", "BOR shard 0 1 up"} {
		if !strings.Contains(flat, w) {
			t.Errorf("kv show does not say %q:\n%s", w, out.String())
		}
	}
}
