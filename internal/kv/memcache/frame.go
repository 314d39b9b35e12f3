package memcache

import "encoding/binary"

// FrameHeaderLen is the length of the memcached UDP frame header.
const FrameHeaderLen = 8

// FrameHeader is the header in front of every memcached datagram (see the
// package comment for its layout).
type FrameHeader struct {
	RequestID uint16
	Seq       uint16
	Total     uint16
	Reserved  uint16
}

// ParseFrame splits a UDP payload into its frame header and the request
// bytes behind it. Like memcached it refuses a datagram of 8 bytes or
// fewer (ErrShortFrame) and one whose header announces a request of more
// than one datagram (ErrSpansDatagrams); it ignores the sequence number
// and the reserved field, as memcached does.
func ParseFrame(p []byte) (FrameHeader, []byte, error) {
	if len(p) <= FrameHeaderLen {
		return FrameHeader{}, nil, ErrShortFrame
	}
	h := FrameHeader{
		RequestID: binary.BigEndian.Uint16(p[0:]),
		Seq:       binary.BigEndian.Uint16(p[2:]),
		Total:     binary.BigEndian.Uint16(p[4:]),
		Reserved:  binary.BigEndian.Uint16(p[6:]),
	}
	if h.Total != 1 {
		return h, nil, ErrSpansDatagrams
	}
	return h, p[FrameHeaderLen:], nil
}

// Put writes h into the first 8 bytes of b.
func (h FrameHeader) Put(b []byte) {
	_ = b[7]
	binary.BigEndian.PutUint16(b[0:], h.RequestID)
	binary.BigEndian.PutUint16(b[2:], h.Seq)
	binary.BigEndian.PutUint16(b[4:], h.Total)
	binary.BigEndian.PutUint16(b[6:], h.Reserved)
}

// ParseDatagram parses a UDP payload: the frame header and the first
// request behind it. A request the datagram does not hold whole gives
// ErrIncomplete, which over UDP means it is truncated or spans
// datagrams; memcached never answers it. The payload behind the header is
// returned too: when r.Len is shorter, the datagram carries a pipeline of
// requests (see Splitter.SplitPipeline).
func ParseDatagram(p []byte, r *Request) (FrameHeader, []byte, error) {
	h, payload, err := ParseFrame(p)
	if err != nil {
		*r = Request{}
		return h, nil, err
	}
	return h, payload, Parse(payload, r)
}
