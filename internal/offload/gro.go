package offload

import (
	"bytes"

	"github.com/detour-overlay/detour/internal/frame"
)

// maxUDPSegments is the most datagrams one UDP super-frame built here
// carries: the kernel's UDP_MAX_SEGMENTS when USO came (Linux 6.2); later
// kernels (6.18 among them) accept 128.
const maxUDPSegments = 64

// Coalescer merges consecutive frames of one flow into one super-frame
// with a virtio_net_hdr, so that a TAP device opened with IFF_VNET_HDR and
// segmentation offloads takes them in one write (the receive side of what
// Split undoes, like the kernel's and wireguard-go's GRO).
//
// TCP segments join when they carry payload, have the same Ethernet
// header, IP addresses, TOS/traffic class, TTL/hop limit, ports,
// acknowledgment number and TCP options as the first, only the ACK flag
// (PSH is allowed on the last one), and start where the previous one
// ended; all but the last have the first's payload size.
//
// UDP datagrams join only after EnableUDP (the device must have accepted
// USO). They join when they carry payload and have the same Ethernet
// header, IP addresses, TOS/traffic class, TTL/hop limit, DF flag and
// ports as the first, over IPv4 the first's IP ID plus the number of
// datagrams merged so far, and the first's payload size, except the last,
// which may be shorter; at most 64 make one super-frame.
//
// One Coalescer holds one flow; it is used by one goroutine and allocates
// nothing after NewCoalescer.
type Coalescer struct {
	buf     []byte // HdrLen bytes for the header, then the super-frame
	n       int    // bytes of buf in use after the header; 0 when empty
	f       l4Frame
	mss     int // payload bytes of the first segment or datagram
	segs    int
	closed  bool // a short (or PSH) segment ended the super-frame
	udp     bool // UDP datagrams may be coalesced
	nextSeq uint32
	psh     bool
	nextID  uint16 // IPv4 ID the next UDP datagram must carry
}

// NewCoalescer returns a Coalescer that builds super-frames in buf, which
// should hold HdrLen plus 65535 plus the Ethernet header bytes. It
// coalesces TCP only until EnableUDP is called.
func NewCoalescer(buf []byte) *Coalescer { return &Coalescer{buf: buf} }

// EnableUDP lets the Coalescer merge UDP datagrams into super-frames of
// GSO type UDP_L4, which only a device with USO (TUN_F_USO4 and
// TUN_F_USO6, Linux 6.2 and later) accepts. Call it before the first Add.
func (c *Coalescer) EnableUDP() { c.udp = true }

// UDP reports whether EnableUDP was called.
func (c *Coalescer) UDP() bool { return c.udp }

// Pending reports whether a super-frame (of one or more segments) waits to
// be flushed.
func (c *Coalescer) Pending() bool { return c.n > 0 }

// Add takes b (an Ethernet frame without virtio_net_hdr) into the
// pending super-frame, or starts one with it when none is pending. It
// returns false when the frame cannot join: the caller then flushes the
// pending super-frame and calls Add again, and if that fails too writes
// the frame on its own. The frame's bytes are copied.
func (c *Coalescer) Add(b []byte) bool {
	var f l4Frame
	if !parseL4(b, &f) || !c.joinable(b, &f) {
		return false
	}
	if c.n == 0 {
		return c.start(b, &f)
	}
	return c.append(b, &f)
}

// joinable reports whether b may be part of a super-frame at all: a
// TCP segment with payload and only ACK (and PSH) set, or, with UDP
// enabled, a UDP datagram with payload whose UDP length is its IP
// payload's.
func (c *Coalescer) joinable(b []byte, f *l4Frame) bool {
	if f.ipEnd == f.end {
		return false
	}
	if f.proto == frame.ProtoTCP {
		return joinableFlags(f.tcp(b).Flags())
	}
	return c.udp && frame.UDP(b[f.l4:]).Len() == f.ipEnd-f.l4
}

// joinableFlags accepts ACK with or without PSH.
func joinableFlags(fl uint8) bool { return fl&^frame.TCPFlagPSH == frame.TCPFlagACK }

// start copies the first segment or datagram.
func (c *Coalescer) start(b []byte, f *l4Frame) bool {
	if HdrLen+f.ipEnd > len(c.buf) {
		return false
	}
	c.n = copy(c.buf[HdrLen:], b[:f.ipEnd])
	c.f, c.mss, c.segs, c.closed = *f, f.ipEnd-f.end, 1, false
	if f.proto == frame.ProtoUDP {
		if !f.v6 {
			c.nextID = f.ipv4ID(b) + 1
		}
		return true
	}
	c.nextSeq = f.tcp(b).Seq() + uint32(c.mss)
	c.psh = f.tcp(b).Flags()&frame.TCPFlagPSH != 0
	c.closed = c.psh
	return true
}

// append adds the payload of a segment or datagram that continues the
// super-frame.
func (c *Coalescer) append(b []byte, f *l4Frame) bool {
	size := f.ipEnd - f.end
	if c.closed || size > c.mss || f.proto != c.f.proto || f.l4 != c.f.l4 || f.end != c.f.end || f.v6 != c.f.v6 {
		return false
	}
	if c.n+size-c.f.l3 > maxIPLength || HdrLen+c.n+size > len(c.buf) {
		return false
	}
	head := c.buf[HdrLen : HdrLen+c.f.end]
	if !sameIP(head, b, f) || !bytes.Equal(head[f.l4:f.l4+4], b[f.l4:f.l4+4]) { // and ports
		return false
	}
	if f.proto == frame.ProtoUDP {
		if !c.continuesUDP(b, f) {
			return false
		}
	} else if !c.continuesTCP(head, b, f) {
		return false
	}
	c.n += copy(c.buf[HdrLen+c.n:], b[f.end:f.ipEnd])
	c.segs++
	if size < c.mss {
		c.closed = true
	}
	return true
}

