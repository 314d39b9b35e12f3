package router

import (
	"testing"

	"github.com/detour-overlay/detour/internal/kv/replica"
)

// tcpReads runs n reads of key over TCP from start, d apart, each
// answered by its server after the path RTT plus svc[server] (one
// datagram), and returns how many went to each server.
func tcpReads(p *Pool, key string, start, d int64, n int, svc []int64, size int) []int {
	got := make([]int, len(p.Servers))
	now := start
	for i := 0; i < n; i++ {
		rc := p.ChooseRead([]byte(key), now)
		if rc.Server < 0 {
			return got
		}
		got[rc.Server]++
		for _, j := range []int{rc.Server, rc.Explore} {
			if j < 0 {
				continue
			}
			why := ReadChosen
			if j == rc.Explore {
				why = ReadExplore
			}
			p.ReadSent(j, why)
			done := now + p.Servers[j].PathRTT() + svc[j]
			p.ObserveRead(j, rc.Hash, replica.Reply{Sent: now, First: done, Last: done, Bytes: size, FirstBytes: size, Dgms: 1}, done)
		}
		now += d
	}
	return got
}

// TestTCPReadChoice: reads over TCP go where the predicted policy says,
// learn the key's size and the replicas' service times (which `kv why`
// then shows), and move when the chosen replica slows down; local-first
// stays at home.
func TestTCPReadChoice(t *testing.T) {
	tb := repTable(t, replica.Predicted)
	p := tb.pools[0]
	key := keyOnShard(t, tb, 0, 0)
	// The local disk takes 20 ms, B's memory 0.2 ms at 4 ms, C's at 60 ms.
	svc := []int64{20 * ms, ms / 5, ms / 5, 0}
	got := tcpReads(p, key, 1e9, 10*ms, 200, svc, 100_000)
	if got[1] < 180 {
		t.Fatalf("reads %v: want nearly all at B", got)
	}
	w := p.Why([]byte(key), 3e9)
	if !w.SizeKnown || w.Size != 100_000 || !w.Replicas[1].Chosen || w.Replicas[1].Class.Samples == 0 || w.Replicas[0].Class.Samples == 0 {
		t.Fatalf("why %+v", w)
	}
	if p.Stats.ReadsNearby.Load() != uint64(got[1]) || p.Stats.Explorations.Load() == 0 {
		t.Fatalf("nearby %d explorations %d, reads %v", p.Stats.ReadsNearby.Load(), p.Stats.Explorations.Load(), got)
	}
	// B slows down to 50 ms: within a second of reads the choice moves
	// to the disk.
	svc[1] = 50 * ms
	tcpReads(p, key, 3e9, 10*ms, 100, svc, 100_000)
	if got := tcpReads(p, key, 4e9, 10*ms, 50, svc, 100_000); got[0] < 45 {
		t.Fatalf("reads after B slowed %v: want them at the disk", got)
	}

	lf := repTable(t, replica.LocalFirst).pools[0]
	if got := tcpReads(lf, key, 1e9, 10*ms, 50, svc, 100_000); got[0] != 50 {
		t.Fatalf("local-first reads %v", got)
	}
}

// TestTCPReadOutstanding: a read sent and given up no longer counts as
// outstanding; a pool without replicas reads its shard's server and
// keeps no chooser state.
func TestTCPReadOutstanding(t *testing.T) {
	tb := repTable(t, replica.Predicted)
	p := tb.pools[0]
	key := keyOnShard(t, tb, 0, 0)
	rc := p.ChooseRead([]byte(key), 1e9)
	p.ReadSent(rc.Server, ReadChosen)
	p.ReadSent(rc.Server, ReadChosen)
	k := p.Servers[rc.Server].Replica
	if w := p.Why([]byte(key), 1e9); w.Replicas[k].Outstanding != 2 {
		t.Fatalf("outstanding %d, want 2", w.Replicas[k].Outstanding)
	}
	p.GiveUpRead(rc.Server)
	if w := p.Why([]byte(key), 1e9); w.Replicas[k].Outstanding != 1 {
		t.Fatalf("outstanding %d after a give-up, want 1", w.Replicas[k].Outstanding)
	}
	one := keyOnShard(t, tb, 1, 0)
	if rc := p.ChooseRead([]byte(one), 1e9); rc.Server != 3 || rc.Explore != -1 || rc.Hash != 0 {
		t.Fatalf("a shard of one: %+v", rc)
	}
	p.Servers[3].SetDown(true)
	if rc := p.ChooseRead([]byte(one), 1e9); rc.Server == 3 {
		t.Fatalf("a down server chosen: %+v", rc)
	}
}

