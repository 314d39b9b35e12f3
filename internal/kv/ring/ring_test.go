package ring

import (
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"testing"
)

// libmemcachedGolden are owners libmemcached 1.1.4 (Debian 12) gives with
// MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED for goldenServers, printed by
// testdata/lmhash.c; they keep the placement checked where the library is
// not installed.
var goldenServers = []Server{
	{Host: "127.0.0.1", Port: 11211, Weight: 1},
	{Host: "127.0.0.1", Port: 11212, Weight: 2},
	{Host: "127.0.0.9", Port: 11213, Weight: 3},
}

var libmemcachedGolden = map[string]int{
	"foo": 2, "bar": 2, "baz": 2, "user:1": 0, "user:2": 2, "user:3": 0,
	"a": 1, "b": 2, "c": 1, "session-9f8e7d": 2, "longer:key:with:parts:0001": 2, "x": 0,
}

func TestKetamaGolden(t *testing.T) {
	r, err := New(Ketama, goldenServers)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range libmemcachedGolden {
		if got := r.Owner([]byte(k)); got != want {
			t.Errorf("Owner(%q) = %d, libmemcached says %d", k, got, want)
		}
	}
}

func TestPointName(t *testing.T) {
	cases := []struct {
		s    Server
		want string
	}{
		{Server{Host: "10.1.2.3", Port: 11211}, "10.1.2.3"},
		{Server{Host: "10.1.2.3", Port: 11212}, "10.1.2.3:11212"},
		{Server{Host: "cache-a", Port: 11212, Name: "server1"}, "server1"},
	}
	for _, c := range cases {
		if got := PointName(c.s); got != c.want {
			t.Errorf("PointName(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestKetamaPoints(t *testing.T) {
	// Equal weights give 160 points each; weights 1, 2, 3 of 6 over three
	// servers give floor(40×3×w/6)×4.
	if got := KetamaPoints(1, 3, 3); got != 160 {
		t.Errorf("equal weights: %d points, want 160", got)
	}
	for w, want := range map[uint64]int{1: 80, 2: 160, 3: 240} {
		if got := KetamaPoints(w, 6, 3); got != want {
			t.Errorf("weight %d of 6: %d points, want %d", w, got, want)
		}
	}
	r, err := New(Ketama, goldenServers)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{80, 160, 240} {
		if got := r.Points(i); got != want {
			t.Errorf("server %d holds %d points, want %d", i, got, want)
		}
	}
}

func TestKeyHash(t *testing.T) {
	d := md5.Sum([]byte("foo"))
	if KeyHash([]byte("foo")) != binary.LittleEndian.Uint32(d[:]) {
		t.Fatal("KeyHash is not MD5's first word, little-endian")
	}
}

func TestOneServerOwnsAll(t *testing.T) {
	for _, h := range []Hash{Ketama, Jump} {
		r, err := New(h, []Server{{Host: "127.0.0.1", Port: 11211}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if o := r.Owner([]byte(fmt.Sprint(i))); o != 0 {
				t.Fatalf("%v: owner %d", h, o)
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Ketama, nil); err != ErrNoServers {
		t.Errorf("no servers: %v", err)
	}
	if _, err := New(Jump, goldenServers); err != ErrJumpWeights {
		t.Errorf("jump with weights: %v", err)
	}
	if _, err := ParseHash("crc32"); err == nil {
		t.Error("ParseHash accepted crc32")
	}
	for s, want := range map[string]Hash{"": Ketama, "ketama": Ketama, "jump": Jump} {
		if h, err := ParseHash(s); err != nil || h != want {
			t.Errorf("ParseHash(%q) = %v, %v", s, h, err)
		}
	}
}

// TestJumpReference checks JumpHash against values of the paper's C++
// function (the reference implementation).
func TestJumpReference(t *testing.T) {
	cases := []struct {
		key  uint64
		n    int
		want int
	}{
		{0, 1, 0}, {0, 10, 0}, {1, 10, 6}, {0xdeadbeef, 100, 87}, {0xffffffffffffffff, 1000, 313}, {123456789, 7, 0},
	}
	for _, c := range cases {
		if got := JumpHash(c.key, c.n); got != c.want {
			t.Errorf("JumpHash(%#x, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
}

// TestJumpMovesOnlyToNewBucket checks jump's defining property: growing
// the pool by one server moves keys only onto the new server.
func TestJumpMovesOnlyToNewBucket(t *testing.T) {
	servers := make([]Server, 9)
	for i := range servers {
		servers[i] = Server{Host: "127.0.0.1", Port: uint16(20000 + i)}
	}
	a, _ := New(Jump, servers[:8])
	b, _ := New(Jump, servers)
	moved := 0
	for i := 0; i < 10000; i++ {
		k := []byte(fmt.Sprintf("key-%d", i))
		if a.Owner(k) != b.Owner(k) {
			moved++
			if b.Owner(k) != 8 {
				t.Fatalf("key %s moved from %d to %d", k, a.Owner(k), b.Owner(k))
			}
		}
	}
	if moved < 800 || moved > 1400 {
		t.Fatalf("%d of 10000 keys moved to the 9th server, want about 1111", moved)
	}
}

// TestNext checks failover for both hashes: with nothing skipped Next is
// Owner; with the owner skipped it is another live server; keys of servers
// that are not skipped never move; everything skipped gives -1.
func TestNext(t *testing.T) {
	servers := make([]Server, 5)
	for i := range servers {
		servers[i] = Server{Host: "127.0.0.1", Port: uint16(20000 + i), Weight: 1}
	}
	for _, h := range []Hash{Ketama, Jump} {
		r, err := New(h, servers)
		if err != nil {
			t.Fatal(err)
		}
		dead := map[int]bool{2: true, 3: true}
		skip := func(i int) bool { return dead[i] }
		none := func(int) bool { return false }
		all := func(int) bool { return true }
		spread := map[int]int{}
		for i := 0; i < 5000; i++ {
			k := []byte(fmt.Sprintf("key-%d", i))
			o := r.Owner(k)
			if n := r.Next(k, none); n != o {
				t.Fatalf("%v: Next with nothing skipped = %d, Owner = %d", h, n, o)
			}
			n := r.Next(k, skip)
			if dead[n] || n < 0 {
				t.Fatalf("%v: key %s went to dead or no server %d", h, k, n)
			}
			if !dead[o] && n != o {
				t.Fatalf("%v: key %s of healthy server %d moved to %d", h, k, o, n)
			}
			if dead[o] {
				spread[n]++
			}
			if r.Next(k, all) != -1 {
				t.Fatalf("%v: all skipped but Next found a server", h)
			}
		}
		if len(spread) < 2 {
			t.Errorf("%v: the dead servers' keys all went to %v; want them spread", h, spread)
		}
	}
}

func BenchmarkOwner(b *testing.B) {
	servers := make([]Server, 10)
	for i := range servers {
		servers[i] = Server{Host: "127.0.0.1", Port: uint16(20000 + i), Weight: uint32(1 + i%3)}
	}
	key := []byte("user:1234567:profile")
	for _, h := range []Hash{Ketama, Jump} {
		if h == Jump {
			for i := range servers {
				servers[i].Weight = 1
			}
		}
		r, err := New(h, servers)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(h.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Owner(key)
			}
		})
	}
}

func TestOwnerAllocs(t *testing.T) {
	servers := []Server{{Host: "127.0.0.1", Port: 1, Weight: 1}, {Host: "127.0.0.1", Port: 2, Weight: 1}}
	key := []byte("user:1234567:profile")
	for _, h := range []Hash{Ketama, Jump} {
		r, _ := New(h, servers)
		skip := func(i int) bool { return i == 0 }
		if a := testing.AllocsPerRun(100, func() { r.Owner(key); r.Next(key, skip) }); a != 0 {
			t.Errorf("%v: %v allocs per Owner+Next", h, a)
		}
	}
}
