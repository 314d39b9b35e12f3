package proxy

import (
	"encoding/binary"

	"github.com/detour-overlay/detour/internal/kv/memcache"
)

// Bounds of a Session.
const (
	// MaxPending is how many requests of one client may wait for their
	// replies; past it the session reads no more.
	MaxPending = 256
	// MaxOut is how many bytes of replies may wait, for the client to
	// read them or behind an earlier reply, before the session reads no
	// more requests (those already sent may still add theirs).
	MaxOut = 1 << 20
	// MaxRequest is the longest request a session buffers: memcached's
	// default largest item (1 MB) and room for its command line.
	MaxRequest = 1<<20 + 4096
)

// Router gives the server a key goes to now.
type Router interface {
	// Owner returns the index of the server key goes to (its ring owner,
	// or the failover when the owner is down), or -1 when none is usable.
	Owner(key []byte) int
	// Any returns a usable server for a request without a key, or -1.
	Any() int
}

// Replicated is implemented by a Router whose servers hold copies of each
// other's keys: a request that writes goes to every usable replica of the
// server Owner gave, and the client gets that server's reply.
type Replicated interface {
	// Replicas appends to dst the other usable replicas of server o.
	Replicas(o int, dst []int) []int
}

// Reader is implemented by a Router whose shards hold copies of their
// keys on several servers and which picks, for each read, the copy to
// read (issue 18): a read (a request with keys that changes nothing)
// goes where Read says instead of to Owner's server.
type Reader interface {
	// Read returns the index of the server a read of key goes to now, or
	// -1 when none is usable.
	Read(key []byte) int
}

// Send is one request (or a server's share of a split get) to write to a
// server's connection.
type Send struct {
	Server int
	// Binary is the protocol family of the connection it must go on:
	// binary, or text (ASCII and meta).
	Binary bool
	// Quiet is set when the request may get no reply: the Upstream sends
	// a sentinel behind it.
	Quiet bool
	// Read marks a request with keys that changes nothing (a get): the
	// shell may time its reply for the Reader.
	Read bool
	// Stream marks a request whose reply is the client's as it comes
	// (one server's, not merged with others): the Upstream hands it out
	// piece by piece before it is whole.
	Stream bool
	// Buf is the request, valid until the next call of Feed.
	Buf   []byte
	Token Token
}

// Token names the slot a reply belongs to, and which of its parts.
type Token struct {
	S    *Session
	Seq  uint64
	Part int
}

// slot is one request waiting for its reply.
type slot struct {
	parts  int    // parts still waiting for a server's reply
	buf    []byte // the reply so far
	errBuf []byte // a split get: the first part that was not VALUE…END
	merge  bool   // a split get: one END at the end
	fanout bool   // a write to replicas: only part 0's reply is the client's
	close  bool   // close the connection once this reply has left
	proto  memcache.Protocol
	opcode uint8
	opaque uint32
	quiet  bool
	failed bool
	// streamed is set once part of the reply has gone to the client
	// before all of it arrived: a failure can then only close the
	// connection.
	streamed bool
	answered bool // some reply bytes came for it
	// race is set for a read hedged to a second server (Hedge): the
	// first copy to answer, winner-1, is the client's.
	race   bool
	winner int
}

// Session is the state of one client connection. It is not safe for
// concurrent use; the shell serialises its calls.
type Session struct {
	in      []byte // client bytes not yet parsed (from inOff)
	inOff   int
	skip    uint64 // bytes still to swallow after an error (memcached's swallow)
	slots   []slot // slots[first:] wait, in request order
	first   int
	head    uint64 // the sequence number of slots[first]
	out     []byte // replies ready for the client
	closing bool   // a request closes the connection: parse no more
	closed  bool   // the last reply before closing is in out
	full    bool   // Feed stopped at MaxPending with bytes left to parse
	held    int    // reply bytes held in slots behind an earlier one
	req     memcache.Request
	split   memcache.Splitter
	scratch []byte
	sends   []Send
	reps    []int
	// Stats are the session's counters.
	Stats Stats
	// Tag is the shell's own, for finding its connection from a Token.
	Tag any
}

