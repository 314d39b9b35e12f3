package kvload

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/kv/kvtest"
	"github.com/detour-overlay/detour/internal/kv/memcache"
)

// datagram builds reply datagram seq of total for request id; datagram 0
// carries a binary response header with status.
func datagram(id, seq, total, status uint16) []byte {
	p := make([]byte, memcache.FrameHeaderLen, 64)
	binary.BigEndian.PutUint16(p[0:], id)
	binary.BigEndian.PutUint16(p[2:], seq)
	binary.BigEndian.PutUint16(p[4:], total)
	if seq == 0 {
		h := make([]byte, memcache.HeaderLen)
		h[0] = memcache.MagicResponse
		binary.BigEndian.PutUint16(h[6:], status)
		p = append(p, h...)
	} else {
		p = append(p, "value bytes"...)
	}
	return p
}

// TestSlotReassembly feeds the datagrams of a 4-datagram reply out of
// order, with a duplicate and strays, and checks that the reply is
// complete exactly when the last distinct one arrives.
func TestSlotReassembly(t *testing.T) {
	var sl slot
	steps := []struct {
		p        []byte
		done, ok bool
	}{
		{datagram(7, 2, 4, 0), false, true},
		{datagram(7, 2, 4, 0), false, true}, // duplicate: not counted twice
		{datagram(7, 3, 4, 0), false, true},
		{datagram(7, 4, 4, 0), false, false}, // sequence beyond the total
		{datagram(7, 1, 5, 0), false, false}, // another total
		{datagram(7, 0, 4, 1), false, true},
		{datagram(7, 1, 4, 0), true, true},
	}
	for i, s := range steps {
		done, ok := sl.add(s.p)
		if done != s.done || ok != s.ok {
			t.Fatalf("step %d: done %v ok %v, want %v %v", i, done, ok, s.done, s.ok)
		}
	}
	if !sl.head || sl.status != 1 {
		t.Fatalf("head %v status %d, want the status of datagram 0", sl.head, sl.status)
	}
	var one slot
	if done, ok := one.add(datagram(1, 0, 1, 0)); !done || !ok {
		t.Fatal("a single-datagram reply is not complete at once")
	}
}

// FuzzSlotAdd checks that no datagram makes the reassembly panic or
// count more datagrams than the reply's total.
func FuzzSlotAdd(f *testing.F) {
	f.Add(datagram(1, 0, 2, 0), datagram(1, 1, 2, 0))
	f.Add([]byte{0, 1, 0, 0, 0, 0}, []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var sl slot
		for _, p := range [][]byte{a, b, a} {
			sl.add(p)
			if sl.got > sl.total {
				t.Fatalf("%d datagrams of %d", sl.got, sl.total)
			}
		}
	})
}

// TestUDPLargeValues gets 100 KB and 1 MB values over UDP from a real
// memcached (each reply in 72 or 719 datagrams), prefilled over TCP.
func TestUDPLargeValues(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	port := kvtest.FreePort(t, "127.0.0.1")
	kvtest.Memcached(t, "127.0.0.1", port, true)
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for _, size := range []int{100000, 1000000} {
		res, err := Run(context.Background(), Config{
			Target: target, Protocol: BinaryUDP, Outstanding: 1, GetRatio: 1, Keys: 20,
			ValueSize: size, Duration: 500 * time.Millisecond, Prefill: true, Seed: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d bytes: %d gets, p50 %.0f µs, %d timeouts", size, res.Gets, res.Latency.P50, res.Timeouts)
		if res.Hits < 10 || res.Misses != 0 || res.Errors != 0 {
			t.Fatalf("%d bytes: %d hits, %d misses, %d errors", size, res.Hits, res.Misses, res.Errors)
		}
	}
	if _, err := Run(context.Background(), Config{Target: target, Protocol: BinaryUDP, GetRatio: 0.5, ValueSize: 100000}); err == nil {
		t.Fatal("sets of 100 KB over UDP were accepted")
	}
}
