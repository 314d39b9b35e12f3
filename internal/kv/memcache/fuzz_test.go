package memcache

import (
	"bytes"
	"testing"
)

// seeds are requests of every protocol for the fuzz targets.
func seeds(f *testing.F) {
	for _, c := range textCases {
		f.Add([]byte(c.in))
	}
	f.Add(binReq(OpGet, nil, []byte("foo"), nil))
	f.Add(binReq(OpSet, make([]byte, 8), []byte("foo"), []byte("bar")))
	f.Add(binReq(OpIncrement, make([]byte, 20), []byte("n"), nil))
	f.Add([]byte("mg a v\r\nmg b v\r\nmn\r\n"))
}

// within reports whether sub lies inside buf.
func within(buf, sub []byte) bool {
	if len(sub) == 0 {
		return true
	}
	for i := range buf {
		if &buf[i] == &sub[0] {
			return i+len(sub) <= len(buf)
		}
	}
	return false
}

func FuzzParse(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		var r Request
		err := Parse(in, &r)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if r.Len <= 0 || r.Len > len(in) {
			t.Fatalf("Len %d of %d bytes", r.Len, len(in))
		}
		keys := r.Keys(nil)
		if len(keys) != r.NumKeys {
			t.Fatalf("%d keys, NumKeys %d", len(keys), r.NumKeys)
		}
		for _, k := range keys {
			if len(k) == 0 || len(k) > MaxKeyLen || !within(in[:r.Len], k) {
				t.Fatalf("key %q", k)
			}
		}
		if !within(in[:r.Len], r.Value) || !within(in[:r.Len], r.Line) {
			t.Fatal("value or line outside the request")
		}
	})
}

func FuzzParseDatagram(f *testing.F) {
	f.Add([]byte("\x00\x01\x00\x00\x00\x01\x00\x00get a b\r\n"))
	f.Add([]byte("\x00\x01\x00\x00\x00\x02\x00\x00get a b\r\n"))
	f.Add([]byte("\x00\x01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var r Request
		h, payload, err := ParseDatagram(in, &r)
		if err == ErrShortFrame || err == ErrSpansDatagrams {
			return
		}
		if h.Total != 1 || !bytes.Equal(payload, in[FrameHeaderLen:]) {
			t.Fatalf("header %+v payload %q", h, payload)
		}
	})
}

func FuzzSplit(f *testing.F) {
	seeds(f)
	f.Add([]byte("get a b c d e f\r\n"))
	owner := func(k []byte) int { return int(k[0]) % 4 }
	f.Fuzz(func(t *testing.T, in []byte) {
		var s Splitter
		dst := make([]byte, 4*len(in)+64)
		var r Request
		if Parse(in, &r) == nil && r.Protocol == ASCII && r.NumKeys > 0 && r.keys != nil {
			parts, err := s.SplitGet(&r, owner, dst)
			if err != nil {
				t.Fatalf("SplitGet: %v", err)
			}
			total := 0
			for _, p := range parts {
				var q Request
				if err := Parse(p.Buf, &q); err != nil || q.NumKeys != p.Keys || q.Len != len(p.Buf) {
					t.Fatalf("part %q does not parse: %v", p.Buf, err)
				}
				for _, k := range q.Keys(nil) {
					if owner(k) != p.Server {
						t.Fatalf("key %q in the part of server %d", k, p.Server)
					}
				}
				total += p.Keys
			}
			if total != r.NumKeys {
				t.Fatalf("parts hold %d keys of %d", total, r.NumKeys)
			}
		}
		parts, err := s.SplitPipeline(in, owner, dst)
		if err != nil {
			return
		}
		for _, p := range parts {
			for off := 0; off < len(p.Buf); {
				var q Request
				if err := Parse(p.Buf[off:], &q); err != nil {
					t.Fatalf("pipeline part %q: %v", p.Buf, err)
				}
				off += q.Len
			}
		}
	})
}

func FuzzReplyEnd(f *testing.F) {
	f.Add([]byte("VALUE a 0 3\r\nabc\r\nEND\r\n"))
	f.Add([]byte("VA 2 t\r\nhi\r\n"))
	f.Add([]byte("STORED\r\n"))
	f.Add([]byte{0x81, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'x'})
	f.Fuzz(func(t *testing.T, in []byte) {
		n, kind, err := ReplyEnd(in)
		if err == nil && (n <= 0 || n > len(in)) {
			t.Fatalf("reply of %d bytes in %d", n, len(in))
		}
		if err != nil {
			if p, _ := ReplyStreamable(in); p > len(in) {
				t.Fatalf("%d streamable bytes of %d", p, len(in))
			}
			return
		}
		// Every prefix of a complete reply: what may be passed on is
		// the reply's and stops before its last line.
		last := n - 1
		if kind == ReplyValues {
			last = bytes.LastIndexByte(in[:n-1], '\n') + 1 // the END line
		}
		for cut := range n {
			p, pk := ReplyStreamable(in[:cut])
			if p > cut || p > last || p > 0 && pk != kind {
				t.Fatalf("%q: %d streamable (%v) of the first %d bytes, reply %d (%v)", in[:n], p, pk, cut, n, kind)
			}
		}
	})
}