// Stats are a session's counters.
type Stats struct {
	Requests uint64 // requests parsed
	Split    uint64 // multi-key gets split over several servers
	Errors   uint64 // malformed requests answered with memcached's error
	Local    uint64 // requests answered by the session (mn, noop, quit)
	NoServer uint64 // requests with no usable server
	Failed   uint64 // replies lost with a server connection
	Hedged   uint64 // reads hedged to a second server
}

// Feed appends data from the client and parses every complete request it
// can take (at most MaxPending waiting), returning what to send. The
// returned slice and the buffers it points to are valid until the next
// call. Feed(nil, r) parses what an earlier call left when the session
// was full.
func (s *Session) Feed(data []byte, r Router) []Send {
	s.sends = s.sends[:0]
	s.scratch = s.scratch[:0]
	if s.inOff > 0 {
		n := copy(s.in, s.in[s.inOff:])
		s.in, s.inOff = s.in[:n], 0
	}
	if s.skip > 0 {
		n := min(s.skip, uint64(len(data)))
		data, s.skip = data[n:], s.skip-n
	}
	s.in = append(s.in, data...)
	for !s.closing && s.Waiting() < MaxPending && s.inOff < len(s.in) {
		if !s.next(r) {
			break
		}
	}
	s.full = !s.closing && s.Waiting() >= MaxPending && s.inOff < len(s.in)
	s.flush()
	return s.sends
}

// next parses and dispatches the request at s.inOff; it reports whether
// one was complete.
func (s *Session) next(r Router) bool {
	buf := s.in[s.inOff:]
	q := &s.req
	err := memcache.Parse(buf, q)
	if err == memcache.ErrIncomplete {
		if len(buf) > MaxRequest {
			s.closeNow()
		}
		return false
	}
	if err != nil {
		s.fail(err)
		return true
	}
	s.Stats.Requests++
	s.inOff += q.Len
	sl := slot{proto: q.Protocol, opcode: q.Opcode, opaque: q.Opaque, quiet: q.Quiet}
	switch q.Command {
	case memcache.CmdNoop:
		s.Stats.Local++
		sl.buf = binaryReply(sl.buf, q.Opcode, q.Opaque, 0, nil)
		s.push(sl)
		return true
	case memcache.CmdMetaNoop:
		s.Stats.Local++
		sl.buf = append(sl.buf, "MN\r\n"...)
		s.push(sl)
		return true
	case memcache.CmdQuit:
		s.Stats.Local++
		if q.Protocol == memcache.Binary && !q.Quiet {
			sl.buf = binaryReply(sl.buf, q.Opcode, q.Opaque, 0, nil)
		}
		sl.close = true
		s.closing = true
		s.push(sl)
		return true
	}
	req := buf[:q.Len]
	if q.NumKeys > 1 && q.Protocol == memcache.ASCII {
		return s.splitGet(q, sl, r)
	}
	o := -1
	read := q.NumKeys > 0 && !q.IsWrite()
	if q.NumKeys == 0 {
		o = r.Any()
	} else {
		owner := r.Owner
		if rd, ok := r.(Reader); ok && read {
			owner = rd.Read
		}
		var err error
		if o, err = s.split.Owner(q, owner); err != nil {
			s.reject(err) // a base64 key that does not decode
			return true
		}
	}
	if o < 0 {
		s.noServer(sl)
		return true
	}
	s.reps = s.reps[:0]
	if rr, ok := r.(Replicated); ok && q.IsWrite() {
		s.reps = rr.Replicas(o, s.reps)
	}
	sl.parts, sl.fanout = 1+len(s.reps), len(s.reps) > 0
	tok := s.push(sl)
	snd := Send{Server: o, Binary: q.Protocol == memcache.Binary, Quiet: q.Quiet, Read: read, Stream: !sl.fanout, Buf: req, Token: tok}
	s.sends = append(s.sends, snd)
	for i, rep := range s.reps {
		snd.Server, snd.Token.Part = rep, i+1
		s.sends = append(s.sends, snd)
	}
	return true
}

