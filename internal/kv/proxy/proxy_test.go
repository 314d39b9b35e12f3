package proxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/detour-overlay/detour/internal/kv/memcache"
)

// keyRouter sends a key to the server its first byte names ('0'…'9'),
// and keyless requests to server 0; down servers give -1.
type keyRouter struct{ down map[int]bool }

func (r keyRouter) Owner(key []byte) int {
	o := int(key[0]-'0') % 10
	if r.down[o] {
		return -1
	}
	return o
}

func (r keyRouter) Any() int { return 0 }

// net is a test harness: a session, one text and one binary Upstream per
// server, and what each server was sent.
type net struct {
	t    *testing.T
	s    *Session
	r    keyRouter
	ups  map[[2]int]*Upstream
	sent map[[2]int]*bytes.Buffer
}

func newNet(t *testing.T) *net {
	return &net{t: t, s: &Session{}, r: keyRouter{}, ups: map[[2]int]*Upstream{}, sent: map[[2]int]*bytes.Buffer{}}
}

func fam(b bool) int {
	if b {
		return 1
	}
	return 0
}

// feed gives the session client bytes and writes its sends.
func (n *net) feed(data string) {
	for _, snd := range n.s.Feed([]byte(data), n.r) {
		k := [2]int{snd.Server, fam(snd.Binary)}
		u := n.ups[k]
		if u == nil {
			u = &Upstream{Binary: snd.Binary}
			n.ups[k] = u
			n.sent[k] = &bytes.Buffer{}
		}
		n.sent[k].Write(u.Append(nil, snd))
	}
}

// reply gives server srv's text connection reply bytes.
func (n *net) reply(srv int, binary bool, data string) {
	u := n.ups[[2]int{srv, fam(binary)}]
	if u == nil {
		n.t.Fatalf("no connection to server %d", srv)
	}
	dels, err := u.Feed([]byte(data))
	if err != nil {
		n.t.Fatalf("server %d: %v", srv, err)
	}
	for _, d := range dels {
		d.Token.S.Reply(d.Token, d.Piece, d.Kind, d.Done)
	}
}

func (n *net) sentTo(srv int, binary bool) string {
	b := n.sent[[2]int{srv, fam(binary)}]
	if b == nil {
		return ""
	}
	s := b.String()
	b.Reset()
	return s
}

func (n *net) out() string { return string(n.s.Output()) }

// outIs fails the test unless the replies ready for the client are want.
func (n *net) outIs(what, want string) {
	n.t.Helper()
	if got := n.out(); got != want {
		n.t.Fatalf("%s: replies %q, want %q", what, got, want)
	}
}

func TestPipelineInOrder(t *testing.T) {
	n := newNet(t)
	n.feed("get 1a\r\nset 2b 0 0 1\r\nx\r\nmg 1c v\r\nmn\r\n")
	if got := n.sentTo(1, false); got != "get 1a\r\nmg 1c v\r\n" {
		t.Fatalf("server 1 got %q", got)
	}
	if got := n.sentTo(2, false); got != "set 2b 0 0 1\r\nx\r\n" {
		t.Fatalf("server 2 got %q", got)
	}
	n.reply(2, false, "STORED\r\n")
	if got := n.out(); got != "" {
		t.Fatalf("a later reply overtook an earlier one: %q", got)
	}
	n.reply(1, false, "VALUE 1a 0 1\r\nA\r\nEND\r\nVA 1 \r\nC\r\n")
	if got, want := n.out(), "VALUE 1a 0 1\r\nA\r\nEND\r\nSTORED\r\nVA 1 \r\nC\r\nMN\r\n"; got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	if n.s.Waiting() != 0 {
		t.Fatalf("%d slots left", n.s.Waiting())
	}
}

