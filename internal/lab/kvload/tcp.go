package kvload

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/detour-overlay/detour/internal/kv/memcache"
)

// pending is a request sent on a TCP connection and not yet answered.
type pending struct {
	start time.Time
	isGet bool
}

// runTCP keeps depth requests in flight on one TCP connection until the
// deadline, then collects the replies still due.
func runTCP(ctx context.Context, cfg Config, wl *workload, s *stats, depth int, begin, deadline time.Time) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", cfg.Target)
	if err != nil {
		return fmt.Errorf("kvload: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	// queue is a ring of the requests in flight, oldest at head.
	queue := make([]pending, depth)
	head, inFlight := 0, 0
	var wbuf []byte
	send := func() bool {
		key, isGet, ok := wl.next()
		if !ok {
			return false
		}
		wbuf = appendTCPRequest(wbuf, cfg.Protocol, key, isGet, wl.value)
		queue[(head+inFlight)%depth] = pending{start: time.Now(), isGet: isGet}
		inFlight++
		return true
	}
	for i := 0; i < depth && send(); i++ {
	}
	rbuf := make([]byte, 0, 64<<10)
	for inFlight > 0 {
		if len(wbuf) > 0 {
			if _, err := conn.Write(wbuf); err != nil {
				return fmt.Errorf("kvload: write: %w", err)
			}
			wbuf = wbuf[:0]
		}
		_ = conn.SetReadDeadline(time.Now().Add(cfg.Timeout))
		if len(rbuf) == cap(rbuf) {
			rbuf = append(rbuf, 0)[:len(rbuf)]
		}
		n, err := conn.Read(rbuf[len(rbuf):cap(rbuf)])
		if err != nil {
			return fmt.Errorf("kvload: read (%d requests outstanding): %w", inFlight, err)
		}
		rbuf = rbuf[:len(rbuf)+n]
		off := 0
		for inFlight > 0 {
			m, kind, err := memcache.ReplyEnd(rbuf[off:])
			if err == memcache.ErrIncomplete {
				break
			}
			if err != nil {
				return fmt.Errorf("kvload: reply: %w", err)
			}
			now := time.Now()
			p := queue[head]
			head = (head + 1) % depth
			inFlight--
			classify(s, rbuf[off:off+m], kind, p.isGet)
			s.record(p.start, now, begin, p.isGet)
			off += m
			if now.Before(deadline) {
				send()
			}
		}
		rbuf = rbuf[:copy(rbuf, rbuf[off:])]
	}
	return nil
}

// classify counts a reply as a hit, a miss or an error.
func classify(s *stats, reply []byte, kind memcache.ReplyKind, isGet bool) {
	switch {
	case kind == memcache.ReplyValues || kind == memcache.ReplyMetaValue:
		s.hits++
	case bytes.HasPrefix(reply, []byte("END")) || bytes.HasPrefix(reply, []byte("EN\r")):
		s.misses++
	case bytes.HasPrefix(reply, []byte("STORED")) || bytes.HasPrefix(reply, []byte("HD")):
	default:
		s.errs++
	}
}

// appendTCPRequest appends an ASCII or meta get or set.
func appendTCPRequest(b []byte, p Protocol, key []byte, isGet bool, value []byte) []byte {
	switch {
	case p == MetaTCP && isGet:
		b = append(b, "mg "...)
		b = append(b, key...)
		return append(b, " v\r\n"...)
	case p == MetaTCP:
		b = append(b, "ms "...)
		b = append(b, key...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(len(value)), 10)
		b = append(b, " T0\r\n"...)
	case isGet:
		b = append(b, "get "...)
		b = append(b, key...)
		return append(b, "\r\n"...)
	default:
		b = append(b, "set "...)
		b = append(b, key...)
		b = append(b, " 0 0 "...)
		b = strconv.AppendInt(b, int64(len(value)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, value...)
	return append(b, "\r\n"...)
}
