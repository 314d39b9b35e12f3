package memcache

// Protocol is the wire protocol of a request.
type Protocol uint8

// The protocols.
const (
	ASCII Protocol = iota + 1
	Meta
	Binary
)

// String names the protocol.
func (p Protocol) String() string {
	switch p {
	case ASCII:
		return "ascii"
	case Meta:
		return "meta"
	case Binary:
		return "binary"
	}
	return "unknown"
}

// Command is what a request asks; the binary quiet variants map to the
// same commands with Request.Quiet set.
type Command uint8

// The commands.
const (
	CmdNone Command = iota
	CmdGet
	CmdGets
	CmdGat
	CmdGats
	CmdTouch
	CmdSet
	CmdAdd
	CmdReplace
	CmdAppend
	CmdPrepend
	CmdCas
	CmdDelete
	CmdIncr
	CmdDecr
	CmdVersion
	CmdQuit
	CmdNoop    // binary noop
	CmdGetK    // binary getk: a get whose reply carries the key
	CmdGatK    // binary gatk
	CmdMetaGet // mg
	CmdMetaSet // ms
	CmdMetaDelete
	CmdMetaArithmetic
	CmdMetaNoop  // mn
	CmdMetaDebug // me
	numCommands
)

var commandNames = [numCommands]string{
	CmdNone: "none", CmdGet: "get", CmdGets: "gets", CmdGat: "gat", CmdGats: "gats",
	CmdTouch: "touch", CmdSet: "set", CmdAdd: "add", CmdReplace: "replace",
	CmdAppend: "append", CmdPrepend: "prepend", CmdCas: "cas", CmdDelete: "delete",
	CmdIncr: "incr", CmdDecr: "decr", CmdVersion: "version", CmdQuit: "quit",
	CmdNoop: "noop", CmdGetK: "getk", CmdGatK: "gatk", CmdMetaGet: "mg", CmdMetaSet: "ms",
	CmdMetaDelete: "md", CmdMetaArithmetic: "ma", CmdMetaNoop: "mn", CmdMetaDebug: "me",
}

// String names the command as the ASCII or meta protocol spells it.
func (c Command) String() string {
	if c < numCommands {
		return commandNames[c]
	}
	return "unknown"
}

// IsWrite reports whether the command changes the store: storage
// commands, delete, incr and decr, and the commands that change an item's
// expiration time (touch, gat, gats, gatk). mg counts as a read even with
// flags that touch the item.
func (c Command) IsWrite() bool {
	switch c {
	case CmdGat, CmdGats, CmdGatK, CmdTouch, CmdSet, CmdAdd, CmdReplace, CmdAppend,
		CmdPrepend, CmdCas, CmdDelete, CmdIncr, CmdDecr, CmdMetaSet, CmdMetaDelete,
		CmdMetaArithmetic:
		return true
	}
	return false
}

// MaxKeyLen is memcached's KEY_MAX_LENGTH.
const MaxKeyLen = 250

// Request is one parsed request. Its byte slices point into the buffer
// given to Parse; nothing is copied.
type Request struct {
	Protocol Protocol
	Command  Command
	// Opcode is the binary opcode as sent (quiet variants included).
	Opcode uint8
	// Opaque is the binary request's opaque field as sent (its bytes read
	// big-endian); memcached echoes the same bytes in the reply.
	Opaque uint32
	// Quiet is set for a binary quiet opcode, an ASCII request ending in
	// noreply, and a meta request with the q flag. memcached sends no
	// error line for an ASCII request it has marked noreply.
	Quiet bool
	// Base64Key is set for a meta request with the b flag: Key is base64
	// and DecodeKey gives the key memcached hashes and stores.
	Base64Key bool
	// NumKeys is the number of keys (0 for version, noop, mn and a gat
	// without keys; several for a multi-key get).
	NumKeys int
	// Len is the number of bytes of the buffer the request takes: line
	// and data block, or header and body. After an ASCII error it is the
	// length of the line memcached consumes before it reads the next.
	Len int
	// Line is an ASCII or meta request's command line without its line
	// end.
	Line []byte
	// Value is the data block without its "\r\n", or the binary value.
	Value []byte

	key     []byte
	keys    []byte // ASCII get family: the part of Line holding the keys
	keysOff int    // where keys starts in Line
}

// Key returns the request's first (for all but multi-key gets, only) key,
// or nil when it has none.
func (r *Request) Key() []byte { return r.key }

// Keys appends the request's keys to dst, in request order, and returns
// it; with enough capacity in dst it allocates nothing.
func (r *Request) Keys(dst [][]byte) [][]byte {
	if r.keys == nil {
		if r.key != nil {
			dst = append(dst, r.key)
		}
		return dst
	}
	for k, rest := nextToken(r.keys); k != nil; k, rest = nextToken(rest) {
		dst = append(dst, k)
	}
	return dst
}

// IsWrite reports whether the request changes the store.
func (r *Request) IsWrite() bool { return r.Command.IsWrite() }

// nextToken returns the first space-separated token of b and what follows
// it, or nil when b holds only spaces.
func nextToken(b []byte) (tok, rest []byte) {
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	if i == len(b) {
		return nil, nil
	}
	j := i
	for j < len(b) && b[j] != ' ' {
		j++
	}
	return b[i:j], b[j:]
}

// Parse parses the request at the start of buf (a UDP payload after its
// frame header, or the unread part of a TCP stream) into r. A first byte
// of 0x80 means binary, anything else ASCII or meta, as memcached decides.
// It returns ErrIncomplete when buf ends before the request does, or an
// *Error for a malformed request.
func Parse(buf []byte, r *Request) error {
	*r = Request{}
	if len(buf) == 0 {
		return ErrIncomplete
	}
	if buf[0] == MagicRequest {
		return parseBinary(buf, r)
	}
	return parseText(buf, r)
}