// splitGet sends a multi-key ASCII get to the owners of its keys.
func (s *Session) splitGet(q *memcache.Request, sl slot, r Router) bool {
	need := 2*len(q.Line) + 16
	if cap(s.scratch)-len(s.scratch) < need {
		s.scratch = make([]byte, 0, max(need, 2*cap(s.scratch)))
	}
	var parts []memcache.Part
	var err error
	read := !q.IsWrite() // gat and gats touch
	owner := r.Owner
	if rd, ok := r.(Reader); ok && read {
		owner = rd.Read
	}
	for {
		dst := s.scratch[len(s.scratch):cap(s.scratch)]
		parts, err = s.split.SplitGet(q, owner, dst)
		if err != memcache.ErrShortBuffer || cap(s.scratch) > 64*MaxRequest {
			break
		}
		// Each part repeats the command and its exptime: more room.
		s.scratch = make([]byte, 0, 2*cap(s.scratch)+need)
	}
	if err != nil {
		s.reject(err)
		return true
	}
	for _, p := range parts {
		if p.Server < 0 {
			s.noServer(sl)
			return true
		}
	}
	used := 0
	for _, p := range parts {
		used += len(p.Buf)
	}
	s.scratch = s.scratch[:len(s.scratch)+used]
	if len(parts) == 1 {
		sl.parts = 1
		tok := s.push(sl)
		s.sends = append(s.sends, Send{Server: parts[0].Server, Read: read, Stream: true, Buf: parts[0].Buf, Token: tok})
		return true
	}
	s.Stats.Split++
	sl.parts, sl.merge = len(parts), true
	tok := s.push(sl)
	for _, p := range parts {
		s.sends = append(s.sends, Send{Server: p.Server, Read: read, Buf: p.Buf, Token: tok})
	}
	return true
}

// fail answers a malformed request with memcached's error, consuming what
// memcached consumes, and closes the connection where memcached does.
func (s *Session) fail(err error) {
	me, ok := err.(*memcache.Error)
	if !ok {
		me = memcache.ErrUnknownCommand
	}
	q := &s.req
	s.Stats.Errors++
	sl := slot{proto: q.Protocol, close: me.Close}
	sl.buf = me.AppendReply(sl.buf, q)
	if me.Close || q.Len <= 0 {
		sl.close = true
		s.closing = true
	} else if rest := len(s.in) - s.inOff; q.Len > rest {
		s.skip, s.inOff = uint64(q.Len-rest), len(s.in)
	} else {
		s.inOff += q.Len
	}
	s.push(sl)
}

// reject answers a request parsed and consumed whole that cannot be
// routed, with memcached's error for err.
func (s *Session) reject(err error) {
	me, ok := err.(*memcache.Error)
	if !ok {
		me = memcache.ErrUnknownCommand
	}
	s.Stats.Errors++
	sl := slot{proto: s.req.Protocol}
	sl.buf = me.AppendReply(sl.buf, &s.req)
	s.push(sl)
}

// noServer answers a request whose key has no usable server.
func (s *Session) noServer(sl slot) {
	s.Stats.NoServer++
	sl.parts = 0
	sl.buf = serverError(sl.buf, &sl)
	s.push(sl)
}

// closeNow stops the session at once: the earlier replies still leave.
func (s *Session) closeNow() {
	s.closing = true
	s.push(slot{close: true})
}

// End ends the session when the client has closed its side: the replies
// to the requests already parsed still leave, then Closed reports true.
func (s *Session) End() {
	if !s.closing {
		s.closeNow()
		s.flush()
	}
}

