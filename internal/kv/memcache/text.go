package memcache

import (
	"bytes"
	"encoding/base64"
	"math"
)

// Limits of memcached's text parser (proto_text.c).
const (
	// maxTokens is MAX_TOKENS: the tokenizer stops after 23 tokens and
	// counts a terminal one.
	maxTokens = 24
	// maxLineWait is how many bytes without a line end memcached waits
	// for before it closes the connection (unless they start a get).
	maxLineWait = 2048
	// metaMaxOpt is MFLAG_MAX_OPT_LENGTH, the most tokens a meta command
	// may have, the terminal one included.
	metaMaxOpt = 20
)

// tokens is a command line split the way memcached's tokenize_command
// splits it: at single spaces, at most 23 tokens, n counting the terminal
// token too.
type tokens struct {
	start, end [maxTokens]int32
	n          int
}

// tokenize splits line into tk.
func tokenize(line []byte, tk *tokens) {
	n := 0
	s := 0
	for e := 0; e < len(line); e++ {
		if line[e] != ' ' {
			continue
		}
		if s != e {
			tk.start[n], tk.end[n] = int32(s), int32(e)
			n++
			if n == maxTokens-1 {
				tk.n = n + 1
				return
			}
		}
		s = e + 1
	}
	if s != len(line) {
		tk.start[n], tk.end[n] = int32(s), int32(len(line))
		n++
	}
	tk.n = n + 1
}

// tok returns token i of line.
func (tk *tokens) tok(line []byte, i int) []byte { return line[tk.start[i]:tk.end[i]] }

// last returns the last real token (memcached's tokens[ntokens-2]).
func (tk *tokens) last(line []byte) []byte { return tk.tok(line, tk.n-2) }

// parseText parses an ASCII or meta request.
func parseText(buf []byte, r *Request) error {
	r.Protocol = ASCII
	el := bytes.IndexByte(buf, '\n')
	if el < 0 {
		if len(buf) > maxLineWait {
			p := 0
			for p < len(buf) && buf[p] == ' ' {
				p++
			}
			if p > 100 || !(bytes.HasPrefix(buf[p:], []byte("get ")) || bytes.HasPrefix(buf[p:], []byte("gets "))) {
				return ErrLineTooLong
			}
		}
		return ErrIncomplete
	}
	lineEnd := el
	if el > 1 && buf[el-1] == '\r' {
		lineEnd = el - 1
	}
	r.Line = buf[:lineEnd]
	r.Len = el + 1
	// memcached reads the line as a C string: a NUL ends it.
	line := r.Line
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	var tk tokens
	tokenize(line, &tk)
	if tk.n < 2 || tk.end[0]-tk.start[0] < 2 {
		return ErrUnknownCommand
	}
	cmd := tk.tok(line, 0)
	if cmd[0] == 'm' && len(cmd) == 2 {
		r.Protocol = Meta
		return parseMeta(buf, line, &tk, r)
	}
	switch string(cmd) {
	case "get", "bget":
		return parseGet(line, &tk, r, CmdGet, 1)
	case "gets":
		return parseGet(line, &tk, r, CmdGets, 1)
	case "gat":
		return parseGet(line, &tk, r, CmdGat, 2)
	case "gats":
		return parseGet(line, &tk, r, CmdGats, 2)
	case "set":
		return parseStore(buf, line, &tk, r, CmdSet)
	case "add":
		return parseStore(buf, line, &tk, r, CmdAdd)
	case "replace":
		return parseStore(buf, line, &tk, r, CmdReplace)
	case "append":
		return parseStore(buf, line, &tk, r, CmdAppend)
	case "prepend":
		return parseStore(buf, line, &tk, r, CmdPrepend)
	case "cas":
		return parseStore(buf, line, &tk, r, CmdCas)
	case "incr":
		return parseArith(line, &tk, r, CmdIncr)
	case "decr":
		return parseArith(line, &tk, r, CmdDecr)
	case "touch":
		return parseTouch(line, &tk, r)
	case "delete":
		return parseDelete(line, &tk, r)
	case "version":
		r.Command = CmdVersion
		return nil
	case "quit":
		r.Command = CmdQuit
		return nil
	case "stats", "shutdown", "slabs", "cache_memlimit", "flush_all", "lru_crawler",
		"watch", "verbosity", "lru", "misbehave", "debugtime", "extstore", "refresh_certs":
		return ErrUnroutable
	}
	switch cmd[0] {
	case 'g', 's', 'a', 'c', 'i', 'd', 't':
		// memcached's first-letter branches answer ERROR without looking
		// for HTTP.
		return ErrUnknownCommand
	}
	if bytes.HasPrefix(tk.last(line), []byte("HTTP/")) {
		return ErrHTTP
	}
	return ErrUnknownCommand
}

