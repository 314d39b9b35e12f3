package transport

import (
	"encoding/binary"
	"net/netip"
	"time"
)

// UDP segmentation offload (GSO) and receive coalescing (GRO) without the
// callers noticing. These are the pure parts: which messages of a batch go
// out as one GSO send, how control messages are written and read, and how a
// coalesced datagram is cut back into messages. The system calls live in
// udp_linux.go.

const (
	// maxGSOSegments is the most datagrams one GSO send carries. Kernels
	// before 6.9 accept 64 (UDP_MAX_SEGMENTS); newer ones 128.
	maxGSOSegments = 64
	// maxGSOBytes is the most payload one GSO send carries: the largest
	// IPv4 datagram less its IP and UDP headers.
	maxGSOBytes = 65535 - 20 - 8
	// cmsgHdrLen is the size of struct cmsghdr on 64-bit Linux; the data
	// of a control message follows it, and each message is padded to 8.
	cmsgHdrLen = 16
	// gsoCmsgLen is the space of one UDP_SEGMENT control message (a
	// uint16 segment size).
	gsoCmsgLen = cmsgHdrLen + 8
	// rxCmsgLen is the space for the control messages of a receive: the
	// UDP_GRO message and the SO_TIMESTAMPNS one (a timespec).
	rxCmsgLen = groCmsgLen + cmsgHdrLen + 16
	// groCmsgLen is the space of the UDP_GRO control message (an int);
	// the receive buffer has room for a second message in case the kernel
	// adds one.
	groCmsgLen = 2 * (cmsgHdrLen + 8)
	// solUDP and the option numbers, as in <netinet/udp.h>.
	solUDP = 17
	// solSocket and scmTimestampNS are SOL_SOCKET and SCM_TIMESTAMPNS
	// (the same value as SO_TIMESTAMPNS).
	solSocket      = 1
	scmTimestampNS = 35
	udpSegment     = 103
	udpGRO         = 104
)

// gsoGroup returns how many messages, starting at msgs[0], can leave in one
// GSO send: consecutive messages to the same address, all of the first
// one's size except possibly the last, which may be shorter, within the
// kernel's limits on segments and bytes. It returns at least 1.
func gsoGroup(msgs []Message) int {
	if len(msgs) == 0 {
		return 0
	}
	size, addr := msgs[0].N, msgs[0].Addr
	if size == 0 {
		return 1
	}
	total, k := size, 1
	for k < len(msgs) && k < maxGSOSegments {
		m := &msgs[k]
		if m.Addr != addr || m.N > size || m.N == 0 || total+m.N > maxGSOBytes {
			break
		}
		total += m.N
		k++
		if m.N < size {
			break // a shorter datagram can only be the last segment
		}
	}
	return k
}

// putGSOCmsg writes a UDP_SEGMENT control message for segments of size
// into b (at least gsoCmsgLen bytes) and returns its length.
func putGSOCmsg(b []byte, size int) int {
	binary.NativeEndian.PutUint64(b[0:8], cmsgHdrLen+2)
	binary.NativeEndian.PutUint32(b[8:12], solUDP)
	binary.NativeEndian.PutUint32(b[12:16], udpSegment)
	binary.NativeEndian.PutUint16(b[16:18], uint16(size))
	clear(b[18:gsoCmsgLen])
	return gsoCmsgLen
}

// groSize returns the segment size of a coalesced datagram from the
// control messages ctl a receive returned, or 0 when there is none (the
// datagram is a single one). Malformed control data yields 0.
func groSize(ctl []byte) int {
	size := 0
	walkCmsgs(ctl, func(level, typ uint32, data []byte) {
		if level == solUDP && typ == udpGRO && len(data) >= 4 {
			size = max(0, int(int32(binary.NativeEndian.Uint32(data))))
		}
	})
	return size
}

// rxTime returns the kernel's receive time of a datagram from its control
// messages (SO_TIMESTAMPNS: a struct timespec of two 64-bit fields), or
// the zero time when there is none.
func rxTime(ctl []byte) time.Time {
	var at time.Time
	walkCmsgs(ctl, func(level, typ uint32, data []byte) {
		if level == solSocket && typ == scmTimestampNS && len(data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(data[8:16]))
			if sec > 0 && nsec >= 0 && nsec < 1e9 {
				at = time.Unix(sec, nsec)
			}
		}
	})
	return at
}

// walkCmsgs calls fn for every well-formed control message in ctl (struct
// cmsghdr on 64-bit Linux: a 64-bit length, level and type, then the
// data, padded to 8 bytes). It stops at the first malformed one.
func walkCmsgs(ctl []byte, fn func(level, typ uint32, data []byte)) {
	for len(ctl) >= cmsgHdrLen {
		l := binary.NativeEndian.Uint64(ctl[0:8])
		if l < cmsgHdrLen || l > uint64(len(ctl)) {
			return
		}
		fn(binary.NativeEndian.Uint32(ctl[8:12]), binary.NativeEndian.Uint32(ctl[12:16]), ctl[cmsgHdrLen:l])
		next := (l + 7) &^ 7
		if next >= uint64(len(ctl)) {
			return
		}
		ctl = ctl[next:]
	}
}

