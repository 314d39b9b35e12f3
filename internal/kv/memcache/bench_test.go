package memcache

import "testing"

func BenchmarkParse(b *testing.B) {
	reqs := map[string][]byte{
		"ascii-get":   []byte("get user:1234567:profile\r\n"),
		"ascii-get4":  []byte("get user:1 user:2 user:3 user:4\r\n"),
		"ascii-set":   []byte("set user:1234567:profile 0 0 32\r\n01234567890123456789012345678901\r\n"),
		"meta-get":    []byte("mg user:1234567:profile v k t f\r\n"),
		"binary-get":  binReq(OpGet, nil, []byte("user:1234567:profile"), nil),
		"binary-setq": binReq(OpSetQ, make([]byte, 8), []byte("user:1234567:profile"), make([]byte, 32)),
	}
	for name, q := range reqs {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var r Request
			for b.Loop() {
				if err := Parse(q, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSplitGet(b *testing.B) {
	var r Request
	if err := Parse([]byte("get user:1 user:2 user:3 user:4 user:5 user:6 user:7 user:8\r\n"), &r); err != nil {
		b.Fatal(err)
	}
	var s Splitter
	dst := make([]byte, 1024)
	owner := func(k []byte) int { return int(k[len(k)-1]) % 3 }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.SplitGet(&r, owner, dst); err != nil {
			b.Fatal(err)
		}
	}
}
