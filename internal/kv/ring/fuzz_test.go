package ring

import "testing"

// FuzzOwner builds rings from fuzzed weights and checks, for a fuzzed key,
// that the owner is a server holding points, that Next with nothing
// skipped is the owner, and that Next with the owner skipped is another
// server (-1 only when no other server holds points: a weight too small
// for one group of four points puts a server on no part of the ring).
func FuzzOwner(f *testing.F) {
	f.Add([]byte("user:1"), []byte{1, 2, 3})
	f.Add([]byte(""), []byte{1})
	f.Add([]byte("k"), []byte{255, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, key, weights []byte) {
		if len(weights) == 0 || len(weights) > 64 {
			return
		}
		servers := make([]Server, len(weights))
		for i, w := range weights {
			servers[i] = Server{Host: "127.0.0.1", Port: uint16(11211 + i), Weight: uint32(w)}
		}
		r, err := New(Ketama, servers)
		if err != nil {
			t.Fatal(err)
		}
		o := r.Owner(key)
		if o < 0 || o >= len(servers) || (len(servers) > 1 && r.Points(o) == 0) {
			t.Fatalf("owner %d of %d servers (points %d)", o, len(servers), r.Points(o))
		}
		if n := r.Next(key, func(int) bool { return false }); n != o {
			t.Fatalf("Next %d, Owner %d", n, o)
		}
		n := r.Next(key, func(i int) bool { return i == o })
		if n == o {
			t.Fatalf("Next with the owner skipped gave the owner")
		}
		if n == -1 && len(servers) > 1 {
			// Only servers without points may be left out.
			for i := range servers {
				if i != o && r.Points(i) > 0 {
					t.Fatalf("Next found no server, but server %d holds %d points", i, r.Points(i))
				}
			}
		}
		for i := range servers {
			servers[i].Weight = 1
		}
		j, err := New(Jump, servers)
		if err != nil {
			t.Fatal(err)
		}
		if o := j.Owner(key); o < 0 || o >= len(servers) || j.Next(key, func(i int) bool { return i == o }) == o {
			t.Fatalf("jump owner %d", o)
		}
	})
}
