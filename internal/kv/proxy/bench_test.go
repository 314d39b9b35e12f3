package proxy

import "testing"

// BenchmarkGetRoundTrip is one pipelined get through a session and an
// upstream: parse, route, frame the request, frame the reply, order it.
func BenchmarkGetRoundTrip(b *testing.B) {
	s := &Session{}
	u := &Upstream{}
	req := []byte("get 1abcdefgh\r\n")
	reply := []byte("VALUE 1abcdefgh 0 32\r\n01234567890123456789012345678901\r\nEND\r\n")
	var wbuf []byte
	b.ReportAllocs()
	for range b.N {
		for _, snd := range s.Feed(req, keyRouter{}) {
			wbuf = u.Append(wbuf[:0], snd)
		}
		dels, _ := u.Feed(reply)
		for _, d := range dels {
			s.Reply(d.Token, d.Piece, d.Kind, d.Done)
		}
		if len(s.Output()) != len(reply) {
			b.Fatal("no reply")
		}
	}
}

// BenchmarkSplitGet is a 6-key get over three servers, merged.
func BenchmarkSplitGet(b *testing.B) {
	s := &Session{}
	ups := [3]Upstream{}
	req := []byte("get 1a 2b 3c 1d 2e 3f\r\n")
	reply := []byte("VALUE x 0 1\r\nx\r\nVALUE y 0 1\r\ny\r\nEND\r\n")
	var wbuf []byte
	b.ReportAllocs()
	for range b.N {
		for _, snd := range s.Feed(req, keyRouter{}) {
			wbuf = ups[snd.Server-1].Append(wbuf[:0], snd)
		}
		for i := range ups {
			dels, _ := ups[i].Feed(reply)
			for _, d := range dels {
				s.Reply(d.Token, d.Piece, d.Kind, d.Done)
			}
		}
		if len(s.Output()) == 0 {
			b.Fatal("no reply")
		}
	}
}
