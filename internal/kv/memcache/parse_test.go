package memcache

import (
	"encoding/binary"
	"strings"
	"testing"
)

// textCases are ASCII and meta requests with what Parse must make of
// them: the command and keys, or memcached's error.
var textCases = []struct {
	in    string
	cmd   Command
	keys  []string
	write bool
	err   *Error
}{
	{in: "get foo\r\n", cmd: CmdGet, keys: []string{"foo"}},
	{in: "get a b  c\r\n", cmd: CmdGet, keys: []string{"a", "b", "c"}},
	{in: "get foo\n", cmd: CmdGet, keys: []string{"foo"}},
	{in: "gets a b\r\n", cmd: CmdGets, keys: []string{"a", "b"}},
	{in: "gat 100 a b\r\n", cmd: CmdGat, keys: []string{"a", "b"}, write: true},
	{in: "gats 100 a\r\n", cmd: CmdGats, keys: []string{"a"}, write: true},
	{in: "gat 10\r\n", cmd: CmdGat, write: true},
	{in: "gat x a\r\n", err: ErrInvalidExptime},
	{in: "get\r\n", err: ErrUnknownCommand},
	{in: "get " + strings.Repeat("k", 251) + "\r\n", err: ErrBadFormat},
	{in: "get a " + strings.Repeat("k", 251) + "\r\n", err: ErrBadFormat},
	{in: "get " + strings.Repeat("k", 250) + "\r\n", cmd: CmdGet, keys: []string{strings.Repeat("k", 250)}},
	{in: "set foo 5 0 3\r\nbar\r\n", cmd: CmdSet, keys: []string{"foo"}, write: true},
	{in: "set foo 5 0 3 noreply\r\nbar\r\n", cmd: CmdSet, keys: []string{"foo"}, write: true},
	{in: "set foo 5 0 3\r\nbarx\r\n", err: ErrBadDataChunk},
	{in: "set foo 5 0 3\r\nba", err: ErrIncomplete},
	{in: "set foo x 0 3\r\nbar\r\n", err: ErrBadFormat},
	{in: "set foo 0 0 -1\r\n", err: ErrBadFormat},
	{in: "set foo 0 0\r\n", err: ErrUnknownCommand},
	{in: "set " + strings.Repeat("k", 251) + " 0 0 1\r\nx\r\n", err: ErrBadFormat},
	{in: "add k 0 0 1\r\nx\r\n", cmd: CmdAdd, keys: []string{"k"}, write: true},
	{in: "replace k 0 0 1\r\nx\r\n", cmd: CmdReplace, keys: []string{"k"}, write: true},
	{in: "append k 0 0 1\r\nx\r\n", cmd: CmdAppend, keys: []string{"k"}, write: true},
	{in: "prepend k 0 0 1\r\nx\r\n", cmd: CmdPrepend, keys: []string{"k"}, write: true},
	{in: "cas k 0 0 1 99\r\nx\r\n", cmd: CmdCas, keys: []string{"k"}, write: true},
	{in: "cas k 0 0 1\r\nx\r\n", err: ErrUnknownCommand},
	{in: "cas k 0 0 1 z\r\nx\r\n", err: ErrBadFormat},
	{in: "delete k\r\n", cmd: CmdDelete, keys: []string{"k"}, write: true},
	{in: "delete k 0\r\n", cmd: CmdDelete, keys: []string{"k"}, write: true},
	{in: "delete k noreply\r\n", cmd: CmdDelete, keys: []string{"k"}, write: true},
	{in: "delete k 5\r\n", err: ErrDeleteUsage},
	{in: "incr k 5\r\n", cmd: CmdIncr, keys: []string{"k"}, write: true},
	{in: "decr k 5 noreply\r\n", cmd: CmdDecr, keys: []string{"k"}, write: true},
	{in: "incr k x\r\n", err: ErrInvalidDelta},
	{in: "incr k -1\r\n", err: ErrInvalidDelta},
	{in: "touch k 10\r\n", cmd: CmdTouch, keys: []string{"k"}, write: true},
	{in: "touch k x\r\n", err: ErrInvalidExptime},
	{in: "version\r\n", cmd: CmdVersion},
	{in: "bogus\r\n", err: ErrUnknownCommand},
	{in: "x\r\n", err: ErrUnknownCommand},
	{in: "\r\n", err: ErrUnknownCommand},
	{in: "GET / HTTP/1.1\r\n", err: ErrHTTP},
	{in: "stats\r\n", err: ErrUnroutable},
	{in: "mg foo v\r\n", cmd: CmdMetaGet, keys: []string{"foo"}},
	{in: "mg foo\r\n", cmd: CmdMetaGet, keys: []string{"foo"}},
	{in: "mg\r\n", err: ErrUnknownCommand},
	{in: "mg foo v v\r\n", err: ErrDuplicateFlag},
	{in: "mg foo z\r\n", err: ErrInvalidFlag},
	{in: "mg foo Tx\r\n", err: ErrBadToken},
	{in: "mg Zm9v b v\r\n", cmd: CmdMetaGet, keys: []string{"Zm9v"}},
	{in: "mg !!! b\r\n", err: ErrDecodingKey},
	{in: "mg " + strings.Repeat("k", 251) + " v\r\n", err: ErrBadFormat},
	{in: "mg k a b c d e f g h i j k l m n o p q r s\r\n", err: ErrGetFlagsTooLong},
	{in: "ms foo 2 T0\r\nhi\r\n", cmd: CmdMetaSet, keys: []string{"foo"}, write: true},
	{in: "ms foo 2 MX\r\nhi\r\n", cmd: CmdMetaSet, keys: []string{"foo"}, write: true},
	{in: "ms foo\r\n", err: ErrBadFormat},
	{in: "ms foo x\r\n", err: ErrBadFormat},
	{in: "ms foo 2 MSX\r\nhi\r\n", err: ErrModeLength},
	{in: "ms foo 2\r\nhix\r\n", err: ErrBadDataChunk},
	{in: "md foo q\r\n", cmd: CmdMetaDelete, keys: []string{"foo"}, write: true},
	{in: "md foo z\r\n", err: ErrInvalidOrDuplicateFlag},
	{in: "ma foo D5 J1 N0\r\n", cmd: CmdMetaArithmetic, keys: []string{"foo"}, write: true},
	{in: "ma foo Dx\r\n", err: ErrInvalidOrDuplicateFlag},
	{in: "mn\r\n", cmd: CmdMetaNoop},
	{in: "me foo\r\n", cmd: CmdMetaDebug, keys: []string{"foo"}},
	{in: "mz foo\r\n", err: ErrUnknownCommand},
	{in: "get foo", err: ErrIncomplete},
}

