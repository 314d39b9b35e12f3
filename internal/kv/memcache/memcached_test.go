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

	// The requests memcached answers by closing the connection.
	for _, c := range []struct {
		in  string
		err *Error
	}{
		{"GET / HTTP/1.1\r\n", ErrHTTP},
		{strings.Repeat("x", 3000), ErrLineTooLong},
	} {
		var r Request
		if err := Parse([]byte(c.in), &r); err != c.err || !c.err.Close || len(c.err.AppendReply(nil, &r)) != 0 {
			t.Fatalf("%.20q: %v", c.in, err)
		}
		got := exchange(t, addr, []byte(c.in), func(rd *bufio.Reader) []byte {
			b, err := io.ReadAll(rd)
			if err != nil {
				return []byte("no close: " + err.Error())
			}
			return b
		})
		if len(got) != 0 {
			t.Errorf("%.20q: memcached answered %q instead of closing", c.in, got)
		}
	}
}

// TestDatagramsMemcachedDrops checks over UDP that memcached ignores the
// datagrams ParseFrame refuses (8 bytes or fewer, a request over several
// datagrams) and answers the same request in one datagram.
func TestDatagramsMemcachedDrops(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	port := kvtest.FreePort(t, "127.0.0.1")
	kvtest.Memcached(t, "127.0.0.1", port, true)
	c, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ask := func(p []byte) []byte {
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		b := make([]byte, 2048)
		n, err := c.Read(b)
		if err != nil {
			return nil
		}
		return b[:n]
	}
	frame := func(id, total uint16, req string) []byte {
		b := make([]byte, FrameHeaderLen, FrameHeaderLen+len(req))
		FrameHeader{RequestID: id, Total: total}.Put(b)
		return append(b, req...)
	}
	var r Request
	for _, p := range [][]byte{frame(1, 2, "version\r\n"), frame(2, 1, "")} {
		if _, _, err := ParseDatagram(p, &r); err != ErrSpansDatagrams && err != ErrShortFrame {
			t.Fatalf("%q: %v", p, err)
		}
		if got := ask(p); got != nil {
			t.Errorf("%q: memcached answered %q", p, got)
		}
	}
	p := frame(3, 1, "version\r\n")
	if _, _, err := ParseDatagram(p, &r); err != nil || r.Command != CmdVersion {
		t.Fatalf("version: %v", err)
	}
	got := ask(p)
	if len(got) < FrameHeaderLen || !strings.HasPrefix(string(got[FrameHeaderLen:]), "VERSION ") || got[1] != 3 {
		t.Fatalf("version over UDP: %q", got)
	}
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
