package memcache

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// ReplyKind tells how a reply is framed.
type ReplyKind uint8

// The reply framings.
const (
	// ReplyLine is one line: STORED, NOT_FOUND, DELETED, TOUCHED, a number,
	// END (a get that found nothing), VERSION, ERROR, CLIENT_ERROR,
	// SERVER_ERROR, and the meta replies without a value (HD, NF, NS, EX,
	// EN, MN, ME).
	ReplyLine ReplyKind = iota + 1
	// ReplyValues is a get's reply: VALUE lines, each followed by its data
	// block, and END.
	ReplyValues
	// ReplyMetaValue is a meta reply with a value: "VA <size> <flags>*"
	// and a data block.
	ReplyMetaValue
	// ReplyBinary is a binary reply: a 24-byte header and its body.
	ReplyBinary
)

// ErrBadReply is a server reply ReplyEnd cannot frame.
var ErrBadReply = errors.New("memcache: malformed reply")

// ReplyEnd returns the length and framing of the first complete reply in
// buf, a stream of replies from one server, so that a TCP terminator can
// hand pipelined replies back in request order. It returns ErrIncomplete
// when buf holds only part of the reply. A binary quiet request (getq,
// setq, …) gets no reply when it succeeds; the terminator that sent one
// must count on that, as memcached's clients do with a trailing noop.
func ReplyEnd(buf []byte) (int, ReplyKind, error) {
	if len(buf) == 0 {
		return 0, 0, ErrIncomplete
	}
	if buf[0] == MagicResponse {
		if len(buf) < HeaderLen {
			return 0, 0, ErrIncomplete
		}
		n := uint64(HeaderLen) + uint64(binary.BigEndian.Uint32(buf[8:]))
		if uint64(len(buf)) < n {
			return 0, 0, ErrIncomplete
		}
		return int(n), ReplyBinary, nil
	}
	line, next, err := replyLine(buf, 0)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case bytes.HasPrefix(line, []byte("VALUE ")):
		return valuesEnd(buf, line, next)
	case bytes.HasPrefix(line, []byte("VA ")):
		size, ok := field(line, 1)
		if !ok {
			return 0, 0, ErrBadReply
		}
		end, err := dataEnd(buf, next, size)
		return end, ReplyMetaValue, err
	}
	return next, ReplyLine, nil
}

// ReplyStreamable returns how many leading bytes of buf, the start of a
// reply that ReplyEnd found incomplete, surely belong to that reply and
// come before its last line, so that a terminator may pass them on
// before the rest arrives. Lines (VALUE, VA, END) count only once whole;
// a data block or a binary body counts as far as it has arrived:
//
//	VALUE k 0 1048576\r\n | 700 KB of the block… | (the rest, \r\n, END\r\n)
//	└──────── streamable ────────────────────┘
//
// The bytes it counts never include a reply's last line, so the piece
// that completes a get's reply always holds its whole "END\r\n". It
// returns 0 for a reply without a data block (a line) or a prefix it
// cannot frame, and the reply's framing otherwise.
func ReplyStreamable(buf []byte) (int, ReplyKind) {
	if len(buf) == 0 {
		return 0, 0
	}
	if buf[0] == MagicResponse {
		if len(buf) < HeaderLen {
			return 0, 0
		}
		n := uint64(HeaderLen) + uint64(binary.BigEndian.Uint32(buf[8:]))
		return int(min(n-1, uint64(len(buf)))), ReplyBinary
	}
	line, next, err := replyLine(buf, 0)
	switch {
	case err != nil:
		return 0, 0
	case bytes.HasPrefix(line, []byte("VA ")):
		return streamBlock(buf, line, next, 1), ReplyMetaValue
	case !bytes.HasPrefix(line, []byte("VALUE ")):
		return 0, 0
	}
	return streamValues(buf, line, next), ReplyValues
}

// streamValues returns how far the VALUE lines and data blocks from the
// start of buf have arrived, short of a line that has not.
func streamValues(buf, line []byte, next int) int {
	off := 0
	for {
		end := streamBlock(buf, line, next, 3)
		switch {
		case end == 0:
			return off // a VALUE line ReplyEnd will refuse
		case end == len(buf):
			return end
		}
		off = end
		var err error
		if line, next, err = replyLine(buf, off); err != nil || !bytes.HasPrefix(line, []byte("VALUE ")) {
			return off
		}
	}
}

// streamBlock returns the offset after the data block of a value line
// (its size in field sizeField) that ends at next, as far as buf holds
// it, or 0 when the line has no size.
func streamBlock(buf, line []byte, next, sizeField int) int {
	size, ok := field(line, sizeField)
	if !ok {
		return 0
	}
	if size+2 >= uint64(len(buf)-next) {
		return len(buf)
	}
	return next + int(size) + 2
}

// replyLine returns the line starting at off without its "\r\n" and the
// offset after it.
func replyLine(buf []byte, off int) ([]byte, int, error) {
	i := bytes.IndexByte(buf[off:], '\n')
	if i < 0 {
		return nil, 0, ErrIncomplete
	}
	line := buf[off : off+i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, off + i + 1, nil
}

// valuesEnd follows VALUE lines and their data blocks to the END line.
func valuesEnd(buf, line []byte, next int) (int, ReplyKind, error) {
	for {
		if string(line) == "END" {
			return next, ReplyValues, nil
		}
		if !bytes.HasPrefix(line, []byte("VALUE ")) {
			return 0, 0, ErrBadReply
		}
		size, ok := field(line, 3)
		if !ok {
			return 0, 0, ErrBadReply
		}
		end, err := dataEnd(buf, next, size)
		if err != nil {
			return 0, 0, err
		}
		line, next, err = replyLine(buf, end)
		if err != nil {
			return 0, 0, err
		}
	}
}

// dataEnd returns the offset after a data block of size bytes and its
// "\r\n" that starts at off.
func dataEnd(buf []byte, off int, size uint64) (int, error) {
	if size > uint64(len(buf)) {
		return 0, ErrIncomplete
	}
	end := off + int(size) + 2
	if end > len(buf) {
		return 0, ErrIncomplete
	}
	if buf[end-2] != '\r' || buf[end-1] != '\n' {
		return 0, ErrBadReply
	}
	return end, nil
}

// field reads the unsigned decimal in space-separated field i of line.
func field(line []byte, i int) (uint64, bool) {
	t, rest := nextToken(line)
	for ; i > 0 && t != nil; i-- {
		t, rest = nextToken(rest)
	}
	if t == nil || len(t) > 19 {
		return 0, false
	}
	var v uint64
	for _, c := range t {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// TrimEnd returns a get's reply (ReplyValues) without its final "END\r\n",
// so that the replies of a split multi-key get can be joined under one
// END.
func TrimEnd(reply []byte) []byte {
	if bytes.HasSuffix(reply, []byte("END\r\n")) {
		return reply[:len(reply)-5]
	}
	return reply
}
