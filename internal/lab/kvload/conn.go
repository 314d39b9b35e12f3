package kvload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Conn is a memcached connection speaking ASCII over TCP, one request at
// a time: what an experiment uses to fill servers, time single reads and
// read a server's statistics.
type Conn struct {
	c   net.Conn
	r   *bufio.Reader
	w   []byte
	val []byte
	// Timeout bounds every request (default 10 s).
	Timeout time.Duration
}

// NewConn wraps an open connection.
func NewConn(c net.Conn) *Conn {
	return &Conn{c: c, r: bufio.NewReaderSize(c, 256<<10), Timeout: 10 * time.Second}
}

// Close closes the connection.
func (k *Conn) Close() error { return k.c.Close() }

func (k *Conn) deadline() { _ = k.c.SetDeadline(time.Now().Add(k.Timeout)) }

// Set stores value under key and waits for STORED.
func (k *Conn) Set(key string, value []byte) error {
	if err := k.SetNoreply(key, value); err != nil {
		return err
	}
	return k.Sync()
}

// SetNoreply sends a set marked noreply, buffered until Sync or the next
// request that waits for a reply.
func (k *Conn) SetNoreply(key string, value []byte) error {
	k.w = append(k.w, "set "...)
	k.w = append(k.w, key...)
	k.w = append(k.w, " 0 0 "...)
	k.w = strconv.AppendInt(k.w, int64(len(value)), 10)
	k.w = append(k.w, " noreply\r\n"...)
	k.w = append(k.w, value...)
	k.w = append(k.w, "\r\n"...)
	if len(k.w) >= 1<<20 {
		return k.flush()
	}
	return nil
}

func (k *Conn) flush() error {
	if len(k.w) == 0 {
		return nil
	}
	k.deadline()
	_, err := k.c.Write(k.w)
	k.w = k.w[:0]
	return err
}

// Sync sends what is buffered and waits until the server has handled it
// (a meta no-op, answered in order).
func (k *Conn) Sync() error {
	k.w = append(k.w, "mn\r\n"...)
	if err := k.flush(); err != nil {
		return err
	}
	line, err := k.line()
	if err != nil {
		return err
	}
	if !bytes.Equal(line, []byte("MN")) {
		return fmt.Errorf("kvload: sync: %q", line)
	}
	return nil
}

// Get fetches key; the value is valid until the next request. ok is
// false on a miss.
func (k *Conn) Get(key string) (value []byte, ok bool, err error) {
	k.w = append(k.w, "get "...)
	k.w = append(k.w, key...)
	k.w = append(k.w, "\r\n"...)
	if err := k.flush(); err != nil {
		return nil, false, err
	}
	line, err := k.line()
	if err != nil {
		return nil, false, err
	}
	if bytes.Equal(line, []byte("END")) {
		return nil, false, nil
	}
	f := bytes.Fields(line)
	if len(f) < 4 || !bytes.Equal(f[0], []byte("VALUE")) {
		return nil, false, fmt.Errorf("kvload: get %s: %q", key, line)
	}
	n, err := strconv.Atoi(string(f[3]))
	if err != nil || n < 0 {
		return nil, false, fmt.Errorf("kvload: get %s: bad length in %q", key, line)
	}
	if cap(k.val) < n+2 {
		k.val = make([]byte, n+2)
	}
	k.val = k.val[:n+2]
	if _, err := io.ReadFull(k.r, k.val); err != nil {
		return nil, false, err
	}
	end, err := k.line()
	if err != nil {
		return nil, false, err
	}
	if !bytes.Equal(end, []byte("END")) {
		return nil, false, fmt.Errorf("kvload: get %s: %q after the value", key, end)
	}
	return k.val[:n], true, nil
}

// Has reports whether key is stored, without reading its value (a meta
// get with no flags: memcached answers from the item's header, so an
// item in extstore is not read from the device).
func (k *Conn) Has(key string) (bool, error) {
	k.w = append(k.w, "mg "...)
	k.w = append(k.w, key...)
	k.w = append(k.w, "\r\n"...)
	if err := k.flush(); err != nil {
		return false, err
	}
	line, err := k.line()
	if err != nil {
		return false, err
	}
	switch {
	case bytes.HasPrefix(line, []byte("HD")):
		return true, nil
	case bytes.HasPrefix(line, []byte("EN")):
		return false, nil
	}
	return false, fmt.Errorf("kvload: mg %s: %q", key, line)
}

// Stats returns the server's general statistics.
func (k *Conn) Stats() (map[string]string, error) {
	k.w = append(k.w, "stats\r\n"...)
	if err := k.flush(); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for {
		line, err := k.line()
		if err != nil {
			return nil, err
		}
		if bytes.Equal(line, []byte("END")) {
			return out, nil
		}
		f := bytes.Fields(line)
		if len(f) != 3 || !bytes.Equal(f[0], []byte("STAT")) {
			return nil, fmt.Errorf("kvload: stats: %q", line)
		}
		out[string(f[1])] = string(f[2])
	}
}

// Version sends "version" and waits for the answer: a round trip that
// touches no item.
func (k *Conn) Version() error {
	k.w = append(k.w, "version\r\n"...)
	if err := k.flush(); err != nil {
		return err
	}
	line, err := k.line()
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("VERSION ")) {
		return fmt.Errorf("kvload: version: %q", line)
	}
	return nil
}

// line reads one reply line without its CRLF.
func (k *Conn) line() ([]byte, error) {
	k.deadline()
	line, err := k.r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errors.New("kvload: reply line without CRLF")
	}
	return line[:len(line)-2], nil
}

// StatInt returns a counter of Stats as an integer (0 when absent).
func StatInt(st map[string]string, name string) int64 {
	v, _ := strconv.ParseInt(st[name], 10, 64)
	return v
}
