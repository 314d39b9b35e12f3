package proxy

import "testing"

// FuzzSession feeds a session arbitrary client bytes in two pieces and
// its upstreams arbitrary server bytes (every read hedged to server 9
// when cut is odd): nothing may panic, the session never holds more than
// MaxPending requests, and a server's replies never complete more slots
// than were sent to it.
func FuzzSession(f *testing.F) {
	f.Add([]byte("get 1a 2b 3c\r\nset 1a 0 0 1 noreply\r\nx\r\nmn\r\n"), []byte("VALUE 1a 0 1\r\nA\r\nEND\r\nMN\r\n"), 5)
	f.Add([]byte(binReq(0x0d, "1a", 1)+binReq(0x0a, "", 2)), []byte(binResp(0x0a, 0, 0, "")), 30)
	f.Add([]byte("mg 1a q v\r\nquit\r\n"), []byte("MN\r\nEN\r\n"), 3)
	f.Fuzz(func(t *testing.T, client, server []byte, cut int) {
		if cut < 0 || cut > len(client) {
			cut = len(client) / 2
		}
		s := &Session{}
		ups := map[[2]int]*Upstream{}
		sent := 0
		for _, chunk := range [][]byte{client[:cut], client[cut:]} {
			for _, snd := range s.Feed(chunk, replRouter{}) {
				k := [2]int{snd.Server, fam(snd.Binary)}
				if ups[k] == nil {
					ups[k] = &Upstream{Binary: snd.Binary}
				}
				ups[k].Append(nil, snd)
				sent++
				if cut%2 == 1 && snd.Read && s.Unanswered(snd.Token) {
					h := snd
					h.Server, h.Token = 9, s.Hedge(snd.Token)
					k := [2]int{9, fam(h.Binary)}
					if ups[k] == nil {
						ups[k] = &Upstream{Binary: h.Binary}
					}
					ups[k].Append(nil, h)
					sent++
				}
			}
			if s.Waiting() > MaxPending {
				t.Fatalf("%d requests waiting", s.Waiting())
			}
		}
		done := 0
		for k, u := range ups {
			dels, err := u.Feed(server)
			for _, d := range dels {
				d.Token.S.Reply(d.Token, d.Piece, d.Kind, d.Done)
				if d.Done {
					done++
				}
			}
			if err != nil {
				for _, tok := range u.Abandon() {
					tok.S.Fail(tok)
				}
			}
			delete(ups, k)
		}
		if done > sent {
			t.Fatalf("%d replies done for %d requests", done, sent)
		}
		s.Output()
	})
}
