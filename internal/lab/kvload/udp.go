package kvload

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/ring"
)

// slot is one of a UDP socket's outstanding requests, and the reply
// datagrams it has received. memcached sends a reply longer than one
// datagram (1400 bytes) as several, each behind a frame header with the
// request id, its sequence number and the total; they may arrive in any
// order, and the reply is complete when all have.
type slot struct {
	id     uint16
	start  time.Time
	isGet  bool
	active bool
	// total is the reply's datagram count (0 until one arrived), got the
	// distinct datagrams received, seen their sequence numbers.
	total, got uint16
	seen       [maxReplyDatagrams / 64]uint64
	// head is set when datagram 0 (with the binary header) arrived;
	// status is its status.
	head   bool
	status uint16
}

// maxReplyDatagrams bounds the datagrams of one reply: 1024 of 1400
// bytes hold a value of 1.4 MB, more than memcached's default item size.
const maxReplyDatagrams = 1024

// add notes datagram p (frame header first) of the slot's reply and
// reports whether the reply is complete; ok is false for a datagram that
// does not belong to it (a bad sequence number or total).
func (sl *slot) add(p []byte) (done, ok bool) {
	var fh memcache.FrameHeader
	if len(p) < memcache.FrameHeaderLen {
		return false, false
	}
	fh.RequestID = binary.BigEndian.Uint16(p[0:])
	fh.Seq = binary.BigEndian.Uint16(p[2:])
	fh.Total = binary.BigEndian.Uint16(p[4:])
	if fh.Total == 0 || fh.Total > maxReplyDatagrams || fh.Seq >= fh.Total || (sl.total != 0 && fh.Total != sl.total) {
		return false, false
	}
	if fh.Seq == 0 {
		if len(p) < memcache.FrameHeaderLen+memcache.HeaderLen || p[memcache.FrameHeaderLen] != memcache.MagicResponse {
			return false, false
		}
		sl.head = true
		sl.status = binary.BigEndian.Uint16(p[memcache.FrameHeaderLen+6:])
	}
	sl.total = fh.Total
	w, bit := fh.Seq/64, uint64(1)<<(fh.Seq%64)
	if sl.seen[w]&bit == 0 {
		sl.seen[w] |= bit
		sl.got++
	}
	return sl.got == sl.total, true
}

// udpReadBuffer is the receive buffer a UDP worker asks for.
const udpReadBuffer = 4 << 20

// udpPoll is how often a UDP worker looks for requests past their timeout
// while no reply arrives.
const udpPoll = 10 * time.Millisecond

// runUDP keeps depth binary requests in flight on one connected UDP
// socket, each in its own datagram under its own request id, until the
// deadline. A request unanswered after cfg.Timeout counts as lost and its
// slot sends a new one; replies to lost requests are ignored.
func runUDP(ctx context.Context, cfg Config, wl *workload, s *stats, depth int, begin, deadline time.Time) error {
	conn, write, err := udpTarget(ctx, cfg)
	if err != nil {
		return fmt.Errorf("kvload: %w", err)
	}
	defer conn.Close()
	// A 1 MB value comes back as 719 datagrams at once: room for them
	// (up to net.core.rmem_max).
	if uc, ok := conn.(*net.UDPConn); ok {
		_ = uc.SetReadBuffer(udpReadBuffer)
	}

	slots := make([]slot, depth)
	// Every request gets the next request id; a reply is matched to the
	// slot waiting for its id.
	var nextID uint16
	wbuf := make([]byte, 0, 2048)
	send := func(i int) error {
		key, isGet, ok := wl.next()
		if !ok {
			slots[i].active = false
			return nil
		}
		nextID++
		id := nextID
		wbuf = appendBinaryRequest(wbuf[:0], id, key, isGet, wl.value)
		slots[i] = slot{id: id, start: time.Now(), isGet: isGet, active: true}
		return write(wbuf, key)
	}
	for i := range slots {
		if err := send(i); err != nil {
			return fmt.Errorf("kvload: send: %w", err)
		}
	}
	rbuf := make([]byte, 65536)
	for {
		active := 0
		now := time.Now()
		for i := range slots {
			if !slots[i].active {
				continue
			}
			if now.Sub(slots[i].start) > cfg.Timeout {
				s.to++
				slots[i].active = false
				if now.Before(deadline) {
					if err := send(i); err != nil {
						return fmt.Errorf("kvload: send: %w", err)
					}
				}
			}
			if slots[i].active {
				active++
			}
		}
		if active == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = conn.SetReadDeadline(time.Now().Add(udpPoll))
		n, err := conn.Read(rbuf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			// A refused port (ICMP) shows as a read error on a
			// connected socket: the target is not there.
			return fmt.Errorf("kvload: read: %w", err)
		}
		now = time.Now()
		i, ok := matchReply(rbuf[:n], slots)
		if !ok {
			continue
		}
		if done, ok := slots[i].add(rbuf[:n]); !ok || !done {
			continue
		}
		status := slots[i].status
		switch {
		case status == 0 && slots[i].isGet:
			s.hits++
		case status == 1 && slots[i].isGet:
			s.misses++
		case status != 0:
			s.errs++
		}
		s.record(slots[i].start, now, begin, slots[i].isGet)
		slots[i].active = false
		if now.Before(deadline) {
			if err := send(i); err != nil {
				return fmt.Errorf("kvload: send: %w", err)
			}
		}
	}
}

