package wire

// A probe measures one directed pair. The prober writes its own clock at the
// moment of sending; the responder answers at once with a probe reply that
// echoes the probe and adds its own receive and send times.
//
// Probe (type 2), 24 bytes:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 2    |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      sender (prober) site ID                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    receiver (responder) site ID               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 sequence number (per directed pair)           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              send time t1, prober's clock, ns (int64)         |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Probe reply (type 3), 40 bytes:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 3    |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    sender (responder) site ID                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    receiver (prober) site ID                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 sequence number of the probe                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         t1: the probe's send time, prober's clock, ns         |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|       t2: the probe's receive time, responder's clock, ns     |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        t3: the reply's send time, responder's clock, ns       |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   probes received from this prober (flag 0x01 only), 32 bits  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// With t4 the reply's receive time on the prober's clock, the prober learns
// the offset-shifted one-way delay of its outgoing link, t2 − t1, and the
// round-trip time (t4 − t1) − (t3 − t2), which is free of clock offsets.
//
// A reply with flag 0x01 (FlagReceived, 44 bytes) also carries how many
// probes the responder has received from the prober, this one included (a
// counter that wraps). Between two replies the prober then knows how many
// of its probes arrived (the loss of its outgoing direction) and how many
// replies were sent back (one per probe received: the loss of the return
// direction is those minus the replies that arrived). A reply without
// the flag (40 bytes, from a site that does not count) gives only the
// round-trip loss.

// ProbeLen and ProbeReplyLen are the encoded lengths of the two messages.
const (
	ProbeLen      = CommonHeaderLen + 4 + 4 + 4 + 8
	ProbeReplyLen = CommonHeaderLen + 4 + 4 + 4 + 8 + 8 + 8
	// ProbeReplyCountLen is the length of a reply with FlagReceived.
	ProbeReplyCountLen = ProbeReplyLen + 4
)

// FlagReceived marks a probe reply that carries the responder's count of
// probes received.
const FlagReceived uint8 = 1 << 0

// Offsets of the timestamps in a probe (t1) and a probe reply (t1, t2,
// t3), as drawn above.
const (
	offT1 = 16
	offT2 = 24
	offT3 = 32
	// offReceived is the offset of the count of probes received in a
	// reply with FlagReceived.
	offReceived = 40
)

// Probe is the parsed form of a probe.
type Probe struct {
	Sender   SiteID
	Receiver SiteID
	Seq      uint32
	SendTime int64 // t1, nanoseconds on the prober's clock
}

// ProbeReply is the parsed form of a probe reply.
type ProbeReply struct {
	Sender        SiteID // the responder
	Receiver      SiteID // the prober
	Seq           uint32
	ProbeSendTime int64 // t1, prober's clock
	ProbeRecvTime int64 // t2, responder's clock
	ReplySendTime int64 // t3, responder's clock
	// HasReceived says whether the reply carries Received.
	HasReceived bool
	// Received counts the probes the responder has received from the
	// prober, this one included (it wraps).
	Received uint32
}

// AppendProbe appends the encoding of p to b.
func AppendProbe(b []byte, p *Probe) []byte {
	var m [ProbeLen]byte
	PutCommon(m[:], TypeProbe, 0)
	be.PutUint32(m[4:], uint32(p.Sender))
	be.PutUint32(m[8:], uint32(p.Receiver))
	be.PutUint32(m[12:], p.Seq)
	be.PutUint64(m[offT1:], uint64(p.SendTime))
	return append(b, m[:]...)
}

// ParseProbe decodes a probe, including its common header.
func ParseProbe(b []byte, p *Probe) error {
	if err := expect(b, TypeProbe, ProbeLen); err != nil {
		return err
	}
	p.Sender = SiteID(be.Uint32(b[4:]))
	p.Receiver = SiteID(be.Uint32(b[8:]))
	p.Seq = be.Uint32(b[12:])
	p.SendTime = int64(be.Uint64(b[offT1:]))
	if p.Sender == 0 || p.Receiver == 0 {
		return ErrMalformed
	}
	return nil
}

// AppendProbeReply appends the encoding of r to b.
func AppendProbeReply(b []byte, r *ProbeReply) []byte {
	var m [ProbeReplyCountLen]byte
	n, flags := ProbeReplyLen, uint8(0)
	if r.HasReceived {
		n, flags = ProbeReplyCountLen, FlagReceived
		be.PutUint32(m[offReceived:], r.Received)
	}
	PutCommon(m[:], TypeProbeReply, flags)
	be.PutUint32(m[4:], uint32(r.Sender))
	be.PutUint32(m[8:], uint32(r.Receiver))
	be.PutUint32(m[12:], r.Seq)
	be.PutUint64(m[offT1:], uint64(r.ProbeSendTime))
	be.PutUint64(m[offT2:], uint64(r.ProbeRecvTime))
	be.PutUint64(m[offT3:], uint64(r.ReplySendTime))
	return append(b, m[:n]...)
}

// ParseProbeReply decodes a probe reply, including its common header.
func ParseProbeReply(b []byte, r *ProbeReply) error {
	if err := expect(b, TypeProbeReply, ProbeReplyLen); err != nil {
		return err
	}
	r.Sender = SiteID(be.Uint32(b[4:]))
	r.Receiver = SiteID(be.Uint32(b[8:]))
	r.Seq = be.Uint32(b[12:])
	r.ProbeSendTime = int64(be.Uint64(b[offT1:]))
	r.ProbeRecvTime = int64(be.Uint64(b[offT2:]))
	r.ReplySendTime = int64(be.Uint64(b[offT3:]))
	_, flags, _ := ParseCommon(b)
	r.HasReceived, r.Received = false, 0
	if flags&FlagReceived != 0 {
		if len(b) < ProbeReplyCountLen {
			return ErrTruncated
		}
		r.HasReceived, r.Received = true, be.Uint32(b[offReceived:])
	}
	if r.Sender == 0 || r.Receiver == 0 {
		return ErrMalformed
	}
	return nil
}

// Restamp sets the send time of the probe or probe reply encoded in b to
// t: t1 of a probe, t3 of a reply. A sender calls it just before the
// datagram leaves, so that the time a busy sender took between building
// the message and sending it is not measured as network delay (the
// prober accepts an echoed t1 later than the one it recorded; see
// measure.Link.OnReply). A reply's t3 is never set before its t2. It
// reports whether b was a probe or probe reply; anything else is left
// unchanged.
func Restamp(b []byte, t int64) bool {
	typ, _, err := ParseCommon(b)
	switch {
	case err != nil:
		return false
	case typ == TypeProbe && len(b) >= ProbeLen:
		be.PutUint64(b[offT1:], uint64(t))
		return true
	case typ == TypeProbeReply && len(b) >= ProbeReplyLen:
		if t > int64(be.Uint64(b[offT2:])) {
			be.PutUint64(b[offT3:], uint64(t))
		}
		return true
	}
	return false
}

// expect checks the common header of b for type t and a minimum length n.
// Trailing bytes beyond n are allowed so that later versions can extend a
// message.
func expect(b []byte, t Type, n int) error {
	got, _, err := ParseCommon(b)
	if err != nil {
		return err
	}
	if got != t {
		return ErrMalformed
	}
	if len(b) < n {
		return ErrTruncated
	}
	return nil
}
