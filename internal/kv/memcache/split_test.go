package memcache

import (
	"strings"
	"testing"
)

// firstLetterOwner places keys by their first letter: a→0, b→1, c→2, …
func firstLetterOwner(k []byte) int { return int(k[0]-'a') % 3 }

func TestSplitGet(t *testing.T) {
	var r Request
	if err := Parse([]byte("gat 10 a1 b1 a2 c1 b2\r\n"), &r); err != nil {
		t.Fatal(err)
	}
	var s Splitter
	dst := make([]byte, 256)
	parts, err := s.SplitGet(&r, firstLetterOwner, dst)
	if err != nil {
		t.Fatal(err)
	}
	want := []Part{
		{Server: 0, Buf: []byte("gat 10 a1 a2\r\n"), Keys: 2},
		{Server: 1, Buf: []byte("gat 10 b1 b2\r\n"), Keys: 2},
		{Server: 2, Buf: []byte("gat 10 c1\r\n"), Keys: 1},
	}
	if len(parts) != len(want) {
		t.Fatalf("%d parts: %+v", len(parts), parts)
	}
	for i := range want {
		if parts[i].Server != want[i].Server || string(parts[i].Buf) != string(want[i].Buf) || parts[i].Keys != want[i].Keys {
			t.Errorf("part %d = %d %q %d, want %d %q %d", i, parts[i].Server, parts[i].Buf, parts[i].Keys,
				want[i].Server, want[i].Buf, want[i].Keys)
		}
		// Each part is itself a valid request for its server.
		var p Request
		if err := Parse(parts[i].Buf, &p); err != nil || p.NumKeys != want[i].Keys {
			t.Errorf("part %d does not parse: %v", i, err)
		}
	}
	if _, err := s.SplitGet(&r, firstLetterOwner, dst[:10]); err != ErrShortBuffer {
		t.Errorf("short buffer: %v", err)
	}
	if err := Parse([]byte("set a 0 0 1\r\nx\r\n"), &r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SplitGet(&r, firstLetterOwner, dst); err != ErrNotSplittable {
		t.Errorf("set: %v", err)
	}
}

func TestSplitPipeline(t *testing.T) {
	var s Splitter
	dst := make([]byte, 512)
	// "Yjk=" is base64 for "b9", so it goes to server 1.
	in := "mg a1 v\r\nmg b1 v\r\nmg Yjk= b v\r\nmg a2 v\r\nmn\r\n"
	parts, err := s.SplitPipeline([]byte(in), firstLetterOwner, dst)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{
		0: "mg a1 v\r\nmg a2 v\r\nmn\r\n",
		1: "mg b1 v\r\nmg Yjk= b v\r\nmn\r\n",
	}
	if len(parts) != 2 {
		t.Fatalf("parts %+v", parts)
	}
	for _, p := range parts {
		if string(p.Buf) != want[p.Server] {
			t.Errorf("server %d gets %q, want %q", p.Server, p.Buf, want[p.Server])
		}
	}
	bin := append(binReq(OpGetKQ, nil, []byte("a1"), nil), binReq(OpGetKQ, nil, []byte("c1"), nil)...)
	bin = append(bin, binReq(OpNoop, nil, nil, nil)...)
	parts, err = s.SplitPipeline(bin, firstLetterOwner, dst)
	if err != nil || len(parts) != 2 || parts[0].Server != 0 || parts[1].Server != 2 ||
		len(parts[0].Buf) != 2*HeaderLen+2 || parts[0].Keys != 1 {
		t.Fatalf("binary pipeline: %v %d parts", err, len(parts))
	}
	if _, err := s.SplitPipeline([]byte("get a b\r\n"), firstLetterOwner, dst); err != ErrNotSplittable {
		t.Errorf("multi-server get in a pipeline: %v", err)
	}
	if _, err := s.SplitPipeline([]byte("mg a v\r\nbogus\r\n"), firstLetterOwner, dst); err != ErrUnknownCommand {
		t.Errorf("bad request in a pipeline: %v", err)
	}
	parts, err = s.SplitPipeline([]byte("mn\r\n"), firstLetterOwner, dst)
	if err != nil || len(parts) != 1 || parts[0].Server != -1 {
		t.Errorf("keyless pipeline: %v %+v", err, parts)
	}
}

func TestReplyEnd(t *testing.T) {
	cases := []struct {
		in   string
		n    int
		kind ReplyKind
		err  error
	}{
		{"STORED\r\nEND\r\n", 8, ReplyLine, nil},
		{"END\r\n", 5, ReplyLine, nil},
		{"VALUE a 0 3\r\nabc\r\nVALUE b 5 1 77\r\nx\r\nEND\r\nSTORED\r\n", 42, ReplyValues, nil},
		{"VALUE a 0 3\r\nabc\r\nVAL", 0, 0, ErrIncomplete},
		{"VALUE a 0 3\r\nab", 0, 0, ErrIncomplete},
		{"VALUE a 0 3\r\nabcd\r\nEND\r\n", 0, 0, ErrBadReply},
		{"VALUE a 0 x\r\n", 0, 0, ErrBadReply},
		{"VA 2 t5\r\nhi\r\nHD\r\n", 13, ReplyMetaValue, nil},
		{"HD\r\n", 4, ReplyLine, nil},
		{"MN\r\n", 4, ReplyLine, nil},
		{"CLIENT_ERROR bad data chunk\r\n", 29, ReplyLine, nil},
		{"STOR", 0, 0, ErrIncomplete},
		{"", 0, 0, ErrIncomplete},
	}
	for _, c := range cases {
		n, kind, err := ReplyEnd([]byte(c.in))
		if n != c.n || kind != c.kind || err != c.err {
			t.Errorf("%q: %d %v %v, want %d %v %v", c.in, n, kind, err, c.n, c.kind, c.err)
		}
	}
	bin := []byte{0x81, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c', 0x81}
	if n, kind, err := ReplyEnd(bin); n != 27 || kind != ReplyBinary || err != nil {
		t.Errorf("binary: %d %v %v", n, kind, err)
	}
	if _, _, err := ReplyEnd(bin[:26]); err != ErrIncomplete {
		t.Errorf("short binary: %v", err)
	}
	if got := TrimEnd([]byte("VALUE a 0 1\r\nx\r\nEND\r\n")); string(got) != "VALUE a 0 1\r\nx\r\n" {
		t.Errorf("TrimEnd: %q", got)
	}
}

// TestReplyStreamable: the bytes of an incomplete reply a terminator may
// pass on are its whole lines and the data it has of its blocks, never
// a partial line, and nothing of a reply that is only a line.
func TestReplyStreamable(t *testing.T) {
	cases := []struct {
		in string
		n  int
	}{
		{"", 0},
		{"VALUE a 0 1048576", 0},
		{"VALUE a 0 1048576\r\n", 19},
		{"VALUE a 0 1048576\r\nabc", 22},
		{"VALUE a 0 3\r\nabc\r", 17},
		{"VALUE a 0 3\r\nabc\r\n", 18},
		{"VALUE a 0 3\r\nabc\r\nEN", 18},
		{"VALUE a 0 3\r\nabc\r\nVALUE b 0 2", 18},
		{"VALUE a 0 3\r\nabc\r\nVALUE b 0 2\r\nx", 32},
		{"VALUE a 0 x\r\nabc", 0},
		{"VALUE a 0 3\r\nabc\r\nSTORED\r\n", 18},
		{"VA 5 t\r\nhel", 11},
		{"VA x\r\nhel", 0},
		{"STOR", 0},
		{"SERVER_ERROR out of mem", 0},
	}
	for _, c := range cases {
		if got, _ := ReplyStreamable([]byte(c.in)); got != c.n {
			t.Errorf("%q: %d, want %d", c.in, got, c.n)
		}
	}
	bin := []byte{0x81, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'a', 'b'}
	for cut, want := range map[int]int{0: 0, 23: 0, 24: 24, 25: 25, 26: 26} {
		if got, _ := ReplyStreamable(bin[:cut]); got != want {
			t.Errorf("binary, %d bytes: %d, want %d", cut, got, want)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	var r Request
	var s Splitter
	dst := make([]byte, 1024)
	keys := make([][]byte, 0, 16)
	reqs := [][]byte{
		[]byte("get user:1 user:2 user:3 user:4\r\n"),
		[]byte("set user:1 0 0 5 noreply\r\nhello\r\n"),
		[]byte("mg dXNlcjox b v k t\r\n"),
		[]byte("ms user:1 5 T0 F1\r\nhello\r\n"),
		binReq(OpGetK, nil, []byte("user:1"), nil),
	}
	get := reqs[0]
	pipe := []byte(strings.Repeat("mg user:1 v\r\nmg user:2 v\r\n", 4) + "mn\r\n")
	owner := func(k []byte) int { return int(k[len(k)-1]) % 3 }
	_, _ = s.SplitPipeline(pipe, owner, dst)
	_ = Parse(get, &r)
	_, _ = s.SplitGet(&r, owner, dst)
	allocs := testing.AllocsPerRun(100, func() {
		for _, q := range reqs {
			_ = Parse(q, &r)
			keys = r.Keys(keys[:0])
			_, _ = s.Owner(&r, owner)
		}
		_ = Parse(get, &r)
		_, _ = s.SplitGet(&r, owner, dst)
		_, _ = s.SplitPipeline(pipe, owner, dst)
		_, _, _ = ReplyEnd([]byte("VALUE a 0 3\r\nabc\r\nEND\r\n"))
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round", allocs)
	}
}