// segments is how many datagrams a coalesced datagram of n bytes with
// segment size seg holds.
func segments(n, seg int) int {
	if seg <= 0 || n <= seg {
		return 1
	}
	return (n + seg - 1) / seg
}

// spill holds the datagrams of coalesced receives that did not fit into the
// caller's batch; the next ReadBatch returns them first. Its storage grows
// to the largest need seen and is then reused, so that a steady state
// allocates nothing.
type spill struct {
	data []byte
	msgs []spilled
	next int // first message not yet returned
}

type spilled struct {
	off, n int
	addr   netip.AddrPort
	at     time.Time
}

// pending reports whether datagrams wait in the spill.
func (s *spill) pending() bool { return s.next < len(s.msgs) }

// reset empties the spill, keeping its storage.
func (s *spill) reset() { s.data, s.msgs, s.next = s.data[:0], s.msgs[:0], 0 }

// add copies one datagram into the spill.
func (s *spill) add(b []byte, addr netip.AddrPort, at time.Time) {
	off := len(s.data)
	s.data = append(s.data, b...)
	s.msgs = append(s.msgs, spilled{off: off, n: len(b), addr: addr, at: at})
}

// drain copies waiting datagrams into msgs and returns how many.
// Datagrams longer than a message's buffer are truncated, as a receive
// would truncate them.
func (s *spill) drain(msgs []Message) int {
	n := 0
	for n < len(msgs) && s.pending() {
		d := s.msgs[s.next]
		msgs[n].N = copy(msgs[n].Buf, s.data[d.off:d.off+d.n])
		msgs[n].Addr, msgs[n].At = d.addr, d.at
		s.next++
		n++
	}
	if !s.pending() {
		s.reset()
	}
	return n
}

// splitCoalesced cuts the first got messages of msgs, whose segment sizes
// (0 for a plain datagram) are in seg, into one message per datagram, in
// order. Datagrams that do not fit into len(msgs) messages go to sp. It
// returns the number of messages filled.
//
// It works from the last message back, so that every message is copied to
// its final place before anything is written over it: message i's
// datagrams go to places at or after i, and only messages after i have
// been placed yet.
func splitCoalesced(msgs []Message, got int, seg []int, sp *spill) int {
	total := 0
	for i := 0; i < got; i++ {
		total += segments(msgs[i].N, seg[i])
	}
	if total == got {
		return got
	}
	// fit is how many of the received messages expand fully within msgs;
	// the message after them is cut partly, the rest spill whole.
	fit, places := 0, 0
	for fit < got && places+segments(msgs[fit].N, seg[fit]) <= len(msgs) {
		places += segments(msgs[fit].N, seg[fit])
		fit++
	}
	if fit < got {
		spillFrom(msgs, fit, got, seg, len(msgs)-places, sp)
	}
	pos := places
	for i := fit - 1; i >= 0; i-- {
		k := segments(msgs[i].N, seg[i])
		pos -= k
		placeSegments(msgs, i, pos, k, seg[i])
	}
	if fit < got {
		// The straddling message's first datagrams fill the tail.
		return len(msgs)
	}
	return places
}

// spillFrom places the first room datagrams of message fit at the end of
// msgs (from index len(msgs)-room on, all after every other message that
// is still to be placed) and moves the rest, and every later message, to
// the spill. Message fit is read before anything is written over it.
func spillFrom(msgs []Message, fit, got int, seg []int, room int, sp *spill) {
	m := &msgs[fit]
	k, s := segments(m.N, seg[fit]), seg[fit]
	if k == 1 {
		s = m.N
	}
	sp.reset()
	for j := room; j < k; j++ {
		sp.add(m.Buf[j*s:min((j+1)*s, m.N)], m.Addr, m.At)
	}
	for i := fit + 1; i < got; i++ {
		mi := &msgs[i]
		ki, si := segments(mi.N, seg[i]), seg[i]
		if ki == 1 {
			si = mi.N
		}
		for j := 0; j < ki; j++ {
			sp.add(mi.Buf[j*si:min((j+1)*si, mi.N)], mi.Addr, mi.At)
		}
	}
	if room > 0 {
		placeSegments(msgs, fit, len(msgs)-room, room, s)
	}
}

// placeSegments copies the first k datagrams of message i (segment size
// s) to messages pos..pos+k-1, last first, so that message i's own buffer
// is read before it can be written (only when pos == i, and then its
// first datagram is already in place). k may be less than the number of
// datagrams the message holds.
func placeSegments(msgs []Message, i, pos, k, s int) {
	src := &msgs[i]
	n, addr, at := src.N, src.Addr, src.At
	if s <= 0 || s > n {
		s = n // a plain datagram
	}
	for j := k - 1; j >= 0; j-- {
		end := min((j+1)*s, n)
		d := &msgs[pos+j]
		if pos+j == i {
			d.N = end - j*s // j == 0: already at the start of its buffer
			continue
		}
		d.N = copy(d.Buf, src.Buf[j*s:end])
		d.Addr, d.At = addr, at
	}
}
