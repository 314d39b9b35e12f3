package memcache

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/kv/kvtest"
)

// TestRepliesMatchMemcached sends every malformed request of the tables
// to a real memcached on loopback and checks that the reply Parse's error
// builds is, byte for byte, the one memcached sends. It skips when
// memcached is missing, and fails instead when CI=true.
func TestRepliesMatchMemcached(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	port := kvtest.FreePort(t, "127.0.0.1")
	kvtest.Memcached(t, "127.0.0.1", port, false)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	checked := 0
	for _, c := range textCases {
		if c.err == nil || c.err.Silent || c.err == ErrUnroutable {
			continue
		}
		var r Request
		if err := Parse([]byte(c.in), &r); err != c.err {
			t.Fatalf("%q: %v", c.in, err)
		}
		want := c.err.AppendReply(nil, &r)
		got := exchange(t, addr, []byte(c.in), func(rd *bufio.Reader) []byte {
			line, _ := rd.ReadBytes('\n')
			return line
		})
		if !bytes.Equal(got, want) {
			t.Errorf("%q: memcached answers %q, the parser %q", c.in, got, want)
		}
		checked++
	}
	bin := [][]byte{
		binReq(0x55, nil, []byte("k"), nil),
		binReq(OpSet, nil, []byte("k"), []byte("v")),
		binReq(OpGet, make([]byte, 4), []byte("k"), nil),
		binReq(OpGet, nil, []byte(strings.Repeat("k", 251)), nil),
	}
	lengths := binReq(OpGet, nil, []byte("foo"), nil)
	binary.BigEndian.PutUint32(lengths[8:], 2)
	bin = append(bin, lengths)
	for _, in := range bin {
		var r Request
		err := Parse(in, &r)
		e, ok := err.(*Error)
		if !ok || e.Status == 0 {
			t.Fatalf("%x: %v", in, err)
		}
		want := e.AppendReply(nil, &r)
		// For an unknown opcode memcached swallows the body after the key
		// as well before it answers: r.Len counts those bytes.
		send := append(append([]byte(nil), in...), make([]byte, max(0, r.Len-len(in)))...)
		got := exchange(t, addr, send, func(rd *bufio.Reader) []byte {
			h := make([]byte, HeaderLen)
			if _, err := io.ReadFull(rd, h); err != nil {
				return nil
			}
			body := make([]byte, binary.BigEndian.Uint32(h[8:]))
			_, _ = io.ReadFull(rd, body)
			return append(h, body...)
		})
		if !bytes.Equal(got, want) {
			t.Errorf("binary %x: memcached answers %x, the parser %x", in[:2], got, want)
		}
		checked++
	}
	t.Logf("%d malformed requests answered as memcached answers them", checked)
}

// exchange sends req on a new connection to addr and reads one reply.
func exchange(t *testing.T, addr string, req []byte, read func(*bufio.Reader) []byte) []byte {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	return read(bufio.NewReader(c))
}
