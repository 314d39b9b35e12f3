package offload

import (
	"encoding/binary"
	"errors"

	"github.com/detour-overlay/detour/internal/frame"
)

// Errors of Split.
var (
	ErrNoRoom      = errors.New("offload: not enough output buffers or room in them")
	ErrUnsupported = errors.New("offload: unsupported GSO type or frame")
	ErrBadOffsets  = errors.New("offload: checksum offsets outside the frame")
)

// Split turns what a TAP device with IFF_VNET_HDR gave (pkt: a
// virtio_net_hdr and an Ethernet frame) into ordinary Ethernet frames with
// complete checksums, written into outs; sizes[i] is set to the length of
// frame i and the number of frames is returned.
//
// A TCP super-frame (GSO type TCPv4 or TCPv6) becomes one frame per
// GSOSize bytes of payload, each with its own IP length (and IPv4 ID and
// header checksum), TCP sequence number and checksum; FIN and PSH stay on
// the last segment only, CWR on the first. A UDP super-frame (GSO type
// UDP_L4, from a sender using UDP_SEGMENT) becomes one datagram per
// GSOSize bytes of payload, each with its own IP length (and IPv4 ID, the
// first's plus its index, and header checksum), UDP length and complete
// UDP checksum. A frame without GSO is copied, its partial checksum
// completed if the header asks for it. pkt may be modified. Split
// allocates nothing.
func Split(pkt []byte, outs [][]byte, sizes []int) (int, error) {
	h, err := ParseHdr(pkt)
	if err != nil {
		return 0, err
	}
	b := pkt[HdrLen:]
	switch h.GSOType &^ GSOECN {
	case GSONone:
		return splitNone(b, h, outs, sizes)
	case GSOTCPv4, GSOTCPv6:
		return splitTCP(b, h, outs, sizes)
	case GSOUDPL4:
		return splitUDP(b, h, outs, sizes)
	}
	return 0, ErrUnsupported
}

// splitNone completes a partial checksum and copies the frame.
func splitNone(b []byte, h Hdr, outs [][]byte, sizes []int) (int, error) {
	if h.Flags&FlagNeedsCsum != 0 {
		if err := completeChecksum(b, int(h.CsumStart), int(h.CsumOffset)); err != nil {
			return 0, err
		}
	}
	if len(outs) == 0 || len(sizes) == 0 || len(outs[0]) < len(b) {
		return 0, ErrNoRoom
	}
	sizes[0] = copy(outs[0], b)
	return 1, nil
}

// completeChecksum finishes a checksum the sender left partial: the field
// at start+off holds the pseudo-header sum; the checksum covers
// b[start:]. At a UDP checksum's offset a result of 0, which would
// mean "no checksum" (and is invalid over IPv6), is written as 0xffff.
func completeChecksum(b []byte, start, off int) error {
	if start > len(b) || off < 0 || start+off+2 > len(b) {
		return ErrBadOffsets
	}
	c := frame.Checksum(b[start:], 0)
	if off == frame.UDPChecksumOff {
		c = frame.UDPChecksum(c)
	}
	binary.BigEndian.PutUint16(b[start+off:], c)
	return nil
}

// splitTCP cuts a TCP super-frame into segments of h.GSOSize payload bytes.
func splitTCP(b []byte, h Hdr, outs [][]byte, sizes []int) (int, error) {
	var f l4Frame
	// The kernel gives a super-frame valid IP lengths (up to 64 KB).
	if !parseTCP(b, &f) || h.GSOSize == 0 || f.v6 != (h.GSOType&^GSOECN == GSOTCPv6) {
		return 0, ErrUnsupported
	}
	n, err := cut(b, &f, int(h.GSOSize), outs, sizes)
	if err != nil {
		return 0, err
	}
	seq, flags := f.tcp(b).Seq(), f.tcp(b).Flags()
	for i := 0; i < n; i++ {
		fl := flags
		if i < n-1 {
			fl &^= frame.TCPFlagFIN | frame.TCPFlagPSH
		}
		if i > 0 {
			fl &^= frame.TCPFlagCWR
		}
		segment(outs[i][:sizes[i]], &f, seq+uint32(i*int(h.GSOSize)), fl, uint16(i))
	}
	return n, nil
}

// cut copies the headers of b and each size bytes of its payload
// (the last piece may be shorter) into outs, one piece each, setting
// sizes, and returns the number of pieces. The caller fixes each piece's
// headers.
func cut(b []byte, f *l4Frame, size int, outs [][]byte, sizes []int) (int, error) {
	payload := b[f.end:f.ipEnd]
	n := max(1, (len(payload)+size-1)/size)
	if n > len(outs) || n > len(sizes) {
		return 0, ErrNoRoom
	}
	for i := 0; i < n; i++ {
		chunk := payload[i*size : min((i+1)*size, len(payload))]
		out := outs[i]
		if len(out) < f.end+len(chunk) {
			return 0, ErrNoRoom
		}
		copy(out, b[:f.end])
		copy(out[f.end:], chunk)
		sizes[i] = f.end + len(chunk)
	}
	return n, nil
}

// segment fixes the headers of one segment out (headers and payload) cut
// from a super-frame: IP length, IPv4 ID and header checksum, TCP sequence
// number, flags and checksum.
func segment(out []byte, f *l4Frame, seq uint32, flags uint8, i uint16) {
	tcpLen := len(out) - f.l4
	if !f.v6 {
		f.setIPv4ID(out, f.ipv4ID(out)+i)
	}
	f.setIPLength(out, tcpLen)
	tcp := f.tcp(out)
	tcp.SetSeq(seq)
	tcp.SetFlags(flags)
	tcp.SetChecksum(0)
	src, dst := f.addrs(out)
	tcp.SetChecksum(frame.Checksum(tcp, frame.PseudoSum(src, dst, frame.ProtoTCP, tcpLen)))
}

// splitUDP cuts a UDP super-frame into datagrams of h.GSOSize payload
// bytes (the last may be shorter).
func splitUDP(b []byte, h Hdr, outs [][]byte, sizes []int) (int, error) {
	var f l4Frame
	if !parseUDP(b, &f) || h.GSOSize == 0 {
		return 0, ErrUnsupported
	}
	n, err := cut(b, &f, int(h.GSOSize), outs, sizes)
	if err != nil {
		return 0, err
	}
	for i := 0; i < n; i++ {
		datagram(outs[i][:sizes[i]], &f, uint16(i))
	}
	return n, nil
}

// datagram fixes the headers of the i-th datagram out (headers and
// payload) cut from a UDP super-frame: IP length, IPv4 ID and header
// checksum, UDP length and checksum.
func datagram(out []byte, f *l4Frame, i uint16) {
	l4Len := len(out) - f.l4
	if !f.v6 {
		f.setIPv4ID(out, f.ipv4ID(out)+i)
	}
	f.setIPLength(out, l4Len)
	udp := frame.UDP(out[f.l4:])
	udp.SetLen(l4Len)
	udp.SetChecksum(0)
	src, dst := f.addrs(out)
	udp.SetChecksum(frame.UDPChecksum(frame.Checksum(udp, frame.PseudoSum(src, dst, frame.ProtoUDP, l4Len))))
}
