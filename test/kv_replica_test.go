//go:build netns

package test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/kvload"
	"github.com/detour-overlay/detour/internal/lab/testbed"
)

// TestKVReplicaDies brings up a pool whose one shard has a memory replica
// at each of NEU, BOR and CLU (10, 25 and 35 ms from the client's site
// LAN; test/testdata/kv-replicas.yaml) and puts a load on its virtual
// address from a host at LAN over UDP: one client reads 200 keys in turn,
// another writes new keys. The replica that serves the reads is killed
// with SIGKILL. Reads must be served again within 300 ms of the kill, and
// every read sent later than that must succeed; writes must keep being
// acknowledged; and every write acknowledged, before or after the kill,
// must be held by both surviving replicas (an acknowledgement means a
// replica stored it, and every usable replica was sent it).
func TestKVReplicaDies(t *testing.T) {
	o := withAgents(t, upWith(t, kvPrefix, filepath.Join("testdata", "kv-replicas.yaml"), "--overlay", "detour-plain"))
	_, vip, _ := o.kvPool(t)
	pool := o.replicatedPool(t)
	client := o.host("LAN").NS

	// The pool answers once every replica's gateway admits it.
	reader, writer := dialKV(t, client, vip), dialKV(t, client, vip)
	keys := make([]string, 200)
	var sets [][]byte
	for i := range keys {
		keys[i] = fmt.Sprintf("r:%03d", i)
		sets = append(sets, binSet(keys[i], "v"+keys[i]))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := 0
		for _, r := range writer.exchange(sets, 50, 300*time.Millisecond) {
			if status(r) == 0 {
				ok++
			}
		}
		if ok == len(sets) && allHold(t, client, pool, keys) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %d of %d sets acknowledged or not every replica holds them", ok, len(sets))
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The load: reads of the 200 keys, one at a time; writes of new keys,
	// one at a time. Each request is sent once and waits up to 200 ms.
	type sample struct {
		sent, done time.Time
		ok         bool
	}
	var mu sync.Mutex
	var reads, writes []sample
	acked := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := keys[i%len(keys)]
			sent := time.Now()
			r := reader.exchangeOnce(binGet(k), 200*time.Millisecond)
			ok := status(r) == 0 && strings.HasSuffix(string(r), "v"+k)
			mu.Lock()
			reads = append(reads, sample{sent, time.Now(), ok})
			mu.Unlock()
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("w:%05d", i)
			sent := time.Now()
			r := writer.exchangeOnce(binSet(k, "v"+k), 200*time.Millisecond)
			mu.Lock()
			writes = append(writes, sample{sent, time.Now(), status(r) == 0})
			if status(r) == 0 {
				acked[k] = true
			}
			mu.Unlock()
		}
	})
	time.Sleep(2 * time.Second)

	// The replica serving the reads is the one whose memcached counted
	// the most hits since the load began.
	hits := map[string]int64{}
	for _, s := range pool {
		hits[s.Address] = kvload.StatInt(stats(t, dialMC(t, client, s.Address)), "get_hits")
	}
	time.Sleep(time.Second)
	chosen, most := "", int64(-1)
	for _, s := range pool {
		h := kvload.StatInt(stats(t, dialMC(t, client, s.Address)), "get_hits") - hits[s.Address]
		t.Logf("replica %s (%s): %d hits in 1 s of load", s.Address, s.Site, h)
		if h > most {
			chosen, most = s.Address, h
		}
	}
	pid := memcachedPID(t, o.st, chosen)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	// Reads: how long each read in flight at the kill or sent after it
	// waited from the later of its sending and the kill, and which
	// failed.
	var slowest time.Duration
	failedEarly, failedLate, after := 0, 0, 0
	for _, s := range reads {
		if s.done.Before(killed) {
			continue
		}
		after++
		switch {
		case s.ok:
			slowest = max(slowest, s.done.Sub(maxTime(s.sent, killed)))
		case s.sent.Sub(killed) > 300*time.Millisecond:
			failedLate++
		default:
			failedEarly++
		}
	}
	t.Logf("killed the read replica %s (pid %d): of %d reads in flight at the kill or sent after it, the slowest answered took %v from the kill or its sending; %d failed in the first 300 ms, %d later",
		chosen, pid, after, slowest.Round(time.Millisecond), failedEarly, failedLate)
	if slowest > 300*time.Millisecond {
		t.Errorf("a read waited %v after the replica died, want at most 300 ms", slowest)
	}
	if failedLate > 0 {
		t.Errorf("%d reads sent more than 300 ms after the kill failed", failedLate)
	}
	if after < 10 {
		t.Errorf("only %d reads after the kill", after)
	}

	// Writes: acknowledged throughout, and held by both survivors.
	ackedAfter, failedAfter := 0, 0
	for _, s := range writes {
		if s.sent.After(killed) {
			if s.ok {
				ackedAfter++
			} else {
				failedAfter++
			}
		}
	}
	var all []string
	for k := range acked {
		all = append(all, k)
	}
	slices.Sort(all)
	t.Logf("writes: %d acknowledged in all, %d after the kill (%d not acknowledged after it)", len(all), ackedAfter, failedAfter)
	if ackedAfter == 0 {
		t.Errorf("no write acknowledged after the replica died")
	}
	for _, s := range pool {
		if s.Address == chosen {
			continue
		}
		held := heldKeys(t, client, s.Address, all)
		lost := 0
		for _, k := range all {
			if !held[k] {
				lost++
			}
		}
		t.Logf("survivor %s (%s) holds %d of the %d acknowledged writes", s.Address, s.Site, len(all)-lost, len(all))
		if lost > 0 {
			t.Errorf("survivor %s lacks %d acknowledged writes", s.Address, lost)
		}
	}
}

// replicatedPool returns the replicas of the testbed's one pool, which
// must have one shard.
func (o *overlay) replicatedPool(t *testing.T) []testbed.KVServerState {
	t.Helper()
	pool, _, _ := o.kvPool(t)
	if len(pool.Shards) != 1 {
		t.Fatalf("pool %s has %d shards, want 1", pool.Name, len(pool.Shards))
	}
	return pool.Shards[0].Replicas
}

// allHold reports whether every replica holds every key.
func allHold(t *testing.T, ns string, pool []testbed.KVServerState, keys []string) bool {
	t.Helper()
	for _, s := range pool {
		held := heldKeys(t, ns, s.Address, keys)
		if len(held) != len(keys) {
			return false
		}
	}
	return true
}

// exchangeOnce sends one request in one datagram and returns its reply's
// payload, or nil when none came within timeout.
func (k *kvUDP) exchangeOnce(req []byte, timeout time.Duration) []byte {
	k.id++
	id := k.id
	d := make([]byte, 8+len(req))
	d[0], d[1] = byte(id>>8), byte(id)
	d[5] = 1
	copy(d[8:], req)
	if _, err := k.c.Write(d); err != nil {
		return nil
	}
	k.c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 65536)
	for {
		n, err := k.c.Read(buf)
		if err != nil {
			return nil
		}
		if n >= 8 && uint16(buf[0])<<8|uint16(buf[1]) == id {
			return append([]byte(nil), buf[8:n]...)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
