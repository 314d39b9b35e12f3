package agent

import (
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/api"
)

// kvTestState is the kv loop's state over kvTestServers' table.
func kvTestState(t *testing.T) (*Agent, *kvState) {
	_, _, servers := kvTestServers(t)
	st := &kvState{nets: []kvNet{{name: "default", port: servers[0].port}}}
	st.sync(st.nets[0], servers[0].port.KV.Load(), 0)
	return &Agent{log: slog.New(slog.DiscardHandler)}, st
}

// change runs one change on the loop's state and returns its outcome, or
// nil when it waits.
func change(a *Agent, st *kvState, now int64, c api.KVChange) *kvResult {
	reply := make(chan kvResult, 1)
	a.kvChange(st, now, "cache", c, reply)
	select {
	case r := <-reply:
		return &r
	default:
		return nil
	}
}

// A change swaps the table in the port, one version higher, and the
// views and watches follow; bad changes say what is wrong.
func TestKVChangeRemote(t *testing.T) {
	a, st := kvTestState(t)
	port := st.nets[0].port
	old := port.KV.Load()
	r := change(a, st, 1, api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "10.20.0.14:11211", Site: "man", Weight: 2}})
	if r == nil || r.err != nil || r.pool.Version != 2 || len(r.pool.Servers) != 3 || r.pool.Servers[2].Weight != 2 {
		t.Fatalf("add: %+v", r)
	}
	if port.KV.Load() == old || len(st.servers) != 3 {
		t.Fatalf("table not swapped or server not watched (%d watched)", len(st.servers))
	}
	r = change(a, st, 2, api.KVChange{Op: api.KVDrain, KVServerAdd: api.KVServerAdd{Address: "10.20.0.14:11211"}})
	if r == nil || r.err != nil || r.pool.Servers[2].State != "drained" || r.pool.Version != 3 {
		t.Fatalf("drain: %+v", r)
	}
	r = change(a, st, 3, api.KVChange{Op: api.KVRemove, KVServerAdd: api.KVServerAdd{Address: "10.20.0.14:11211"}})
	if r == nil || r.err != nil || len(r.pool.Servers) != 2 || len(st.servers) != 2 {
		t.Fatalf("remove: %+v, %d watched", r, len(st.servers))
	}
	for _, c := range []struct {
		c    api.KVChange
		want error
		msg  string
	}{
		{api.KVChange{Op: api.KVRemove, KVServerAdd: api.KVServerAdd{Address: "10.20.0.99:11211"}}, api.ErrNotFound, "no such server"},
		{api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "10.20.0.99"}}, api.ErrBadRequest, `"10.20.0.99" is not IPv4:port`},
		{api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "10.20.0.99:11211"}}, api.ErrBadRequest, "the site is missing"},
		{api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "127.0.0.9:11211", Site: "man"}}, api.ErrBadRequest, "subnet"},
		{api.KVChange{Op: api.KVUndrain, KVServerAdd: api.KVServerAdd{Address: "10.20.0.11:11211"}}, api.ErrBadRequest, "not drained"},
	} {
		r := change(a, st, 4, c.c)
		if r == nil || !errors.Is(r.err, c.want) || !strings.Contains(r.err.Error(), c.msg) {
			t.Errorf("%+v: %+v, want %v saying %q", c.c, r, c.want, c.msg)
		}
	}
	if v := port.KV.Load().Pool("cache").Version; v != 4 {
		t.Errorf("version %d after three changes and refused ones, want 4", v)
	}
	reply := make(chan kvResult, 1)
	a.kvChange(st, 5, "nope", api.KVChange{Op: api.KVDrain}, reply)
	if r := <-reply; !errors.Is(r.err, api.ErrNotFound) {
		t.Errorf("unknown pool: %v", r.err)
	}
}

// A server of this site joins drained until its MAC is known, so no
// request for its keys is dropped; then it takes keys. Without an ARP
// reply the change is undone.
func TestKVChangeLocalWaitsForMAC(t *testing.T) {
	a, st := kvTestState(t)
	port := st.nets[0].port
	add := api.KVChange{Op: api.KVAdd, KVServerAdd: api.KVServerAdd{Address: "10.20.0.15:11211", Site: "lan"}}
	if r := change(a, st, 1, add); r != nil {
		t.Fatalf("answered before the MAC is known: %+v", r)
	}
	p := port.KV.Load().Pool("cache")
	if p.Version != 1 || len(p.Servers) != 3 || !p.Drained[2] {
		t.Fatalf("staged pool: version %d, drained %v", p.Version, p.Drained)
	}
	if r := change(a, st, 2, api.KVChange{Op: api.KVDrain, KVServerAdd: api.KVServerAdd{Address: "10.20.0.11:11211"}}); r == nil || !errors.Is(r.err, api.ErrBadRequest) {
		t.Fatalf("a second change while one waits: %+v", r)
	}
	reply := st.pending[0].reply
	a.kvFinishPending(st, 3)
	if len(st.pending) != 1 {
		t.Fatal("finished without a MAC")
	}
	p.ServerAt(netip.MustParseAddrPort("10.20.0.15:11211")).SetMAC([6]byte{2, 0, 0, 0, 0, 15})
	a.kvFinishPending(st, 4)
	r := <-reply
	if r.err != nil || r.pool.Version != 2 || r.pool.Servers[2].State != "up" || len(st.pending) != 0 {
		t.Fatalf("after the MAC: %+v", r)
	}

	add.Address = "10.20.0.16:11211"
	change(a, st, 5, add)
	reply = st.pending[0].reply
	a.kvFinishPending(st, 5+int64(kvAddWait)+1)
	if r := <-reply; r.err == nil || !strings.Contains(r.err.Error(), "no ARP reply") {
		t.Fatalf("timeout: %+v", r)
	}
	if p := port.KV.Load().Pool("cache"); len(p.Servers) != 3 || p.Version != 2 {
		t.Fatalf("not undone: %d servers, version %d", len(p.Servers), p.Version)
	}
	if cs := st.configs(); len(cs) != 1 || len(cs[0].Servers) != 3 || cs[0].Servers[2].Address != "10.20.0.15:11211" || cs[0].Servers[2].Site != "lan" {
		t.Fatalf("configs: %+v", cs)
	}
}

// The health checks' round trips give the latency percentiles.
func TestKVLatency(t *testing.T) {
	ks := &kvServer{}
	if ks.latency() != nil {
		t.Fatal("latency without samples")
	}
	for i := 1; i <= 300; i++ {
		ks.rtt[ks.nrtt%kvRTTSamples] = time.Duration(i) * time.Millisecond
		ks.nrtt++
	}
	l := ks.latency()
	if l.Samples != 256 || l.P50Ms != 172 || l.P99Ms != 297 {
		t.Fatalf("%+v", l)
	}
}
