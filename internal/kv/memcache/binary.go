package memcache

import "encoding/binary"

// Binary protocol constants.
const (
	MagicRequest  = 0x80
	MagicResponse = 0x81
	// HeaderLen is the length of a binary request or reply header.
	HeaderLen = 24
)

// Binary opcodes (protocol_binary.h).
const (
	OpGet       = 0x00
	OpSet       = 0x01
	OpAdd       = 0x02
	OpReplace   = 0x03
	OpDelete    = 0x04
	OpIncrement = 0x05
	OpDecrement = 0x06
	OpQuit      = 0x07
	OpFlush     = 0x08
	OpGetQ      = 0x09
	OpNoop      = 0x0a
	OpVersion   = 0x0b
	OpGetK      = 0x0c
	OpGetKQ     = 0x0d
	OpAppend    = 0x0e
	OpPrepend   = 0x0f
	OpStat      = 0x10
	OpSetQ      = 0x11
	OpAddQ      = 0x12
	OpReplaceQ  = 0x13
	OpDeleteQ   = 0x14
	OpIncrQ     = 0x15
	OpDecrQ     = 0x16
	OpQuitQ     = 0x17
	OpFlushQ    = 0x18
	OpAppendQ   = 0x19
	OpPrependQ  = 0x1a
	OpTouch     = 0x1c
	OpGat       = 0x1d
	OpGatQ      = 0x1e
	OpSASLList  = 0x20
	OpSASLAuth  = 0x21
	OpSASLStep  = 0x22
	OpGatK      = 0x23
	OpGatKQ     = 0x24
)

// binaryOp describes an opcode: its command, whether it is quiet, and the
// shape memcached's dispatch_bin_command demands of it.
type binaryOp struct {
	cmd   Command
	quiet bool
	shape uint8
	known bool
}

// The shapes of dispatch_bin_command's checks.
const (
	shapeEmpty      uint8 = iota + 1 // no extras, key or body (version, noop, quit)
	shapeStore                       // extras 8, a key, body ≥ key+8 (set, add, replace)
	shapeKeyOnly                     // no extras, a key, body = key (get*, delete)
	shapeArith                       // extras 20, a key, body = key+20 (incr, decr)
	shapeAppend                      // no extras, a key (append, prepend)
	shapeTouch                       // extras 4, a key (touch, gat*)
	shapeFlush                       // no key, body = extras of 0 or 4
	shapeStat                        // no extras
	shapeSASLList                    // nothing
	shapeSASLAuth                    // no extras, a key
	shapeUnroutable                  // valid but keyless (flush, stat, SASL)
)

var binaryOps = func() (t [256]binaryOp) {
	set := func(op uint8, c Command, quiet bool, shape uint8) {
		t[op] = binaryOp{cmd: c, quiet: quiet, shape: shape, known: true}
	}
	set(OpGet, CmdGet, false, shapeKeyOnly)
	set(OpGetQ, CmdGet, true, shapeKeyOnly)
	set(OpGetK, CmdGetK, false, shapeKeyOnly)
	set(OpGetKQ, CmdGetK, true, shapeKeyOnly)
	set(OpSet, CmdSet, false, shapeStore)
	set(OpSetQ, CmdSet, true, shapeStore)
	set(OpAdd, CmdAdd, false, shapeStore)
	set(OpAddQ, CmdAdd, true, shapeStore)
	set(OpReplace, CmdReplace, false, shapeStore)
	set(OpReplaceQ, CmdReplace, true, shapeStore)
	set(OpDelete, CmdDelete, false, shapeKeyOnly)
	set(OpDeleteQ, CmdDelete, true, shapeKeyOnly)
	set(OpIncrement, CmdIncr, false, shapeArith)
	set(OpIncrQ, CmdIncr, true, shapeArith)
	set(OpDecrement, CmdDecr, false, shapeArith)
	set(OpDecrQ, CmdDecr, true, shapeArith)
	set(OpAppend, CmdAppend, false, shapeAppend)
	set(OpAppendQ, CmdAppend, true, shapeAppend)
	set(OpPrepend, CmdPrepend, false, shapeAppend)
	set(OpPrependQ, CmdPrepend, true, shapeAppend)
	set(OpTouch, CmdTouch, false, shapeTouch)
	set(OpGat, CmdGat, false, shapeTouch)
	set(OpGatQ, CmdGat, true, shapeTouch)
	set(OpGatK, CmdGatK, false, shapeTouch)
	set(OpGatKQ, CmdGatK, true, shapeTouch)
	set(OpVersion, CmdVersion, false, shapeEmpty)
	set(OpNoop, CmdNoop, false, shapeEmpty)
	set(OpQuit, CmdQuit, false, shapeEmpty)
	set(OpQuitQ, CmdQuit, true, shapeEmpty)
	set(OpFlush, CmdNone, false, shapeFlush)
	set(OpFlushQ, CmdNone, true, shapeFlush)
	set(OpStat, CmdNone, false, shapeStat)
	set(OpSASLList, CmdNone, false, shapeSASLList)
	set(OpSASLAuth, CmdNone, false, shapeSASLAuth)
	set(OpSASLStep, CmdNone, false, shapeSASLAuth)
	return t
}()

