package frame

import "encoding/binary"

// A TCP header (RFC 9293):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          source port          |       destination port        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        sequence number                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    acknowledgment number                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Data |       |C|E|U|A|P|R|S|F|                               |
//	| Offset| Rsrvd |W|C|R|C|S|S|Y|I|            window             |
//	|       |       |R|E|G|K|H|T|N|N|                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           checksum            |         urgent pointer        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:              options (data offset * 4 - 20 bytes)             :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Options are a list of kind, length, value, except the one-byte end of
// list (0) and no-operation (1). The MSS option, in SYN segments only:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   kind = 2    |  length = 4   |   maximum segment size (MSS)  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The checksum covers a pseudo header (see csum.go), header and payload.

// Sizes, flags and option kinds of TCP.
const (
	TCPHeaderLen   = 20 // without options
	TCPChecksumOff = 16 // offset of the checksum in the header

	TCPFlagFIN = 0x01
	TCPFlagSYN = 0x02
	TCPFlagRST = 0x04
	TCPFlagPSH = 0x08
	TCPFlagACK = 0x10
	TCPFlagURG = 0x20
	TCPFlagECE = 0x40
	TCPFlagCWR = 0x80

	TCPOptEnd = 0
	TCPOptNOP = 1
	TCPOptMSS = 2
)

// TCP is a view of a TCP segment: header, options and payload.
type TCP []byte

// ParseTCP checks the header at the start of seg (20 bytes, a data
// offset of at least 20 that seg holds) and returns a view of seg. seg
// should end where the IP packet ends, so that Payload is exact.
func ParseTCP(seg []byte) (TCP, error) {
	if len(seg) < TCPHeaderLen {
		return nil, ErrTruncated
	}
	n := int(seg[12]>>4) * 4
	if n < TCPHeaderLen {
		return nil, ErrMalformed
	}
	if len(seg) < n {
		return nil, ErrTruncated
	}
	return TCP(seg), nil
}

// SrcPort returns the source port.
func (t TCP) SrcPort() uint16 { return binary.BigEndian.Uint16(t[0:2]) }

// DstPort returns the destination port.
func (t TCP) DstPort() uint16 { return binary.BigEndian.Uint16(t[2:4]) }

// Seq returns the sequence number.
func (t TCP) Seq() uint32 { return binary.BigEndian.Uint32(t[4:8]) }

// SetSeq writes the sequence number (the caller updates the checksum).
func (t TCP) SetSeq(s uint32) { binary.BigEndian.PutUint32(t[4:8], s) }

// Ack returns the acknowledgment number.
func (t TCP) Ack() uint32 { return binary.BigEndian.Uint32(t[8:12]) }

// HeaderLen returns the data offset in bytes: header and options.
func (t TCP) HeaderLen() int { return int(t[12]>>4) * 4 }

// Flags returns the flags byte (CWR to FIN).
func (t TCP) Flags() uint8 { return t[13] }

// SetFlags writes the flags byte (the caller updates the checksum).
func (t TCP) SetFlags(f uint8) { t[13] = f }

// Window returns the window field.
func (t TCP) Window() uint16 { return binary.BigEndian.Uint16(t[14:16]) }

// SetWindow writes the window field (the caller updates the checksum).
func (t TCP) SetWindow(w uint16) { binary.BigEndian.PutUint16(t[14:16], w) }

// Checksum returns the checksum field.
func (t TCP) Checksum() uint16 { return binary.BigEndian.Uint16(t[16:18]) }

// SetChecksum writes the checksum field.
func (t TCP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(t[16:18], c) }

// Options returns the options (empty without).
func (t TCP) Options() []byte { return t[TCPHeaderLen:t.HeaderLen()] }

// Payload returns the bytes after the header.
func (t TCP) Payload() []byte { return t[t.HeaderLen():] }

// MSS returns the first MSS option of length 4 and the offset of its
// value in the segment. The walk stops, finding nothing, at the end of
// list option or at an option whose length is below 2 or runs past the
// options; MSS options of another length are skipped.
func (t TCP) MSS() (mss uint16, off int, ok bool) {
	opts := t.Options()
	for i := 0; i < len(opts); {
		switch opts[i] {
		case TCPOptEnd:
			return 0, 0, false
		case TCPOptNOP:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return 0, 0, false
		}
		n := int(opts[i+1])
		if n < 2 || i+n > len(opts) {
			return 0, 0, false
		}
		if opts[i] == TCPOptMSS && n == 4 {
			return binary.BigEndian.Uint16(opts[i+2 : i+4]), TCPHeaderLen + i + 2, true
		}
		i += n
	}
	return 0, 0, false
}

// SetMSS writes mss into the MSS option value at off (as MSS returned it)
// and updates the checksum incrementally.
func (t TCP) SetMSS(off int, mss uint16) {
	old := binary.BigEndian.Uint16(t[off : off+2])
	binary.BigEndian.PutUint16(t[off:off+2], mss)
	t.SetChecksum(Update16At(t.Checksum(), off, old, mss))
}