// TestTCPReadHedge: once the chosen replica has samples, a read of it is
// hedged after its p95 (at least the minimum wait) to the best other
// replica, within the pool's hedge budget; a pool that does not hedge,
// or a shard of one replica, never is.
func TestTCPReadHedge(t *testing.T) {
	tb := repTable(t, replica.Predicted)
	p := tb.pools[0]
	p.Hedge = true
	key := keyOnShard(t, tb, 0, 0)
	h := KeyHash([]byte(key))
	svc := []int64{20 * ms, ms / 5, ms / 5, 0}
	tcpReads(p, key, 1e9, 10*ms, 200, svc, 1000)
	wait, ok := p.ReadHedgeAfter(1, h)
	if !ok || wait < replica.DefaultParams().MinHedgeDelay || wait > 20*ms {
		t.Fatalf("hedge after %d ns (ok %v): want B's p95, a few ms", wait, ok)
	}
	sent := p.Stats.HedgesSent.Load()
	if j := p.HedgeRead(1, h); j != 0 {
		t.Fatalf("hedged to %d, want the next best replica, the local disk (0)", j)
	}
	if p.Stats.HedgesSent.Load() != sent+1 {
		t.Fatalf("hedges sent %d, want %d", p.Stats.HedgesSent.Load(), sent+1)
	}
	n := 0
	for p.HedgeRead(1, h) >= 0 && n < 100 {
		n++
	}
	if n >= 100 {
		t.Fatal("the hedge budget never ran out")
	}
	p.Hedge = false
	if _, ok := p.ReadHedgeAfter(1, h); ok || p.HedgeRead(1, h) >= 0 {
		t.Fatal("a pool that does not hedge hedged")
	}
	p.Hedge = true
	if _, ok := p.ReadHedgeAfter(3, KeyHash([]byte(keyOnShard(t, tb, 1, 0)))); ok {
		t.Fatal("a shard of one replica hedged")
	}
}

// Over TCP too, a replica down with its readmission trial armed gets a
// copy of one read (beside the replica chosen), and a shard of one
// server gives its server the one read of its trial; then neither gets
// more until the agent arms another trial.
func TestTCPReadTrial(t *testing.T) {
	tb := repTable(t, replica.LocalFirst)
	p := tb.pools[0]
	key := []byte(keyOnShard(t, tb, 0, 0))
	p.Servers[1].SetDown(true)
	if rc := p.ChooseRead(key, 1e9); rc.Server != 0 || rc.Explore != -1 {
		t.Fatalf("replica down, no trial: %+v", rc)
	}
	p.Servers[1].ArmTrial()
	if rc := p.ChooseRead(key, 2e9); rc.Server != 0 || rc.Explore != 1 || !p.Servers[1].TrialTaken() {
		t.Fatalf("replica 1 on trial: %+v, taken %v", rc, p.Servers[1].TrialTaken())
	}
	if rc := p.ChooseRead(key, 2e9+1); rc.Explore != -1 {
		t.Fatalf("a second trial copy: %+v", rc)
	}

	single := []byte(keyOnShard(t, tb, 1, 0))
	p.Servers[3].SetDown(true)
	p.Servers[3].ArmTrial()
	if rc := p.ChooseRead(single, 3e9); rc.Server != 3 || !p.Servers[3].TrialTaken() {
		t.Fatalf("single server on trial: %+v", rc)
	}
	if rc := p.ChooseRead(single, 3e9+1); rc.Server == 3 {
		t.Fatalf("a second read for the server on trial: %+v", rc)
	}
}