// parseGet parses get, gets, gat and gats; keys start at token first (gat
// and gats have their expiration time before the keys). Keys run to the
// end of the line, past memcached's 23 tokens.
func parseGet(line []byte, tk *tokens, r *Request, c Command, first int) error {
	if tk.n < 3 {
		return ErrUnknownCommand
	}
	if first == 2 {
		if _, ok := parseInt32(tk.tok(line, 1)); !ok {
			return ErrInvalidExptime
		}
	}
	r.Command = c
	if first >= tk.n-1 {
		return nil // "gat 10": memcached answers END.
	}
	area := line[tk.start[first]:]
	n := 0
	for k, rest := nextToken(area); k != nil; k, rest = nextToken(rest) {
		if len(k) > MaxKeyLen {
			r.key, r.NumKeys = nil, 0
			return ErrBadFormat
		}
		if n == 0 {
			r.key = k
		}
		n++
	}
	r.NumKeys = n
	r.keys = area
	r.keysOff = int(tk.start[first])
	return nil
}

// setKey records a single key, checking its length.
func setKey(r *Request, k []byte) error {
	if len(k) > MaxKeyLen {
		return ErrBadFormat
	}
	r.key = k
	r.NumKeys = 1
	return nil
}

// noreply reports whether the last token is "noreply" (memcached's
// set_noreply_maybe).
func noreply(line []byte, tk *tokens) bool {
	return string(tk.last(line)) == "noreply"
}

// parseStore parses set, add, replace, append, prepend and cas, and the
// data block after the line.
func parseStore(buf, line []byte, tk *tokens, r *Request, c Command) error {
	want := 6
	if c == CmdCas {
		want = 7
	}
	if tk.n != want && tk.n != want+1 {
		return ErrUnknownCommand
	}
	r.Quiet = noreply(line, tk)
	if err := setKey(r, tk.tok(line, 1)); err != nil {
		return err
	}
	_, ok1 := parseUint(tk.tok(line, 2))
	_, ok2 := parseInt32(tk.tok(line, 3))
	vlen, ok3 := parseInt32(tk.tok(line, 4))
	if !ok1 || !ok2 || !ok3 {
		return ErrBadFormat
	}
	if c == CmdCas {
		if _, ok := parseUint(tk.tok(line, 5)); !ok {
			return ErrBadFormat
		}
	}
	if vlen < 0 || vlen > math.MaxInt32-2 {
		return ErrBadFormat
	}
	r.Command = c
	return dataBlock(buf, r, int(vlen))
}

// dataBlock takes the data block of vlen bytes and "\r\n" after the line.
func dataBlock(buf []byte, r *Request, vlen int) error {
	end := r.Len + vlen + 2
	if end > len(buf) {
		return ErrIncomplete
	}
	data := buf[r.Len:end]
	r.Len = end
	if data[vlen] != '\r' || data[vlen+1] != '\n' {
		return ErrBadDataChunk
	}
	r.Value = data[:vlen]
	return nil
}

// parseArith parses incr and decr.
func parseArith(line []byte, tk *tokens, r *Request, c Command) error {
	if tk.n != 4 && tk.n != 5 {
		return ErrUnknownCommand
	}
	r.Quiet = noreply(line, tk)
	if err := setKey(r, tk.tok(line, 1)); err != nil {
		return err
	}
	if _, ok := parseUint(tk.tok(line, 2)); !ok {
		return ErrInvalidDelta
	}
	r.Command = c
	return nil
}

// parseTouch parses touch.
func parseTouch(line []byte, tk *tokens, r *Request) error {
	if tk.n != 4 && tk.n != 5 {
		return ErrUnknownCommand
	}
	r.Quiet = noreply(line, tk)
	if err := setKey(r, tk.tok(line, 1)); err != nil {
		return err
	}
	if _, ok := parseInt32(tk.tok(line, 2)); !ok {
		return ErrInvalidExptime
	}
	r.Command = CmdTouch
	return nil
}

// parseDelete parses delete, whose only optional arguments are a hold
// time of 0 and noreply.
func parseDelete(line []byte, tk *tokens, r *Request) error {
	if tk.n < 3 || tk.n > 5 {
		return ErrUnknownCommand
	}
	if tk.n > 3 {
		holdZero := string(tk.tok(line, 2)) == "0"
		r.Quiet = noreply(line, tk)
		valid := (tk.n == 4 && (holdZero || r.Quiet)) || (tk.n == 5 && holdZero && r.Quiet)
		if !valid {
			return ErrDeleteUsage
		}
	}
	if err := setKey(r, tk.tok(line, 1)); err != nil {
		return err
	}
	r.Command = CmdDelete
	return nil
}

