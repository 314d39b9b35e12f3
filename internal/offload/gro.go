package offload

import (
	"bytes"
	"encoding/binary"
)

// Coalescer merges consecutive, in-order TCP segments of one flow into one
// super-frame with a virtio_net_hdr, so that a TAP device opened with
// IFF_VNET_HDR and TSO offloads takes them in one write (the receive side
// of what Split undoes, like the kernel's and wireguard-go's TCP GRO).
//
// Segments join when they carry payload, have the same Ethernet header,
// IP addresses, TOS/traffic class, TTL/hop limit, ports, acknowledgment
// number and TCP options as the first, only the ACK flag (PSH is allowed
// on the last one), and start where the previous one ended; all but the
// last have the first's payload size. One Coalescer holds one flow; it is
// used by one goroutine and allocates nothing after NewCoalescer.
type Coalescer struct {
	buf     []byte // HdrLen bytes for the header, then the super-frame
	n       int    // bytes of buf in use after the header; 0 when empty
	f       tcpFrame
	mss     int
	nextSeq uint32
	segs    int
	closed  bool // a short or PSH segment ended the super-frame
	psh     bool
}

// NewCoalescer returns a Coalescer that builds super-frames in buf, which
// should hold HdrLen plus 65535 plus the Ethernet header bytes.
func NewCoalescer(buf []byte) *Coalescer { return &Coalescer{buf: buf} }

// Pending reports whether a super-frame (of one or more segments) waits to
// be flushed.
func (c *Coalescer) Pending() bool { return c.n > 0 }

// Add takes frame (an Ethernet frame without virtio_net_hdr) into the
// pending super-frame, or starts one with it when none is pending. It
// returns false when the frame cannot join: the caller then flushes the
// pending super-frame and calls Add again, and if that fails too writes
// the frame on its own. The frame's bytes are copied.
func (c *Coalescer) Add(frame []byte) bool {
	var f tcpFrame
	if !parseTCP(frame, &f) || !joinableFlags(frame[f.l4+13]) || f.ipEnd == f.end {
		return false
	}
	if c.n == 0 {
		return c.start(frame, &f)
	}
	return c.append(frame, &f)
}

// joinableFlags accepts ACK with or without PSH.
func joinableFlags(fl uint8) bool { return fl&^tcpFlagPSH == tcpFlagACK }

// start copies the first segment.
func (c *Coalescer) start(frame []byte, f *tcpFrame) bool {
	if HdrLen+f.ipEnd > len(c.buf) {
		return false
	}
	c.n = copy(c.buf[HdrLen:], frame[:f.ipEnd])
	c.f, c.mss, c.segs = *f, f.ipEnd-f.end, 1
	c.nextSeq = binary.BigEndian.Uint32(frame[f.l4+4:]) + uint32(c.mss)
	c.psh = frame[f.l4+13]&tcpFlagPSH != 0
	c.closed = c.psh
	return true
}

// append adds the payload of a segment that continues the super-frame.
func (c *Coalescer) append(frame []byte, f *tcpFrame) bool {
	size := f.ipEnd - f.end
	if c.closed || size > c.mss || f.l4 != c.f.l4 || f.end != c.f.end || f.v6 != c.f.v6 {
		return false
	}
	if c.n+size-c.f.l3 > maxIPLength || HdrLen+c.n+size > len(c.buf) {
		return false
	}
	head := c.buf[HdrLen : HdrLen+c.f.end]
	if binary.BigEndian.Uint32(frame[f.l4+4:]) != c.nextSeq || !sameFlow(head, frame, f) {
		return false
	}
	c.n += copy(c.buf[HdrLen+c.n:], frame[f.end:f.ipEnd])
	c.nextSeq += uint32(size)
	c.segs++
	copy(head[f.l4+14:f.l4+16], frame[f.l4+14:f.l4+16]) // the newest window
	if frame[f.l4+13]&tcpFlagPSH != 0 {
		c.psh, c.closed = true, true
	}
	if size < c.mss {
		c.closed = true
	}
	return true
}

// sameFlow compares everything but lengths, IDs, checksums, sequence
// numbers, flags and windows of two segments' headers.
func sameFlow(head, frame []byte, f *tcpFrame) bool {
	if !bytes.Equal(head[:f.l3], frame[:f.l3]) { // Ethernet and VLAN
		return false
	}
	ip, nip := head[f.l3:f.l4], frame[f.l3:f.l4]
	if f.v6 {
		if !bytes.Equal(ip[:4], nip[:4]) || !bytes.Equal(ip[6:], nip[6:]) {
			return false
		}
	} else if ip[1] != nip[1] || ip[6]&0xe0 != nip[6]&0xe0 || !bytes.Equal(ip[8:10], nip[8:10]) || !bytes.Equal(ip[12:20], nip[12:20]) {
		return false
	}
	tcp, ntcp := head[f.l4:f.end], frame[f.l4:f.end]
	return bytes.Equal(tcp[0:4], ntcp[0:4]) && // ports
		bytes.Equal(tcp[8:12], ntcp[8:12]) && // acknowledgment
		bytes.Equal(tcp[20:], ntcp[20:]) // options
}

// Flush finishes the pending super-frame and returns the bytes to write to
// the TAP device: a virtio_net_hdr and the frame. A lone segment goes out
// unchanged with a plain header; several get the IP length of the whole,
// the last segment's PSH, and a partial TCP checksum that the header asks
// the kernel to complete (GSO type TCPv4 or TCPv6, GSOSize the first
// segment's payload). The result aliases the buffer and is valid until the
// next Add. Flush empties the Coalescer.
func (c *Coalescer) Flush() []byte {
	out := c.buf[:HdrLen+c.n]
	frame := out[HdrLen:]
	f := &c.f
	if c.segs == 1 {
		PutPlain(out)
	} else {
		tcpLen := c.n - f.l4
		f.setIPLength(frame, tcpLen)
		tcp := frame[f.l4:]
		if c.psh {
			tcp[13] |= tcpFlagPSH
		}
		src, dst := f.addrs(frame)
		binary.BigEndian.PutUint16(tcp[tcpCsumOff:], fold(pseudoSum(src, dst, protoTCP, tcpLen)))
		gso := uint8(GSOTCPv4)
		if f.v6 {
			gso = GSOTCPv6
		}
		Hdr{Flags: FlagNeedsCsum, GSOType: gso, HdrLen: uint16(f.end), GSOSize: uint16(c.mss),
			CsumStart: uint16(f.l4), CsumOffset: tcpCsumOff}.Put(out)
	}
	c.n, c.segs, c.closed, c.psh = 0, 0, false, false
	return out
}