// shapeOK applies dispatch_bin_command's length checks for an opcode.
func shapeOK(shape uint8, extlen, keylen int, bodylen uint32) bool {
	body := uint64(bodylen)
	k, e := uint64(keylen), uint64(extlen)
	switch shape {
	case shapeEmpty, shapeSASLList:
		return extlen == 0 && keylen == 0 && bodylen == 0
	case shapeStore:
		return extlen == 8 && keylen != 0 && body >= k+8
	case shapeKeyOnly:
		return extlen == 0 && keylen > 0 && body == k
	case shapeArith:
		return keylen > 0 && extlen == 20 && body == k+e
	case shapeAppend:
		return keylen > 0 && extlen == 0
	case shapeTouch:
		return extlen == 4 && keylen != 0
	case shapeFlush:
		return keylen == 0 && body == e && (extlen == 0 || extlen == 4)
	case shapeStat:
		return extlen == 0
	case shapeSASLAuth:
		return extlen == 0 && keylen != 0
	}
	return false
}

// parseBinary parses a binary request (Parse has seen the magic) in the
// order memcached checks it: header, extras and key present; key and extras within the body;
// key length; the opcode's own lengths; then the whole body present.
func parseBinary(buf []byte, r *Request) error {
	r.Protocol = Binary
	if len(buf) < HeaderLen {
		return ErrIncomplete
	}
	r.Opcode = buf[1]
	r.Opaque = binary.BigEndian.Uint32(buf[12:])
	keylen := int(binary.BigEndian.Uint16(buf[2:]))
	extlen := int(buf[4])
	bodylen := binary.BigEndian.Uint32(buf[8:])
	if len(buf) < HeaderLen+keylen+extlen {
		return ErrIncomplete
	}
	if uint64(keylen) > uint64(bodylen) || uint64(keylen+extlen) > uint64(bodylen) {
		return ErrBinaryLengths
	}
	op := binaryOps[r.Opcode]
	r.Quiet = op.quiet
	if keylen > MaxKeyLen {
		return ErrBinaryInvalid
	}
	if !op.known {
		// memcached consumes header, extras and key, then swallows
		// bodylen more bytes.
		r.Len = HeaderLen + extlen + keylen + int(bodylen)
		return ErrBinaryUnknownCommand
	}
	if !shapeOK(op.shape, extlen, keylen, bodylen) {
		return ErrBinaryInvalid
	}
	if uint64(len(buf)) < HeaderLen+uint64(bodylen) {
		return ErrIncomplete
	}
	r.Len = HeaderLen + int(bodylen)
	if op.cmd == CmdNone {
		return ErrUnroutable
	}
	r.Command = op.cmd
	if keylen > 0 {
		r.key = buf[HeaderLen+extlen : HeaderLen+extlen+keylen]
		r.NumKeys = 1
	}
	r.Value = buf[HeaderLen+extlen+keylen : r.Len]
	return nil
}
