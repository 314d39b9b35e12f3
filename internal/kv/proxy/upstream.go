package proxy

import (
	"errors"

	"github.com/detour-overlay/detour/internal/kv/memcache"
)

// The sentinels an Upstream sends behind a quiet request, and the replies
// that end it.
var (
	textSentinel      = []byte("mn\r\n")
	textSentinelReply = "MN\r\n"
	binarySentinel    = binaryRequest(memcache.OpNoop, sentinelOpaque)
)

// sentinelOpaque marks the Upstream's own binary noops.
const sentinelOpaque = 0x64657472 // "detr"

// binaryRequest returns a binary request header without body.
func binaryRequest(opcode uint8, opaque uint32) []byte {
	h := make([]byte, memcache.HeaderLen)
	h[0], h[1] = memcache.MagicRequest, opcode
	h[12], h[13], h[14], h[15] = byte(opaque>>24), byte(opaque>>16), byte(opaque>>8), byte(opaque)
	return h
}

// MaxReply bounds one reply from a server (memcached's largest item and
// its header): a longer one is a broken connection.
const MaxReply = 2<<20 + 4096

// ErrReply is a server stream an Upstream cannot frame, or a reply when
// none was asked for.
var ErrReply = errors.New("proxy: unexpected reply from server")

// Delivery is a piece of a reply for one slot.
type Delivery struct {
	Token Token
	Piece []byte // valid until the next call of Feed
	Kind  memcache.ReplyKind
	// Done marks the last piece of the reply.
	Done bool
}

// waiting is a request an Upstream sent and whose reply it expects.
type waiting struct {
	tok    Token
	quiet  bool
	stream bool
}

// Upstream is the state of one pooled connection to a server: the
// requests waiting for a reply, in the order they were written, and the
// reply bytes not yet framed. It is not safe for concurrent use.
type Upstream struct {
	Binary bool
	wait   []waiting // wait[first:] are waiting, in the order sent
	first  int
	in     []byte
	inOff  int
	// passed is how many bytes of the reply at in[inOff:] were already
	// handed out as pieces before it was complete.
	passed int
	dels   []Delivery
}

// Append appends to dst the bytes to write for a request (the request,
// and behind a quiet one the sentinel), records that its reply is
// expected, and returns dst. The caller writes the bytes in the order of
// its Append calls.
func (u *Upstream) Append(dst []byte, snd Send) []byte {
	dst = append(dst, snd.Buf...)
	if snd.Quiet {
		if u.Binary {
			dst = append(dst, binarySentinel...)
		} else {
			dst = append(dst, textSentinel...)
		}
	}
	u.wait = append(u.wait, waiting{tok: snd.Token, quiet: snd.Quiet, stream: snd.Stream})
	return dst
}

// Waiting returns the number of requests waiting for their reply.
func (u *Upstream) Waiting() int { return len(u.wait) - u.first }

// Buffered returns the bytes received that neither complete a reply nor
// were handed out as a piece of one.
func (u *Upstream) Buffered() int { return len(u.in) - u.inOff - u.passed }

// Feed takes bytes from the server and returns the pieces of reply they
// complete. A reply still incomplete to a request sent to Stream is
// handed out, as a piece that is not Done, as far as it has surely
// arrived (memcache.ReplyStreamable: its whole lines and the data of its
// blocks so far), so that a large value flows on to the client while
// the server is still sending it; its last piece is Done and holds its
// last line. ErrReply means the stream is broken: the shell closes the
// connection and calls Abandon.
func (u *Upstream) Feed(data []byte) ([]Delivery, error) {
	u.dels = u.dels[:0]
	if u.inOff > 0 {
		n := copy(u.in, u.in[u.inOff:])
		u.in, u.inOff = u.in[:n], 0
	}
	u.in = append(u.in, data...)
	for u.inOff < len(u.in) {
		buf := u.in[u.inOff:]
		n, kind, err := memcache.ReplyEnd(buf)
		if err == memcache.ErrIncomplete {
			if len(buf) > MaxReply {
				return u.dels, ErrReply
			}
			u.pass(buf)
			break
		}
		if err != nil || u.Waiting() == 0 || !u.familyOK(buf) {
			return u.dels, ErrReply
		}
		u.inOff += n
		w := u.wait[u.first]
		reply := buf[u.passed:n]
		u.passed = 0
		if w.quiet && u.isSentinel(reply, kind) {
			u.dels = append(u.dels, Delivery{Token: w.tok, Done: true})
			u.pop()
			continue
		}
		u.dels = append(u.dels, Delivery{Token: w.tok, Piece: reply, Kind: kind, Done: !w.quiet})
		if !w.quiet {
			u.pop()
		}
	}
	return u.dels, nil
}

// pass hands out what has surely arrived of the incomplete reply at the
// head of buf and was not handed out yet, as a piece that is not Done,
// when its request was sent to Stream.
func (u *Upstream) pass(buf []byte) {
	if u.Waiting() == 0 || !u.wait[u.first].stream || !u.familyOK(buf) {
		return // Feed refuses the stream once it frames the reply
	}
	n, kind := memcache.ReplyStreamable(buf)
	if n <= u.passed {
		return
	}
	u.dels = append(u.dels, Delivery{Token: u.wait[u.first].tok, Piece: buf[u.passed:n], Kind: kind})
	u.passed = n
}

// familyOK reports whether a reply is of the connection's protocol.
func (u *Upstream) familyOK(buf []byte) bool {
	return (buf[0] == memcache.MagicResponse) == u.Binary
}

// isSentinel reports whether reply answers the Upstream's sentinel.
func (u *Upstream) isSentinel(reply []byte, kind memcache.ReplyKind) bool {
	if u.Binary {
		return kind == memcache.ReplyBinary && reply[1] == memcache.OpNoop
	}
	return kind == memcache.ReplyLine && string(reply) == textSentinelReply
}

func (u *Upstream) pop() {
	u.wait[u.first] = waiting{}
	u.first++
	switch {
	case u.first == len(u.wait):
		u.wait, u.first = u.wait[:0], 0
	case u.first >= 64 && u.first >= len(u.wait)/2:
		n := copy(u.wait, u.wait[u.first:])
		clear(u.wait[n:])
		u.wait, u.first = u.wait[:n], 0
	}
}

// Abandon forgets every request waiting on the connection and returns
// their tokens, which the shell fails (Session.Fail).
func (u *Upstream) Abandon() []Token {
	toks := make([]Token, 0, u.Waiting())
	for _, w := range u.wait[u.first:] {
		toks = append(toks, w.tok)
	}
	u.wait, u.first = nil, 0
	u.in, u.inOff, u.passed = nil, 0, 0
	return toks
}
