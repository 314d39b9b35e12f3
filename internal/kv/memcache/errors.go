package memcache

import "encoding/binary"

// Error is a malformed or unroutable request, with what memcached 1.6
// answers to it.
type Error struct {
	// Text is the ASCII or meta error line without "\r\n"; empty when
	// memcached answers nothing.
	Text string
	// Status is the binary reply status (0x0081 unknown command, 0x0004
	// invalid arguments), 0 when the error is not a binary one.
	Status uint16
	// Close is set when memcached closes the connection after the reply
	// (or without one).
	Close bool
	// Silent is set when memcached sends nothing: a datagram it ignores,
	// a connection it closes without a word, or more bytes it waits for.
	Silent bool
	// what describes the error for logs and counters.
	what string
}

// Error returns the reply memcached sends, or a description when it sends
// none.
func (e *Error) Error() string {
	if e.Text != "" {
		return "memcache: " + e.Text
	}
	return "memcache: " + e.what
}

// Name returns a short name for counters.
func (e *Error) Name() string { return e.what }

// binaryMessages are the texts memcached's write_bin_error puts in the
// body of a binary error reply.
var binaryMessages = map[uint16]string{
	StatusUnknownCommand: "Unknown command",
	StatusInvalid:        "Invalid arguments",
}

// The binary statuses a request can earn (protocol_binary.h).
const (
	StatusInvalid        uint16 = 0x0004
	StatusUnknownCommand uint16 = 0x0081
)

// Errors of the framing, not memcached's replies: the request is not all
// there, or the datagram is one memcached ignores.
var (
	// ErrIncomplete means the buffer ends before the request does: a TCP
	// reader waits for more, a UDP datagram holding it is truncated.
	ErrIncomplete = &Error{Silent: true, what: "incomplete request"}
	// ErrShortFrame is a datagram of 8 bytes or fewer.
	ErrShortFrame = &Error{Silent: true, what: "short udp frame"}
	// ErrSpansDatagrams is a request whose frame header announces more
	// than one datagram; memcached drops it.
	ErrSpansDatagrams = &Error{Silent: true, what: "request spans datagrams"}
)

// ASCII and meta errors, with memcached's texts.
var (
	ErrUnknownCommand = &Error{Text: "ERROR", what: "unknown command"}
	ErrBadFormat      = &Error{Text: "CLIENT_ERROR bad command line format", what: "bad command line format"}
	ErrBadDataChunk   = &Error{Text: "CLIENT_ERROR bad data chunk", what: "bad data chunk"}
	ErrInvalidExptime = &Error{Text: "CLIENT_ERROR invalid exptime argument", what: "invalid exptime"}
	ErrInvalidDelta   = &Error{Text: "CLIENT_ERROR invalid numeric delta argument", what: "invalid delta"}
	ErrDeleteUsage    = &Error{Text: "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]", what: "bad delete"}
	// ErrLineTooLong is 2048 bytes without a line end that do not start a
	// get or gets: memcached closes the connection.
	ErrLineTooLong = &Error{Silent: true, Close: true, what: "line too long"}
	// ErrHTTP is a line whose last token starts with "HTTP/": memcached
	// closes the connection without a reply.
	ErrHTTP = &Error{Silent: true, Close: true, what: "http request"}

	ErrDuplicateFlag          = &Error{Text: "CLIENT_ERROR duplicate flag", what: "duplicate meta flag"}
	ErrInvalidFlag            = &Error{Text: "CLIENT_ERROR invalid flag", what: "invalid meta flag"}
	ErrDecodingKey            = &Error{Text: "CLIENT_ERROR error decoding key", what: "bad base64 key"}
	ErrBadToken               = &Error{Text: "CLIENT_ERROR bad token in command line format", what: "bad meta token"}
	ErrModeLength             = &Error{Text: "CLIENT_ERROR incorrect length for M token", what: "bad meta mode"}
	ErrInitialValue           = &Error{Text: "CLIENT_ERROR invalid numeric initial value", what: "bad meta initial value"}
	ErrDeltaValue             = &Error{Text: "CLIENT_ERROR invalid numeric delta value", what: "bad meta delta"}
	ErrInvalidOrDuplicateFlag = &Error{Text: "CLIENT_ERROR invalid or duplicate flag", what: "invalid or duplicate meta flag"}
	// ErrGetFlagsTooLong is mg's text, ErrFlagsTooLong that of ms, md
	// and ma.
	ErrGetFlagsTooLong = &Error{Text: "CLIENT_ERROR options flags are too long", what: "too many meta flags"}
	ErrFlagsTooLong    = &Error{Text: "CLIENT_ERROR options flags too long", what: "too many meta flags"}
)

// Binary errors.
var (
	// ErrBinaryUnknownCommand is an opcode memcached does not know.
	ErrBinaryUnknownCommand = &Error{Status: StatusUnknownCommand, what: "unknown binary opcode"}
	// ErrBinaryLengths is a key and extras longer than the body; memcached
	// answers "unknown command" and closes the connection.
	ErrBinaryLengths = &Error{Status: StatusUnknownCommand, Close: true, what: "binary lengths disagree"}
	// ErrBinaryInvalid is a key over 250 bytes or lengths that do not fit
	// the opcode; memcached answers "invalid arguments" and closes.
	ErrBinaryInvalid = &Error{Status: StatusInvalid, Close: true, what: "invalid binary arguments"}
)

// ErrUnroutable is a valid request that names no key and is not one a
// router answers for the pool (stats, flush_all, verbosity, SASL, …):
// memcached would answer it, but a pool has no single server to ask. It
// gets "ERROR" or binary "unknown command".
var ErrUnroutable = &Error{Text: "ERROR", Status: StatusUnknownCommand, what: "unroutable command"}

// AppendReply appends to dst the reply memcached sends for err, a
// malformed request of protocol p (with r's binary opcode and opaque when
// p is Binary), and returns it. Nothing is appended when memcached sends
// nothing: a silent error, or an ASCII request marked noreply (memcached's
// out_string skips it; meta errors go through out_errstring, which does
// not, and binary errors are always sent).
func (e *Error) AppendReply(dst []byte, r *Request) []byte {
	if e.Silent {
		return dst
	}
	if r.Protocol == Binary {
		if e.Status == 0 {
			return dst
		}
		msg := binaryMessages[e.Status]
		var h [HeaderLen]byte
		h[0] = MagicResponse
		h[1] = r.Opcode
		binary.BigEndian.PutUint16(h[6:], e.Status)
		binary.BigEndian.PutUint32(h[8:], uint32(len(msg)))
		binary.BigEndian.PutUint32(h[12:], r.Opaque)
		dst = append(dst, h[:]...)
		return append(dst, msg...)
	}
	if (r.Protocol == ASCII && r.Quiet) || e.Text == "" {
		return dst
	}
	dst = append(dst, e.Text...)
	return append(dst, '\r', '\n')
}
