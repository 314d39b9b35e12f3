package wire

// An in-band report gives a link's prober the delays that the data
// packets it sent on the link measured. The first receiver of a stamped
// data packet (see DataFlagStamped) takes a sample of the link from the
// packet's source; it sends its samples, a few at a time, back to that
// source, the site that measures and reports the link, which adds them to
// the probes' samples. A link that carries traffic is then measured at
// the rate of its traffic (up to one sample in a few milliseconds), not
// only at the rate of its probes.
//
// In-band report (type 17), 24 + 4 × (count − 1) bytes:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 17   |   flags = 0   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           sender site ID (the data's first receiver)          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         receiver site ID (the data's source, the prober)      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     count     |                   reserved                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      sample 0: offset-shifted one-way delay, ns (int64)       |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          sample 1: ns from sample 0 (int32)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:                              ...                              :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The samples are offset-shifted one-way delays of the link from the
// receiver to the sender, on the same scale as a probe's t2 − t1 (the
// sender's clock less the receiver's), oldest first. A count of 0 or more
// than MaxInbandSamples is malformed; the encoder refuses a sample more
// than 2^31 ns from the first.

// TypeInband is an in-band report.
const TypeInband Type = 17

// MaxInbandSamples bounds the samples of one report.
const MaxInbandSamples = 64

// InbandHeaderLen is the length of an in-band report without its samples.
const InbandHeaderLen = CommonHeaderLen + 4 + 4 + 4 + 8

// Inband is the parsed form of an in-band report.
type Inband struct {
	Sender, Receiver SiteID
	// Count is the number of samples; Samples[:Count] are
	// offset-shifted delays in nanoseconds, oldest first.
	Count   int
	Samples [MaxInbandSamples]int64
}

// Values returns the report's samples.
func (r *Inband) Values() []int64 { return r.Samples[:r.Count] }

// InbandLen returns the encoded length of a report of n samples.
func InbandLen(n int) int { return InbandHeaderLen + 4*(n-1) }

// AppendInband appends the encoding of r to b. It fails on a report of
// no samples or of more than MaxInbandSamples, or one whose samples span
// more than an int32 of nanoseconds from the first.
func AppendInband(b []byte, r *Inband) ([]byte, error) {
	n := r.Count
	if n <= 0 || n > MaxInbandSamples {
		return b, ErrMalformed
	}
	base := r.Samples[0]
	var h [InbandHeaderLen]byte
	PutCommon(h[:], TypeInband, 0)
	be.PutUint32(h[4:], uint32(r.Sender))
	be.PutUint32(h[8:], uint32(r.Receiver))
	h[12] = byte(n)
	be.PutUint64(h[16:], uint64(base))
	start := len(b)
	b = append(b, h[:]...)
	for _, v := range r.Values()[1:] {
		d := v - base
		if d != int64(int32(d)) {
			return b[:start], ErrMalformed
		}
		b = be.AppendUint32(b, uint32(int32(d)))
	}
	return b, nil
}

// ParseInband decodes an in-band report, including its common header,
// into r.
func ParseInband(b []byte, r *Inband) error {
	if err := expect(b, TypeInband, InbandHeaderLen); err != nil {
		return err
	}
	n := int(b[12])
	if n == 0 || n > MaxInbandSamples {
		return ErrMalformed
	}
	if len(b) < InbandLen(n) {
		return ErrTruncated
	}
	r.Sender = SiteID(be.Uint32(b[4:]))
	r.Receiver = SiteID(be.Uint32(b[8:]))
	if r.Sender == 0 || r.Receiver == 0 {
		return ErrMalformed
	}
	base := int64(be.Uint64(b[16:]))
	r.Count = n
	r.Samples[0] = base
	for i := 1; i < n; i++ {
		d := int32(be.Uint32(b[InbandHeaderLen+4*(i-1):]))
		r.Samples[i] = base + int64(d)
	}
	return nil
}