// continuesTCP checks the TCP fields of a segment of the pending flow and,
// if it continues the super-frame, takes its window and PSH flag.
func (c *Coalescer) continuesTCP(head, b []byte, f *l4Frame) bool {
	tcp, ntcp := frame.TCP(head[f.l4:f.end]), frame.TCP(b[f.l4:f.end])
	if ntcp.Seq() != c.nextSeq || ntcp.Ack() != tcp.Ack() || !bytes.Equal(tcp.Options(), ntcp.Options()) {
		return false
	}
	c.nextSeq += uint32(f.ipEnd - f.end)
	tcp.SetWindow(ntcp.Window()) // the newest
	if ntcp.Flags()&frame.TCPFlagPSH != 0 {
		c.psh, c.closed = true, true
	}
	return true
}

// continuesUDP checks the segment limit and, over IPv4, the IP ID of a
// datagram of the pending flow, and counts it.
func (c *Coalescer) continuesUDP(b []byte, f *l4Frame) bool {
	if c.segs >= maxUDPSegments {
		return false
	}
	if !f.v6 {
		if f.ipv4ID(b) != c.nextID {
			return false
		}
		c.nextID++
	}
	return true
}

// sameIP compares the Ethernet (and VLAN) and IP headers of two frames of
// the same layout, leaving out lengths, IPv4 IDs and checksums.
func sameIP(head, b []byte, f *l4Frame) bool {
	if !bytes.Equal(head[:f.l3], b[:f.l3]) { // Ethernet and VLAN
		return false
	}
	if f.v6 {
		ip, nip := frame.IPv6(head[f.l3:f.l4]), frame.IPv6(b[f.l3:f.l4])
		return ip.TrafficClass() == nip.TrafficClass() && ip.FlowLabel() == nip.FlowLabel() &&
			ip.NextHeader() == nip.NextHeader() && ip.HopLimit() == nip.HopLimit() &&
			[16]byte(ip.Src()) == [16]byte(nip.Src()) && [16]byte(ip.Dst()) == [16]byte(nip.Dst())
	}
	ip, nip := frame.IPv4(head[f.l3:f.l4]), frame.IPv4(b[f.l3:f.l4])
	const flags = 0xe000 // reserved, DF, MF
	return ip.TOS() == nip.TOS() && ip.FlagsFrag()&flags == nip.FlagsFrag()&flags &&
		ip.TTL() == nip.TTL() && ip.Proto() == nip.Proto() &&
		[4]byte(ip.Src()) == [4]byte(nip.Src()) && [4]byte(ip.Dst()) == [4]byte(nip.Dst())
}

// Flush finishes the pending super-frame and returns the bytes to write to
// the TAP device: a virtio_net_hdr and the frame. A lone segment or
// datagram goes out unchanged with a plain header. Several get the IP
// length of the whole and a partial L4 checksum (the folded pseudo-header
// sum) that the header asks the kernel to complete: TCP segments the last
// one's PSH and GSO type TCPv4 or TCPv6, UDP datagrams the UDP length of
// the whole and GSO type UDP_L4; GSOSize is the first's payload. The
// result aliases the buffer and is valid until the next Add. Flush
// empties the Coalescer.
func (c *Coalescer) Flush() []byte {
	out := c.buf[:HdrLen+c.n]
	switch {
	case c.segs == 1:
		PutPlain(out)
	case c.f.proto == frame.ProtoUDP:
		c.finishUDP(out)
	default:
		c.finishTCP(out)
	}
	c.n, c.segs, c.closed, c.psh = 0, 0, false, false
	return out
}

// finishTCP writes the headers of a TCP super-frame of several segments.
func (c *Coalescer) finishTCP(out []byte) {
	b, f := out[HdrLen:], &c.f
	tcpLen := c.n - f.l4
	f.setIPLength(b, tcpLen)
	tcp := f.tcp(b)
	if c.psh {
		tcp.SetFlags(tcp.Flags() | frame.TCPFlagPSH)
	}
	src, dst := f.addrs(b)
	tcp.SetChecksum(frame.Fold(frame.PseudoSum(src, dst, frame.ProtoTCP, tcpLen)))
	gso := uint8(GSOTCPv4)
	if f.v6 {
		gso = GSOTCPv6
	}
	Hdr{Flags: FlagNeedsCsum, GSOType: gso, HdrLen: uint16(f.end), GSOSize: uint16(c.mss),
		CsumStart: uint16(f.l4), CsumOffset: frame.TCPChecksumOff}.Put(out)
}

// finishUDP writes the headers of a UDP super-frame of several datagrams.
func (c *Coalescer) finishUDP(out []byte) {
	b, f := out[HdrLen:], &c.f
	l4Len := c.n - f.l4
	f.setIPLength(b, l4Len)
	udp := frame.UDP(b[f.l4:])
	udp.SetLen(l4Len)
	src, dst := f.addrs(b)
	udp.SetChecksum(frame.Fold(frame.PseudoSum(src, dst, frame.ProtoUDP, l4Len)))
	Hdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: uint16(f.end), GSOSize: uint16(c.mss),
		CsumStart: uint16(f.l4), CsumOffset: frame.UDPChecksumOff}.Put(out)
}