func TestSplitGetMerged(t *testing.T) {
	n := newNet(t)
	n.feed("get 1a 2b 1c 3d\r\n")
	if got := n.sentTo(1, false); got != "get 1a 1c\r\n" {
		t.Fatalf("server 1 got %q", got)
	}
	if got := n.sentTo(2, false); got != "get 2b\r\n" {
		t.Fatalf("server 2 got %q", got)
	}
	if got := n.sentTo(3, false); got != "get 3d\r\n" {
		t.Fatalf("server 3 got %q", got)
	}
	n.reply(3, false, "END\r\n")
	n.reply(2, false, "VALUE 2b 0 1\r\nB\r\nEND\r\n")
	if got := n.out(); got != "" {
		t.Fatalf("a partial merge left: %q", got)
	}
	n.reply(1, false, "VALUE 1a 0 1\r\nA\r\nVALUE 1c 0 1\r\nC\r\nEND\r\n")
	got := n.out()
	if strings.Count(got, "END\r\n") != 1 || !strings.HasSuffix(got, "END\r\n") {
		t.Fatalf("merged reply %q has not exactly one END at its end", got)
	}
	for _, v := range []string{"VALUE 1a 0 1\r\nA\r\n", "VALUE 1c 0 1\r\nC\r\n", "VALUE 2b 0 1\r\nB\r\n"} {
		if !strings.Contains(got, v) {
			t.Fatalf("merged reply %q lacks %q", got, v)
		}
	}
	if n.s.Stats.Split != 1 {
		t.Fatalf("split counted %d times", n.s.Stats.Split)
	}
}

func TestSplitGetError(t *testing.T) {
	n := newNet(t)
	n.feed("gets 1a 2b\r\n")
	n.reply(1, false, "VALUE 1a 0 1 5\r\nA\r\nEND\r\n")
	n.reply(2, false, "SERVER_ERROR out of memory\r\n")
	if got := n.out(); got != "SERVER_ERROR out of memory\r\n" {
		t.Fatalf("merged reply %q, want the error", got)
	}
}

// TestSplitGetManyParts splits a gat with a long exptime and one-byte
// keys over ten servers (the parts repeat the command) and checks the
// requests after it are untouched.
func TestSplitGetManyParts(t *testing.T) {
	n := newNet(t)
	n.feed("gat 1000000 0 1 2 3 4 5 6 7 8 9\r\nget 1z\r\n")
	for i := 0; i < 10; i++ {
		want := fmt.Sprintf("gat 1000000 %d\r\n", i)
		if i == 1 {
			want += "get 1z\r\n"
		}
		if got := n.sentTo(i, false); got != want {
			t.Fatalf("server %d got %q, want %q", i, got, want)
		}
	}
	// A base64 meta key that does not decode: memcached's error, and the
	// next request is untouched.
	b := newNet(t)
	b.feed("mg ####= b v\r\nget 1y\r\n")
	if got := b.out(); !strings.HasPrefix(got, "CLIENT_ERROR") {
		t.Fatalf("bad base64 key: %q", got)
	}
	if got := b.sentTo(1, false); got != "get 1y\r\n" {
		t.Fatalf("after the bad key, server 1 got %q", got)
	}
}

// replRouter is keyRouter with servers 1 and 2 replicas of each other.
type replRouter struct{ keyRouter }

func (replRouter) Replicas(o int, dst []int) []int {
	switch o {
	case 1:
		return append(dst, 2)
	case 2:
		return append(dst, 1)
	}
	return dst
}