func TestParseText(t *testing.T) {
	var r Request
	for _, c := range textCases {
		err := Parse([]byte(c.in), &r)
		if c.err != nil {
			if err != c.err {
				t.Errorf("%q: error %v, want %v", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if r.Command != c.cmd || r.IsWrite() != c.write {
			t.Errorf("%q: command %v write %v, want %v %v", c.in, r.Command, r.IsWrite(), c.cmd, c.write)
		}
		keys := r.Keys(nil)
		if len(keys) != len(c.keys) || r.NumKeys != len(c.keys) {
			t.Errorf("%q: keys %q (NumKeys %d), want %q", c.in, keys, r.NumKeys, c.keys)
			continue
		}
		for i := range keys {
			if string(keys[i]) != c.keys[i] {
				t.Errorf("%q: key %d = %q, want %q", c.in, i, keys[i], c.keys[i])
			}
		}
		if r.Len != len(c.in) {
			t.Errorf("%q: Len %d, want %d", c.in, r.Len, len(c.in))
		}
	}
}

func TestParseTextDetails(t *testing.T) {
	var r Request
	in := []byte("set foo 5 0 3 noreply\r\nbar\r\nget next\r\n")
	if err := Parse(in, &r); err != nil {
		t.Fatal(err)
	}
	if !r.Quiet || string(r.Value) != "bar" || r.Len != 28 || string(r.Line) != "set foo 5 0 3 noreply" {
		t.Fatalf("set: quiet %v value %q len %d line %q", r.Quiet, r.Value, r.Len, r.Line)
	}
	// Keys are sub-slices of the input: no copies.
	if &r.Key()[0] != &in[4] {
		t.Fatal("key is a copy")
	}
	if err := Parse([]byte("mg Zm9v b q v\r\n"), &r); err != nil || !r.Base64Key || !r.Quiet || r.Protocol != Meta {
		t.Fatalf("mg b q: %v %+v", err, r)
	}
	var buf [MaxKeyLen]byte
	if k, err := DecodeKey(buf[:], r.Key()); err != nil || string(k) != "foo" {
		t.Fatalf("DecodeKey: %q %v", k, err)
	}
	// A line without a newline: wait, unless 2048 bytes that are not a get.
	if err := Parse([]byte(strings.Repeat("x", 3000)), &r); err != ErrLineTooLong {
		t.Fatalf("long line: %v", err)
	}
	if err := Parse([]byte("get "+strings.Repeat("x ", 1500)), &r); err != ErrIncomplete {
		t.Fatalf("long get: %v", err)
	}
}

// binReq builds a binary request.
func binReq(op uint8, extras, key, value []byte) []byte {
	b := make([]byte, HeaderLen, HeaderLen+len(extras)+len(key)+len(value))
	b[0] = MagicRequest
	b[1] = op
	binary.BigEndian.PutUint16(b[2:], uint16(len(key)))
	b[4] = uint8(len(extras))
	binary.BigEndian.PutUint32(b[8:], uint32(len(extras)+len(key)+len(value)))
	binary.BigEndian.PutUint32(b[12:], 0xdeadbeef)
	b = append(b, extras...)
	b = append(b, key...)
	return append(b, value...)
}

func TestParseBinary(t *testing.T) {
	long := []byte(strings.Repeat("k", 251))
	cases := []struct {
		name  string
		in    []byte
		cmd   Command
		key   string
		quiet bool
		err   *Error
	}{
		{"get", binReq(OpGet, nil, []byte("foo"), nil), CmdGet, "foo", false, nil},
		{"getkq", binReq(OpGetKQ, nil, []byte("foo"), nil), CmdGetK, "foo", true, nil},
		{"set", binReq(OpSet, make([]byte, 8), []byte("foo"), []byte("bar")), CmdSet, "foo", false, nil},
		{"setq", binReq(OpSetQ, make([]byte, 8), []byte("foo"), []byte("bar")), CmdSet, "foo", true, nil},
		{"delete", binReq(OpDelete, nil, []byte("foo"), nil), CmdDelete, "foo", false, nil},
		{"incr", binReq(OpIncrement, make([]byte, 20), []byte("n"), nil), CmdIncr, "n", false, nil},
		{"append", binReq(OpAppend, nil, []byte("k"), []byte("v")), CmdAppend, "k", false, nil},
		{"touch", binReq(OpTouch, make([]byte, 4), []byte("k"), nil), CmdTouch, "k", false, nil},
		{"gat", binReq(OpGat, make([]byte, 4), []byte("k"), nil), CmdGat, "k", false, nil},
		{"noop", binReq(OpNoop, nil, nil, nil), CmdNoop, "", false, nil},
		{"version", binReq(OpVersion, nil, nil, nil), CmdVersion, "", false, nil},
		{"unknown opcode", binReq(0x55, nil, []byte("k"), nil), 0, "", false, ErrBinaryUnknownCommand},
		{"set without extras", binReq(OpSet, nil, []byte("k"), []byte("v")), 0, "", false, ErrBinaryInvalid},
		{"get with extras", binReq(OpGet, make([]byte, 4), []byte("k"), nil), 0, "", false, ErrBinaryInvalid},
		{"get without key", binReq(OpGet, nil, nil, nil), 0, "", false, ErrBinaryInvalid},
		{"key over 250", binReq(OpGet, nil, long, nil), 0, "", false, ErrBinaryInvalid},
		{"stat", binReq(OpStat, nil, nil, nil), 0, "", false, ErrUnroutable},
		{"short header", binReq(OpGet, nil, []byte("k"), nil)[:20], 0, "", false, ErrIncomplete},
		{"short value", binReq(OpSet, make([]byte, 8), []byte("k"), []byte("value"))[:35], 0, "", false, ErrIncomplete},
	}
	bad := binReq(OpGet, nil, []byte("foo"), nil)
	binary.BigEndian.PutUint32(bad[8:], 2) // body shorter than the key
	cases = append(cases, struct {
		name  string
		in    []byte
		cmd   Command
		key   string
		quiet bool
		err   *Error
	}{"key longer than body", bad, 0, "", false, ErrBinaryLengths})
	var r Request
	for _, c := range cases {
		err := Parse(c.in, &r)
		if c.err != nil {
			if err != c.err {
				t.Errorf("%s: error %v, want %v", c.name, err, c.err)
			}
			continue
		}
		if err != nil || r.Command != c.cmd || string(r.Key()) != c.key || r.Quiet != c.quiet || r.Len != len(c.in) || r.Protocol != Binary {
			t.Errorf("%s: %v %+v", c.name, err, r)
		}
	}
}

func TestErrorReplies(t *testing.T) {
	var r Request
	in := binReq(0x55, nil, []byte("k"), nil)
	if err := Parse(in, &r); err != ErrBinaryUnknownCommand {
		t.Fatal(err)
	}
	out := ErrBinaryUnknownCommand.AppendReply(nil, &r)
	want := []byte{0x81, 0x55, 0, 0, 0, 0, 0x00, 0x81, 0, 0, 0, 15, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0}
	want = append(want, "Unknown command"...)
	if string(out) != string(want) {
		t.Fatalf("binary reply %x, want %x", out, want)
	}
	if err := Parse([]byte("set k x 0 1 noreply\r\n"), &r); err != ErrBadFormat {
		t.Fatal(err)
	}
	if out := ErrBadFormat.AppendReply(nil, &r); len(out) != 0 {
		t.Fatalf("noreply request got %q", out)
	}
	if err := Parse([]byte("bogus\r\n"), &r); err != ErrUnknownCommand {
		t.Fatal(err)
	}
	if out := ErrUnknownCommand.AppendReply(nil, &r); string(out) != "ERROR\r\n" {
		t.Fatalf("got %q", out)
	}
}

func TestFrame(t *testing.T) {
	var r Request
	p := []byte{0x12, 0x34, 0, 0, 0, 1, 0, 0}
	p = append(p, "get a b\r\n"...)
	h, payload, err := ParseDatagram(p, &r)
	if err != nil || h.RequestID != 0x1234 || h.Total != 1 || string(payload) != "get a b\r\n" || r.NumKeys != 2 {
		t.Fatalf("%v %+v %q %+v", err, h, payload, r)
	}
	var b [8]byte
	h.Put(b[:])
	if string(b[:]) != string(p[:8]) {
		t.Fatalf("Put wrote %x", b)
	}
	if _, _, err := ParseDatagram(p[:8], &r); err != ErrShortFrame {
		t.Fatalf("8 bytes: %v", err)
	}
	p[5] = 2
	if _, _, err := ParseDatagram(p, &r); err != ErrSpansDatagrams {
		t.Fatalf("total 2: %v", err)
	}
	p[5] = 1
	p[4] = 1
	if _, _, err := ParseDatagram(p, &r); err != ErrSpansDatagrams {
		t.Fatalf("total 257: %v", err)
	}
}

func TestNumbers(t *testing.T) {
	u := map[string]bool{"0": true, "12": true, "+3": true, "-0": true, "-1": false, "": false, "1x": false,
		"18446744073709551615": true, "18446744073709551616": false, "\t5": true}
	for s, ok := range u {
		if _, got := parseUint([]byte(s)); got != ok {
			t.Errorf("parseUint(%q) ok = %v, want %v", s, got, ok)
		}
	}
	i := map[string]int32{"0": 0, "-5": -5, "2147483647": 2147483647, "4294967301": 5}
	for s, want := range i {
		if got, ok := parseInt32([]byte(s)); !ok || got != want {
			t.Errorf("parseInt32(%q) = %d %v, want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "-", "x", "9223372036854775808", "99999999999999999999"} {
		if _, ok := parseInt32([]byte(s)); ok {
			t.Errorf("parseInt32(%q) accepted", s)
		}
	}
}