// push appends a slot and returns its token.
func (s *Session) push(sl slot) Token {
	s.slots = append(s.slots, sl)
	return Token{S: s, Seq: s.head + uint64(s.Waiting()-1)}
}

// Reply hands the session a piece of a server's reply for the slot tok
// names: kind is how memcache.ReplyEnd framed it, done marks the last
// piece of that server's share. A reply for a slot the session no longer
// has is ignored.
func (s *Session) Reply(tok Token, piece []byte, kind memcache.ReplyKind, done bool) {
	sl := s.slot(tok)
	if sl == nil || sl.parts == 0 {
		return
	}
	sl.answered = true
	if sl.race {
		if sl.winner == 0 {
			sl.winner = tok.Part + 1
		}
		if sl.winner != tok.Part+1 {
			return // the slower copy of a hedged read
		}
		if done {
			sl.parts = 1 // the other copy's reply is not awaited
		}
	}
	switch {
	case sl.fanout && tok.Part != 0:
		// Another replica's reply to a write: counted, not the client's.
	case sl.streams() && sl == &s.slots[s.first]:
		// The first slot waiting: its reply goes out as it comes.
		if !s.closed {
			s.out = append(s.out, piece...)
			sl.streamed = sl.streamed || !done
		}
	case !sl.merge:
		sl.buf = append(sl.buf, piece...)
		s.held += len(piece)
	case kind == memcache.ReplyValues || string(piece) == "END\r\n":
		// Only a server's last piece holds its END (memcache.ReplyStreamable).
		v := piece
		if done {
			v = memcache.TrimEnd(piece)
		}
		sl.buf = append(sl.buf, v...)
		s.held += len(v)
	case sl.errBuf == nil:
		sl.errBuf = append([]byte{}, piece...)
		s.held += len(piece)
	}
	if done {
		sl.parts--
		s.flush()
	}
}

// Fail answers the slot tok names with SERVER_ERROR: the server
// connection its request went on is lost.
func (s *Session) Fail(tok Token) {
	sl := s.slot(tok)
	if sl == nil || sl.parts == 0 {
		return
	}
	if sl.race {
		switch sl.winner {
		case 0:
			if sl.parts > 1 {
				sl.parts-- // the other copy may still answer
				return
			}
		case tok.Part + 1:
			sl.parts = 1
		default:
			return // the slower copy's connection
		}
	}
	s.Stats.Failed++
	sl.failed = true
	sl.parts--
	s.flush()
}

// Unanswered reports whether the slot tok names waits for a read sent to
// one server, of which nothing has come yet: the shell may hedge it.
func (s *Session) Unanswered(tok Token) bool {
	sl := s.slot(tok)
	return sl != nil && tok.Part == 0 && sl.parts == 1 && sl.streams() && !sl.answered && !sl.race
}

// Hedge makes the slot tok names (Unanswered) wait for either of two
// copies of its read, tok's and the one with the token it returns: the
// first copy to answer is the client's, the other's reply is dropped,
// and the slot fails only if both do.
func (s *Session) Hedge(tok Token) Token {
	sl := s.slot(tok)
	if sl == nil || sl.race {
		panic("proxy: Hedge of a slot that is not Unanswered")
	}
	s.Stats.Hedged++
	sl.race, sl.parts = true, 2
	tok.Part = 1
	return tok
}

// slot returns the slot of tok, or nil.
func (s *Session) slot(tok Token) *slot {
	if tok.S != s || tok.Seq < s.head || tok.Seq-s.head >= uint64(s.Waiting()) {
		return nil
	}
	return &s.slots[s.first+int(tok.Seq-s.head)]
}

// streams reports whether the slot's reply may go to the client piece by
// piece once it is the first waiting: it is one server's reply, as it
// comes.
func (sl *slot) streams() bool { return !sl.merge && !sl.fanout }