// TestReplicatedWrites sends writes to every replica and reads to one;
// the client gets the first replica's reply once all have answered.
func TestReplicatedWrites(t *testing.T) {
	n := newNet(t)
	sess, r := n.s, replRouter{}
	sends := sess.Feed([]byte("set 1a 0 0 1\r\nx\r\nget 1a\r\nset 1b 0 0 1 noreply\r\ny\r\nmn\r\n"), r)
	var got []string
	for _, snd := range sends {
		got = append(got, fmt.Sprintf("%d:%d:%s", snd.Server, snd.Token.Part, strings.SplitN(string(snd.Buf), " ", 2)[0]))
	}
	if want := "1:0:set 2:1:set 1:0:get 1:0:set 2:1:set"; strings.Join(got, " ") != want {
		t.Fatalf("sends %v, want %s", got, want)
	}
	ups := map[int]*Upstream{1: {}, 2: {}}
	for _, snd := range sends {
		ups[snd.Server].Append(nil, snd)
	}
	deliver := func(srv int, data string) {
		dels, err := ups[srv].Feed([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dels {
			d.Token.S.Reply(d.Token, d.Piece, d.Kind, d.Done)
		}
	}
	deliver(1, "STORED\r\nEND\r\nMN\r\n")
	if out := string(sess.Output()); out != "" {
		t.Fatalf("a write answered before every replica: %q", out)
	}
	deliver(2, "NOT_STORED\r\nSERVER_ERROR x\r\nMN\r\n")
	if out := string(sess.Output()); out != "STORED\r\nEND\r\nMN\r\n" {
		t.Fatalf("replies %q", out)
	}
}

// readRouter is replRouter that reads keys of server 1 from server 2.
type readRouter struct{ replRouter }

func (r readRouter) Read(key []byte) int {
	if o := r.Owner(key); o != 1 {
		return o
	}
	return 2
}

// TestReaderPicksReads: with a Reader, reads (single-key, split and meta)
// go where Read says and are marked Read; writes, including a multi-key
// gat, still go to Owner's server and its replicas.
func TestReaderPicksReads(t *testing.T) {
	sess := &Session{}
	in := "get 1a\r\nset 1b 0 0 1\r\nx\r\nget 1c 3d\r\nmg 1e v\r\ngat 0 1f 1g\r\n"
	var got []string
	for _, snd := range sess.Feed([]byte(in), readRouter{}) {
		got = append(got, fmt.Sprintf("%d:%v:%s", snd.Server, snd.Read, strings.TrimSpace(string(snd.Buf[:bytes.IndexByte(snd.Buf, '\r')]))))
	}
	want := "2:true:get 1a|1:false:set 1b 0 0 1|2:false:set 1b 0 0 1|2:true:get 1c|3:true:get 3d|2:true:mg 1e v|1:false:gat 0 1f 1g"
	if strings.Join(got, "|") != want {
		t.Fatalf("sends\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
}

// TestUpstreamBuffered: a reply not yet complete to a request sent to
// stream is handed out as far as it has surely arrived (its whole lines, its data so far), what is left
// is counted as buffered, and the piece that completes it holds its END.
func TestUpstreamBuffered(t *testing.T) {
	u := &Upstream{}
	u.Append(nil, Send{Buf: []byte("get a\r\n"), Stream: true})
	dels, err := u.Feed([]byte("VALUE a 0 3"))
	if err != nil || u.Buffered() != 11 || len(dels) != 0 {
		t.Fatalf("a partial line: buffered %d, deliveries %+v, err %v", u.Buffered(), dels, err)
	}
	dels, err = u.Feed([]byte("\r\nab"))
	if err != nil || u.Buffered() != 0 || len(dels) != 1 || dels[0].Done || string(dels[0].Piece) != "VALUE a 0 3\r\nab" || dels[0].Kind != memcache.ReplyValues {
		t.Fatalf("a partial block: buffered %d, deliveries %+v, err %v", u.Buffered(), dels, err)
	}
	dels, err = u.Feed([]byte("c\r\nEN"))
	if err != nil || u.Buffered() != 2 || len(dels) != 1 || dels[0].Done || string(dels[0].Piece) != "c\r\n" {
		t.Fatalf("the block's end: buffered %d, deliveries %+v, err %v", u.Buffered(), dels, err)
	}
	dels, err = u.Feed([]byte("D\r\nSTORED\r\n"))
	if err == nil || len(dels) != 1 || !dels[0].Done || string(dels[0].Piece) != "END\r\n" {
		t.Fatalf("the end: deliveries %+v, err %v (and a reply nobody asked for)", dels, err)
	}
}

// TestLargeReplyStreams: a large value goes to the client as it arrives
// when its request is the first waiting; behind an earlier request it
// waits, and follows as soon as that one is answered, in order; a split
// get's part is merged only once whole, so data that looks like an END
// is not cut off.
func TestLargeReplyStreams(t *testing.T) {
	n := newNet(t)
	n.feed("get 1a\r\nget 2b\r\n")
	n.reply(1, false, "VALUE 1a 0 10\r\nabcd")
	n.outIs("the first reply's start", "VALUE 1a 0 10\r\nabcd")
	n.reply(2, false, "VALUE 2b 0 4\r\nw")
	n.outIs("the second reply before the first ends", "")
	n.reply(1, false, "efghij\r\nEND\r\n")
	n.outIs("the first reply's end", "efghij\r\nEND\r\nVALUE 2b 0 4\r\nw")
	n.reply(2, false, "xyz\r\nEND\r\n")
	n.outIs("the second reply's end", "xyz\r\nEND\r\n")

	n.feed("get 1c 2d\r\n")
	n.reply(1, false, "VALUE 1c 0 9\r\nabEND\r\n")
	n.reply(2, false, "VALUE 2d 0 1\r\nz\r\nEND\r\n")
	n.outIs("a partial merge", "")
	n.reply(1, false, "cd\r\nEND\r\n")
	n.outIs("the merge", "VALUE 2d 0 1\r\nz\r\nVALUE 1c 0 9\r\nabEND\r\ncd\r\nEND\r\n")
	if n.s.Waiting() != 0 || n.s.held != 0 {
		t.Fatalf("%d slots and %d bytes left", n.s.Waiting(), n.s.held)
	}
}

// TestStreamedReplyCut: a server connection lost in the middle of a reply
// the client has already begun to read closes the client's connection
// instead of answering SERVER_ERROR inside the value.
func TestStreamedReplyCut(t *testing.T) {
	n := newNet(t)
	n.feed("get 1a\r\n")
	n.reply(1, false, "VALUE 1a 0 10\r\nabcd")
	n.out()
	for _, tok := range n.ups[[2]int{1, 0}].Abandon() {
		tok.S.Fail(tok)
	}
	if got := n.out(); got != "" || !n.s.Closed() {
		t.Fatalf("after the cut: %q, closed %v", got, n.s.Closed())
	}
}

func TestQuietSentinel(t *testing.T) {
	n := newNet(t)
	n.feed("set 1a 0 0 1 noreply\r\nx\r\nmg 1a q v\r\nmg 1b q v\r\nget 1c\r\n")
	if got, want := n.sentTo(1, false), "set 1a 0 0 1 noreply\r\nx\r\nmn\r\nmg 1a q v\r\nmn\r\nmg 1b q v\r\nmn\r\nget 1c\r\n"; got != want {
		t.Fatalf("server got %q, want %q", got, want)
	}
	// The set says nothing, mg 1a hits, mg 1b misses quietly.
	n.reply(1, false, "MN\r\nVA 1 \r\nx\r\nMN\r\nMN\r\nEND\r\n")
	if got, want := n.out(), "VA 1 \r\nx\r\nEND\r\n"; got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
}

func binReq(op uint8, key string, opaque uint32) string {
	h := make([]byte, 24+len(key))
	h[0], h[1] = 0x80, op
	binary.BigEndian.PutUint16(h[2:], uint16(len(key)))
	binary.BigEndian.PutUint32(h[8:], uint32(len(key)))
	binary.BigEndian.PutUint32(h[12:], opaque)
	copy(h[24:], key)
	return string(h)
}

func binResp(op uint8, status uint16, opaque uint32, body string) string {
	return string(binaryReply(nil, op, opaque, status, []byte(body)))
}

func TestBinaryQuietAndNoop(t *testing.T) {
	n := newNet(t)
	// getkq 1a, getkq 2b, noop: the client's usual multi-get.
	n.feed(binReq(memcache.OpGetKQ, "1a", 1) + binReq(memcache.OpGetKQ, "2b", 2) + binReq(memcache.OpNoop, "", 3))
	if got := n.sentTo(1, true); got != binReq(memcache.OpGetKQ, "1a", 1)+string(binarySentinel) {
		t.Fatalf("server 1 got %x", got)
	}
	if n.sentTo(2, true) == "" {
		t.Fatal("server 2 got nothing")
	}
	hit := binResp(memcache.OpGetKQ, 0, 2, "xyz")
	n.reply(2, true, hit+binResp(memcache.OpNoop, 0, sentinelOpaque, ""))
	if got := n.out(); got != "" {
		t.Fatalf("reply before the first slot: %x", got)
	}
	n.reply(1, true, binResp(memcache.OpNoop, 0, sentinelOpaque, ""))
	if got, want := n.out(), hit+binResp(memcache.OpNoop, 0, 3, ""); got != want {
		t.Fatalf("replies %x, want %x", got, want)
	}
}

func TestErrorsAndClose(t *testing.T) {
	n := newNet(t)
	n.feed("bogus\r\nget " + strings.Repeat("k", 251) + "\r\nmn\r\n")
	got := n.out()
	if !strings.HasPrefix(got, "ERROR\r\nCLIENT_ERROR") || !strings.HasSuffix(got, "MN\r\n") {
		t.Fatalf("replies %q", got)
	}
	if n.s.Closed() || !n.s.WantInput() {
		t.Fatal("an ASCII error closed the session")
	}
	n.feed("get 1a\r\nquit\r\nget 1b\r\n")
	if n.s.WantInput() {
		t.Fatal("the session wants input after quit")
	}
	if got := n.sentTo(1, false); got != "get 1a\r\n" {
		t.Fatalf("server got %q after quit", got)
	}
	if n.s.Closed() {
		t.Fatal("closed before the earlier reply left")
	}
	n.reply(1, false, "END\r\n")
	if got := n.out(); got != "END\r\n" || !n.s.Closed() {
		t.Fatalf("replies %q, closed %v", got, n.s.Closed())
	}
	// Binary lengths that disagree: 0x81 and close, as memcached.
	b := newNet(t)
	bad := []byte(binReq(memcache.OpGet, "1a", 9))
	bad[3] = 40 // key longer than the body
	b.feed(string(bad) + strings.Repeat("z", 40))
	r := b.out()
	if len(r) < 24 || r[0] != 0x81 || binary.BigEndian.Uint16([]byte(r[6:8])) != memcache.StatusUnknownCommand || !b.s.Closed() {
		t.Fatalf("binary lengths: reply %x, closed %v", r, b.s.Closed())
	}
}

func TestNoServerAndFailure(t *testing.T) {
	n := newNet(t)
	n.r.down = map[int]bool{2: true}
	n.feed("get 2a\r\nset 2b 0 0 1 noreply\r\nx\r\nget 1a\r\n" + binReq(memcache.OpGet, "2c", 7))
	n.reply(1, false, "END\r\n")
	got := n.out()
	want := serverErrorText + "END\r\n" + binResp(memcache.OpGet, statusTempFailure, 7, tempFailureText)
	if got != want {
		t.Fatalf("replies %q, want %q", got, want)
	}
	// A connection lost with requests on it: each gets SERVER_ERROR.
	n.r.down = nil
	n.feed("get 3a\r\nget 3b\r\n")
	for _, tok := range n.ups[[2]int{3, 0}].Abandon() {
		tok.S.Fail(tok)
	}
	if got := n.out(); got != serverErrorText+serverErrorText {
		t.Fatalf("replies %q", got)
	}
}

func TestBackpressure(t *testing.T) {
	n := newNet(t)
	var b strings.Builder
	for range MaxPending + 10 {
		b.WriteString("get 1a\r\n")
	}
	n.feed(b.String())
	if n.s.Waiting() != MaxPending || n.s.WantInput() || !n.s.Backlog() {
		t.Fatalf("waiting %d, want input %v, backlog %v", n.s.Waiting(), n.s.WantInput(), n.s.Backlog())
	}
	n.reply(1, false, strings.Repeat("END\r\n", MaxPending))
	if !n.s.WantInput() {
		t.Fatal("the session does not want input once answered")
	}
	n.feed("")
	if n.s.Waiting() != 10 || n.s.Backlog() {
		t.Fatalf("after the backlog: waiting %d", n.s.Waiting())
	}
	// A partial request is no backlog: the shell must read more.
	n.feed("get 1")
	if n.s.Backlog() || !n.s.WantInput() {
		t.Fatal("a partial request counts as backlog")
	}
	// Replies held behind a slow one count against MaxOut.
	h := newNet(t)
	h.feed("get 1a\r\nget 2b\r\n")
	big := strings.Repeat("x", MaxOut)
	h.reply(2, false, fmt.Sprintf("VALUE 2b 0 %d\r\n%s\r\nEND\r\n", len(big), big))
	if h.s.WantInput() || h.out() != "" {
		t.Fatal("a large reply held behind a slow one does not stop input")
	}
	h.reply(1, false, "END\r\n")
	if got := h.out(); len(got) < MaxOut || !h.s.WantInput() && h.s.Pending() == 0 {
		t.Fatalf("after the slow reply: %d bytes out", len(got))
	}
	if !h.s.WantInput() {
		t.Fatal("the session does not want input once its output is taken")
	}
	// A request over MaxRequest closes the session.
	c := newNet(t)
	c.feed("get 1a " + strings.Repeat("x", 100) + " ")
	c.feed(strings.Repeat("y", MaxRequest))
	if !c.s.Closed() {
		t.Fatal("an endless request did not close the session")
	}
}

func TestSwallow(t *testing.T) {
	n := newNet(t)
	// An unknown opcode announcing a 100-byte body: memcached swallows it
	// even when it arrives later.
	h := []byte(binReq(0x55, "", 1))
	binary.BigEndian.PutUint32(h[8:], 100)
	n.feed(string(h))
	n.feed(strings.Repeat("q", 100) + binReq(memcache.OpNoop, "", 2))
	got := n.out()
	want := binResp(0x55, memcache.StatusUnknownCommand, 1, "Unknown command") + binResp(memcache.OpNoop, 0, 2, "")
	if got != want {
		t.Fatalf("replies %x, want %x", got, want)
	}
}

func TestUpstreamBroken(t *testing.T) {
	u := &Upstream{}
	if _, err := u.Feed([]byte("END\r\n")); err != ErrReply {
		t.Fatalf("a reply nobody asked for: %v", err)
	}
	s := &Session{}
	sends := s.Feed([]byte("get 1a\r\n"), keyRouter{})
	u = &Upstream{}
	u.Append(nil, sends[0])
	if _, err := u.Feed([]byte(binResp(memcache.OpNoop, 0, 1, ""))); err != ErrReply {
		t.Fatalf("binary on a text connection: %v", err)
	}
}

// hedge sends the read of the slot tok names to server srv as well, as
// the shell does when it has waited long enough.
func (n *net) hedge(tok Token, srv int, req string) {
	if !n.s.Unanswered(tok) {
		n.t.Fatalf("slot %d is not an unanswered read", tok.Seq)
	}
	h := n.s.Hedge(tok)
	k := [2]int{srv, 0}
	if n.ups[k] == nil {
		n.ups[k], n.sent[k] = &Upstream{}, &bytes.Buffer{}
	}
	n.sent[k].Write(n.ups[k].Append(nil, Send{Server: srv, Read: true, Stream: true, Buf: []byte(req), Token: h}))
}

// TestHedgedRead: a read hedged to a second server is answered by the
// first copy to reply; the other copy's reply is dropped, a failure of
// one copy leaves the other to answer, and only both failing gives
// SERVER_ERROR. A read with some reply already is not hedged.
func TestHedgedRead(t *testing.T) {
	n := newNet(t)
	n.feed("get 1a\r\nget 1b\r\nget 1c\r\nget 1d\r\n")
	tok := func(seq uint64) Token { return Token{S: n.s, Seq: seq} }
	n.hedge(tok(0), 2, "get 1a\r\n")
	n.hedge(tok(1), 2, "get 1b\r\n")
	n.hedge(tok(2), 2, "get 1c\r\n")
	if n.s.Unanswered(tok(0)) || n.s.Stats.Hedged != 3 {
		t.Fatalf("a hedged read is still unanswered, or %d hedges counted", n.s.Stats.Hedged)
	}
	// 1a: the hedge answers first; the primary's reply comes later.
	n.reply(2, false, "VALUE 1a 0 1\r\nH\r\nEND\r\n")
	n.outIs("1a", "VALUE 1a 0 1\r\nH\r\nEND\r\n")
	n.reply(1, false, "VALUE 1a 0 1\r\nP\r\nEND\r\n")
	// 1b: the primary's connection fails; the hedge answers.
	// 1c: both copies fail.
	for _, tk := range n.ups[[2]int{1, 0}].Abandon() {
		tk.S.Fail(tk)
	}
	n.outIs("a failed primary", "")
	n.reply(2, false, "VALUE 1b 0 1\r\nH\r\nEND\r\n")
	n.outIs("1b", "VALUE 1b 0 1\r\nH\r\nEND\r\n")
	for _, tk := range n.ups[[2]int{2, 0}].Abandon() {
		tk.S.Fail(tk)
	}
	n.outIs("1c and 1d", serverErrorText+serverErrorText)
	if n.s.Waiting() != 0 || n.s.Stats.Failed != 2 {
		t.Fatalf("%d slots left, %d failed", n.s.Waiting(), n.s.Stats.Failed)
	}
	n.feed("get 1e\r\n")
	n.reply(1, false, "VALUE 1e 0 3\r\nx")
	if n.s.Unanswered(tok(4)) {
		t.Fatal("a read whose reply has begun counts as unanswered")
	}
	n.reply(1, false, "yz\r\nEND\r\n")
	n.out()
	// 1f: the hedge's reply begins first; the primary's whole reply,
	// arriving in the middle of it, is dropped.
	n.feed("get 1f\r\n")
	n.hedge(tok(5), 2, "get 1f\r\n")
	n.reply(2, false, "VALUE 1f 0 4\r\nHH")
	n.reply(1, false, "VALUE 1f 0 4\r\nPPPP\r\nEND\r\n")
	n.reply(2, false, "HH\r\nEND\r\n")
	n.outIs("1f", "VALUE 1f 0 4\r\nHHHH\r\nEND\r\n")
}
