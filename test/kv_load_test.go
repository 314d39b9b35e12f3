//go:build netns

package test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/kv/ring"
)

// kvLoad is a closed-loop memcached load on a pool's virtual address:
// workers, each with its own UDP socket in a host's namespace and one
// request in flight, send gets and sets of known keys half and half
// (AppSwitch's mix), a set writing the value the key already holds
// ("v" + key). Each outcome is recorded under the server the ring names
// for the key, so a test can tell the keys of a server it killed from
// the keys of healthy servers.
type kvLoad struct {
	keys    []string
	owner   []int
	timeout time.Duration
	stop    atomic.Bool
	wg      sync.WaitGroup

	mu   sync.Mutex
	by   map[int]*kvOutcomes
	sent int
}

// kvOutcomes counts the outcomes of requests for one server's keys.
type kvOutcomes struct {
	OK, Misses, Wrong, Errors, Timeouts int
	// Failed holds when each request that timed out or got an error was
	// sent. A wrong value is counted, not held: a test that rewrites some
	// keys itself expects them.
	Failed []time.Time
}

// startKVLoad starts workers from namespace ns to vip over keys, placed
// by rg; each request waits for its reply for at most timeout.
func startKVLoad(t *testing.T, ns, vip string, rg *ring.Ring, keys []string, workers int, timeout time.Duration) *kvLoad {
	t.Helper()
	l := &kvLoad{keys: keys, timeout: timeout, by: map[int]*kvOutcomes{}}
	for _, k := range keys {
		l.owner = append(l.owner, rg.Owner([]byte(k)))
	}
	for w := range workers {
		c := dialKV(t, ns, vip).c
		l.wg.Add(1)
		go l.work(c, uint64(w))
	}
	t.Cleanup(l.halt)
	return l
}

// halt stops the workers and waits for them; it may be called twice.
func (l *kvLoad) halt() {
	l.stop.Store(true)
	l.wg.Wait()
}

// work is one worker's loop.
func (l *kvLoad) work(c *net.UDPConn, seed uint64) {
	defer l.wg.Done()
	rnd := rand.New(rand.NewPCG(seed, 17))
	buf := make([]byte, 65536)
	var id uint16
	for !l.stop.Load() {
		i := rnd.IntN(len(l.keys))
		k := l.keys[i]
		get := rnd.IntN(2) == 0
		req := binSet(k, "v"+k)
		if get {
			req = binGet(k)
		}
		id++
		d := make([]byte, 8+len(req))
		binary.BigEndian.PutUint16(d, id)
		binary.BigEndian.PutUint16(d[4:], 1)
		copy(d[8:], req)
		sent := time.Now()
		c.Write(d)
		c.SetReadDeadline(sent.Add(l.timeout))
		var rep []byte
		for {
			n, err := c.Read(buf)
			if err != nil {
				break
			}
			if n >= 8 && binary.BigEndian.Uint16(buf) == id {
				rep = buf[8:n]
				break
			}
		}
		l.record(l.owner[i], sent, outcome(rep, get, "v"+k))
	}
}

// outcome classifies a reply: ok, miss, wrong (a get that read another
// value), error, or timeout (no reply).
func outcome(rep []byte, get bool, want string) string {
	switch st := status(rep); {
	case rep == nil:
		return "timeout"
	case st == 0 && get && !strings.HasSuffix(string(rep), want):
		return "wrong"
	case st == 0:
		return "ok"
	case st == 1 && get:
		return "miss"
	}
	return "error"
}

func (l *kvLoad) record(owner int, sent time.Time, what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	o := l.by[owner]
	if o == nil {
		o = &kvOutcomes{}
		l.by[owner] = o
	}
	switch what {
	case "ok":
		o.OK++
		return
	case "miss":
		o.Misses++
		return
	case "wrong":
		o.Wrong++
		return
	case "timeout":
		o.Timeouts++
	default:
		o.Errors++
	}
	o.Failed = append(o.Failed, sent)
}

// outcomes returns a copy of the counts for owner's keys.
func (l *kvLoad) outcomes(owner int) kvOutcomes {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.by[owner]; o != nil {
		c := *o
		c.Failed = append([]time.Time(nil), o.Failed...)
		return c
	}
	return kvOutcomes{}
}

// requests is how many requests have completed or timed out.
func (l *kvLoad) requests() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
}

func (o kvOutcomes) String() string {
	return fmt.Sprintf("%d ok, %d misses, %d wrong values, %d errors, %d timeouts", o.OK, o.Misses, o.Wrong, o.Errors, o.Timeouts)
}

// failedWithin counts the failures sent in [from, to).
func (o kvOutcomes) failedWithin(from, to time.Time) int {
	n := 0
	for _, at := range o.Failed {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// offsets lists when the failures were sent, relative to t0.
func (o kvOutcomes) offsets(t0 time.Time) []time.Duration {
	var out []time.Duration
	for _, at := range o.Failed {
		out = append(out, at.Sub(t0).Round(time.Millisecond))
	}
	return out
}