// udpTarget opens the socket of a UDP worker: connected to cfg.Target,
// or, with cfg.Servers, unconnected, with a write function that sends
// each request to its key's server on a ketama ring of the servers.
func udpTarget(ctx context.Context, cfg Config) (net.Conn, func(b, key []byte) error, error) {
	if len(cfg.Servers) == 0 {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "udp", cfg.Target)
		if err != nil {
			return nil, nil, err
		}
		return conn, func(b, _ []byte) error { _, err := conn.Write(b); return err }, nil
	}
	var addrs []*net.UDPAddr
	var rs []ring.Server
	for _, s := range cfg.Servers {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return nil, nil, fmt.Errorf("server %q: %v", s, err)
		}
		addrs = append(addrs, net.UDPAddrFromAddrPort(ap))
		rs = append(rs, ring.Server{Host: ap.Addr().String(), Port: ap.Port(), Weight: 1})
	}
	rg, err := ring.New(ring.Ketama, rs)
	if err != nil {
		return nil, nil, err
	}
	conn, err := net.ListenUDP("udp4", nil)
	if err != nil {
		return nil, nil, err
	}
	return conn, func(b, key []byte) error { _, err := conn.WriteToUDP(b, addrs[rg.Owner(key)]); return err }, nil
}

// matchReply returns the slot a datagram answers: one whose request id
// belongs to an active slot.
func matchReply(p []byte, slots []slot) (int, bool) {
	if len(p) < memcache.FrameHeaderLen {
		return 0, false
	}
	id := binary.BigEndian.Uint16(p[0:])
	for i := range slots {
		if slots[i].active && slots[i].id == id {
			return i, true
		}
	}
	return 0, false
}

// appendBinaryRequest appends a datagram: the frame header and a binary
// get, or a set with flags and expiration time 0.
func appendBinaryRequest(b []byte, id uint16, key []byte, isGet bool, value []byte) []byte {
	var fh [memcache.FrameHeaderLen]byte
	memcache.FrameHeader{RequestID: id, Total: 1}.Put(fh[:])
	b = append(b, fh[:]...)
	var h [memcache.HeaderLen]byte
	h[0] = memcache.MagicRequest
	binary.BigEndian.PutUint16(h[2:], uint16(len(key)))
	binary.BigEndian.PutUint32(h[12:], uint32(id))
	if isGet {
		h[1] = memcache.OpGet
		binary.BigEndian.PutUint32(h[8:], uint32(len(key)))
		b = append(b, h[:]...)
		return append(b, key...)
	}
	h[1] = memcache.OpSet
	h[4] = 8
	binary.BigEndian.PutUint32(h[8:], uint32(8+len(key)+len(value)))
	b = append(b, h[:]...)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	b = append(b, key...)
	return append(b, value...)
}