// flush moves the complete replies at the head of the queue to out, and
// what has arrived of the next one when it streams.
func (s *Session) flush() {
	for s.Waiting() > 0 && s.slots[s.first].parts == 0 && !s.closed {
		sl := &s.slots[s.first]
		switch {
		case sl.failed && sl.streamed:
			s.closed = true // the client has part of a reply: cut it off
		case sl.failed:
			s.out = serverError(s.out, sl)
		case sl.merge && sl.errBuf != nil:
			s.out = append(s.out, sl.errBuf...)
		case sl.merge:
			s.out = append(append(s.out, sl.buf...), "END\r\n"...)
		default:
			s.out = append(s.out, sl.buf...)
		}
		if sl.close {
			s.closed = true
		}
		s.held -= len(sl.buf) + len(sl.errBuf)
		s.slots[s.first] = slot{}
		s.first++
		s.head++
	}
	if s.Waiting() > 0 && !s.closed {
		if sl := &s.slots[s.first]; sl.streams() && len(sl.buf) > 0 {
			s.out = append(s.out, sl.buf...)
			s.held -= len(sl.buf)
			sl.buf, sl.streamed = sl.buf[:0], true
		}
	}
	switch {
	case s.first == len(s.slots):
		s.slots, s.first = s.slots[:0], 0
	case s.first >= 64 && s.first >= len(s.slots)/2:
		n := copy(s.slots, s.slots[s.first:])
		clear(s.slots[n:])
		s.slots, s.first = s.slots[:n], 0
	}
}

// Output returns the replies ready for the client and forgets them; the
// slice is valid until the next call of any method.
func (s *Session) Output() []byte {
	o := s.out
	s.out = s.out[:0]
	return o
}

// Pending returns the number of bytes ready for the client.
func (s *Session) Pending() int { return len(s.out) }

// Waiting returns the number of requests waiting for a reply.
func (s *Session) Waiting() int { return len(s.slots) - s.first }

// Closed reports whether the connection is to be closed once Output has
// been written.
func (s *Session) Closed() bool { return s.closed }

// WantInput reports whether the session takes more bytes from the
// client: it is not closing, has room for more requests, and the client
// is reading its replies.
func (s *Session) WantInput() bool {
	return !s.closing && s.Waiting() < MaxPending && len(s.out)+s.held < MaxOut
}

// Closing reports whether a request (quit, or an error memcached closes
// the connection for) ends the session: it takes no more input.
func (s *Session) Closing() bool { return s.closing }

// Backlog reports whether bytes already fed wait to be parsed because
// the session was full (not because they end in a partial request): the
// shell calls Feed(nil, r) once WantInput.
func (s *Session) Backlog() bool { return s.full }

// Binary statuses of the replies a session makes itself.
const (
	statusTempFailure = 0x0086
	tempFailureText   = "Temporary failure"
	serverErrorText   = "SERVER_ERROR server unavailable\r\n"
)

// serverError appends the reply to a request whose server is unavailable:
// SERVER_ERROR, or binary status 0x0086; nothing for an ASCII noreply.
func serverError(dst []byte, sl *slot) []byte {
	switch {
	case sl.proto == memcache.Binary:
		return binaryReply(dst, sl.opcode, sl.opaque, statusTempFailure, []byte(tempFailureText))
	case sl.proto == memcache.ASCII && sl.quiet:
		return dst
	}
	return append(dst, serverErrorText...)
}

// binaryReply appends a binary reply with status and body:
//
//	0x81 | opcode | key len 0 | extras 0 | type 0 | status | body len | opaque | cas 0
func binaryReply(dst []byte, opcode uint8, opaque uint32, status uint16, body []byte) []byte {
	var h [memcache.HeaderLen]byte
	h[0], h[1] = memcache.MagicResponse, opcode
	binary.BigEndian.PutUint16(h[6:], status)
	binary.BigEndian.PutUint32(h[8:], uint32(len(body)))
	binary.BigEndian.PutUint32(h[12:], opaque)
	return append(append(dst, h[:]...), body...)
}