// parseMeta parses the meta commands mg, ms, md, ma, mn and me.
func parseMeta(buf, line []byte, tk *tokens, r *Request) error {
	var c Command
	switch line[1] {
	case 'n':
		r.Command = CmdMetaNoop
		return nil
	case 'e':
		if tk.n < 3 {
			return ErrBadFormat
		}
		if err := setKey(r, tk.tok(line, 1)); err != nil {
			return err
		}
		r.Command = CmdMetaDebug
		return nil
	case 'g':
		c = CmdMetaGet
	case 's':
		c = CmdMetaSet
	case 'd':
		c = CmdMetaDelete
	case 'a':
		c = CmdMetaArithmetic
	default:
		return ErrUnknownCommand
	}
	if tk.n < 3 {
		return ErrUnknownCommand
	}
	if err := setKey(r, tk.tok(line, 1)); err != nil {
		return err
	}
	firstFlag := 2
	vlen := int32(0)
	if c == CmdMetaSet {
		if tk.n == 3 {
			return ErrBadFormat
		}
		firstFlag = 3
	}
	if tk.n > metaMaxOpt {
		if c == CmdMetaGet {
			return ErrGetFlagsTooLong
		}
		return ErrFlagsTooLong
	}
	if c == CmdMetaSet {
		var ok bool
		vlen, ok = parseInt32(tk.tok(line, 2))
		if !ok || vlen < 0 || vlen > math.MaxInt32-2 {
			return ErrBadFormat
		}
	}
	if err := metaFlags(line, tk, firstFlag, r); err != nil {
		switch c {
		case CmdMetaDelete, CmdMetaArithmetic:
			return ErrInvalidOrDuplicateFlag
		case CmdMetaSet:
			// memcached swallows the data block after the error.
			if e := dataBlock(buf, r, int(vlen)); e == ErrIncomplete {
				return e
			}
		}
		return err
	}
	r.Command = c
	if c == CmdMetaSet {
		return dataBlock(buf, r, int(vlen))
	}
	return nil
}

// metaFlags checks a meta command's flags from token first on as
// memcached's _meta_flag_preparse does: a repeated or unknown flag ends
// the check at once; other bad flags are noted, the last one's text
// winning; a base64 key (b) must decode.
func metaFlags(line []byte, tk *tokens, first int, r *Request) error {
	var seen [2]uint64
	var err error
	for i := first; i < tk.n-1; i++ {
		t := tk.tok(line, i)
		o := t[0]
		if o >= 127 || seen[o>>6]&(1<<(o&63)) != 0 {
			return ErrDuplicateFlag
		}
		seen[o>>6] |= 1 << (o & 63)
		switch o {
		case 'b':
			r.Base64Key = true
			if !validBase64Key(r.key) {
				err = ErrDecodingKey
			}
		case 'N', 'T', 'R':
			if _, ok := parseInt32(t[1:]); !ok {
				err = ErrBadToken
			}
		case 'l', 'O', 'P', 'L', 'k', 's', 't', 'c', 'f', 'v', 'h', 'u', 'I':
		case 'q':
			r.Quiet = true
		case 'F':
			if _, ok := parseUint(t[1:]); !ok && err == nil {
				err = ErrBadFormat
			}
		case 'C':
			if _, ok := parseUint(t[1:]); !ok {
				err = ErrBadToken
			}
		case 'M':
			if len(t) != 2 {
				err = ErrModeLength
			}
		case 'J':
			if _, ok := parseUint(t[1:]); !ok {
				err = ErrInitialValue
			}
		case 'D':
			if _, ok := parseUint(t[1:]); !ok {
				err = ErrDeltaValue
			}
		default:
			return ErrInvalidFlag
		}
	}
	return err
}

// validBase64Key reports whether a meta key given with the b flag decodes
// to a non-empty key.
func validBase64Key(k []byte) bool {
	var dst [MaxKeyLen]byte
	n, err := base64.StdEncoding.Decode(dst[:], k)
	return err == nil && n > 0
}

// DecodeKey decodes a base64 meta key (Request.Base64Key) into dst, which
// needs MaxKeyLen bytes, and returns the decoded key memcached hashes and
// stores.
func DecodeKey(dst, key []byte) ([]byte, error) {
	n, err := base64.StdEncoding.Decode(dst, key)
	if err != nil || n == 0 {
		return nil, ErrDecodingKey
	}
	return dst[:n], nil
}

// isSpace is C's isspace in the C locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// parseUint reads a number as memcached's safe_strtoull (and, on 64-bit
// machines, safe_strtoul) does: strtoull in base 10, at least one digit,
// nothing but white space after it, no overflow, and a minus sign only
// when the negated value stays positive as a signed number.
func parseUint(b []byte) (uint64, bool) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	start := i
	var v uint64
	overflow := false
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		d := uint64(b[i] - '0')
		if v > (math.MaxUint64-d)/10 {
			overflow = true
		}
		v = v*10 + d
	}
	if i == start || overflow || (i < len(b) && !isSpace(b[i])) {
		return 0, false
	}
	if neg {
		v = -v
		if int64(v) < 0 {
			return 0, false
		}
	}
	return v, true
}

// parseInt32 reads a number as memcached's safe_strtol does: strtol in
// base 10 into a 64-bit long, then stored in an int32 (truncated).
func parseInt32(b []byte) (int32, bool) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	start := i
	var v uint64
	overflow := false
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if v > (1<<63)/10+1 {
			overflow = true
			continue
		}
		v = v*10 + uint64(b[i]-'0')
	}
	if i == start || (i < len(b) && !isSpace(b[i])) {
		return 0, false
	}
	if overflow || v > 1<<63 || (!neg && v > math.MaxInt64) {
		return 0, false
	}
	if neg {
		return int32(-int64(v)), true
	}
	return int32(int64(v)), true
}
