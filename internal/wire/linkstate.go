package wire

import "time"

// A link-state message carries one site's measurements of its outgoing links
// to every other member. Every site floods its own and keeps the latest per
// origin, so that all sites hold the same matrix. The pair (incarnation,
// sequence number) orders the messages of one origin: a higher incarnation
// (a restarted site) always wins, and within an incarnation the higher
// sequence number wins.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 4    |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        origin site ID                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    origin's incarnation (64 bits)             |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        sequence number                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        entry count            |           reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:                  entries, 24 bytes each                       :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Each entry describes the link from the origin to one peer:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          peer site ID                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  link flags   |  drift (ppm)  |   loss (fraction × 65535)     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 round-trip time, microseconds                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     jitter, microseconds      |  packets the loss is over     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    offset-shifted one-way delay, nanoseconds (signed 64 bits) |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The drift is how fast the origin sees the offset-shifted delay move
// with the two clocks' skew, in parts per million (signed, saturated at
// ±127; zero from sites that do not say): a receiver extrapolates the
// delay by it between two reports. Link flag bit 0 means the link is up. The loss is the origin's
// outgoing direction only, over the number of probes given beside the
// jitter (both saturate at 65535), from which every site computes the
// same confidence interval. A message whose common header has flag 0x01
// (FlagLossSamples) has this layout; without it (an older site) the
// jitter takes all 32 bits and the sample count is unknown. The
// offset-shifted delay is
// receive time minus send time on two unsynchronised clocks; it may be
// negative and is only meaningful in sums and differences of paths between
// the same two sites.

// Flag 0x02 (FlagDelta) says the message carries only some of the
// origin's links, those that changed and a share refreshed in turn: the
// receiver updates the entries listed and keeps the others (an entry
// older than the one held, by sequence number, is ignored). Without it
// the message is the origin's whole row and replaces what is held. A
// row too long for one datagram is sent as several delta messages.

// Flag 0x04 (FlagRates) says a rate section follows the entries: one
// 4-byte record per entry, in the entries' order, giving the available
// throughput of the reverse direction of the entry's link, from the peer
// to the origin, as the origin (that direction's receiver) estimates it.
// Every site then knows the rate of every directed link: the rate of
// u → v is in v's report, its delay in u's.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  exp  |  rate mantissa (12)   |   rate kind   |  age, seconds |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The rate is mantissa << exp kbit/s (up to 134 Gbit/s, within 1/2048 of
// the value sent). The kind says what it rests on (RateKind*: 0 nothing
// known, 1 a lower bound from detour's own traffic, 2 a packet train, 3
// detour's own traffic filling the link; others are read as 0) and the age
// how old the estimate is (saturated at 255). Older sites ignore the
// flag and the bytes after the entries, so a report with rates parses
// there as before; a report without the flag has no rates. A message
// with the section carries at most MaxRatedLinkEntries entries.

// Link-state sizes.
const (
	LinkStateFixedLen = CommonHeaderLen + 4 + 8 + 4 + 4
	LinkEntryLen      = 24
	// MaxLinkEntries bounds the entries of one message so that it fits in
	// a 1400-byte datagram.
	MaxLinkEntries = (1400 - LinkStateFixedLen) / LinkEntryLen
	// LinkRateLen is the length of one record of the rate section.
	LinkRateLen = 4
	// MaxRatedLinkEntries bounds the entries of a message with a rate
	// section so that it fits in a 1400-byte datagram.
	MaxRatedLinkEntries = (1400 - LinkStateFixedLen) / (LinkEntryLen + LinkRateLen)
)

// FlagRates marks a link-state message with a rate section.
const FlagRates uint8 = 1 << 2

// Rate kinds of the rate section.
const (
	RateKindNone       uint8 = 0
	RateKindLowerBound uint8 = 1
	RateKindTrain      uint8 = 2
	RateKindSaturated  uint8 = 3
)

// FlagLossSamples marks a link-state message whose entries carry the
// number of probes their loss is over.
const FlagLossSamples uint8 = 1 << 0

// FlagDelta marks a link-state message that updates only the entries it
// carries.
const FlagDelta uint8 = 1 << 1

// LinkFlagUp marks a link as up in LinkEntry.Flags.
const LinkFlagUp uint8 = 1 << 0

// LinkEntry is one link of a link-state message.
type LinkEntry struct {
	Peer   SiteID
	Flags  uint8
	Loss   uint16 // fraction lost × 65535
	RTT    uint32 // microseconds
	Jitter uint16 // microseconds
	// LossSamples is the number of probes Loss is over; 0 if unknown.
	LossSamples uint16
	// Drift is the rate of change of Delay with clock skew, in ppm.
	Drift int8
	Delay int64 // offset-shifted one-way delay, nanoseconds
	// RevRate is the available throughput of the reverse direction (peer
	// to origin) in kbit/s, as the rate section carries it (rounded by
	// RateToWire), RevRateKind what it rests on and RevRateAge its age in
	// seconds; all zero in a message without the section.
	RevRate     uint32
	RevRateKind uint8
	RevRateAge  uint8
}

// Up reports whether the link is up.
func (e *LinkEntry) Up() bool { return e.Flags&LinkFlagUp != 0 }

// LinkState is the parsed form of a link-state message. Entries aliases a
// caller-provided slice so that parsing does not allocate.
type LinkState struct {
	Origin      SiteID
	Incarnation uint64
	Seq         uint32
	// Delta says the entries update the origin's row rather than
	// replace it (FlagDelta).
	Delta bool
	// Rates says the message carries the rate section (FlagRates).
	Rates   bool
	Entries []LinkEntry
}

// LinkStateLen returns the encoded length of a message with n entries.
func LinkStateLen(n int) int { return LinkStateFixedLen + n*LinkEntryLen }

// AppendLinkState appends the encoding of ls to b. It returns ErrMalformed if
// ls has more than MaxLinkEntries entries, or more than MaxRatedLinkEntries
// with Rates.
func AppendLinkState(b []byte, ls *LinkState) ([]byte, error) {
	if len(ls.Entries) > MaxLinkEntries || (ls.Rates && len(ls.Entries) > MaxRatedLinkEntries) {
		return b, ErrMalformed
	}
	var h [LinkStateFixedLen]byte
	flags := FlagLossSamples
	if ls.Delta {
		flags |= FlagDelta
	}
	if ls.Rates {
		flags |= FlagRates
	}
	PutCommon(h[:], TypeLinkState, flags)
	be.PutUint32(h[4:], uint32(ls.Origin))
	be.PutUint64(h[8:], ls.Incarnation)
	be.PutUint32(h[16:], ls.Seq)
	be.PutUint16(h[20:], uint16(len(ls.Entries)))
	b = append(b, h[:]...)
	for i := range ls.Entries {
		b = appendLinkEntry(b, &ls.Entries[i])
	}
	if ls.Rates {
		for i := range ls.Entries {
			e := &ls.Entries[i]
			v := RateToWire(e.RevRate)
			b = append(b, byte(v>>8), byte(v), e.RevRateKind, e.RevRateAge)
		}
	}
	return b, nil
}

// RateToWire encodes a rate in kbit/s as the rate section's 16-bit
// floating point: 4 bits of exponent over 12 of mantissa, rounded to the
// nearest value it holds and saturated at the largest.
func RateToWire(kbps uint32) uint16 {
	m, e := uint64(kbps), uint(0)
	for m > 0xFFF {
		m = (m + 1) >> 1 // round half up at each step
		e++
	}
	if e > 15 {
		return 0xFFFF
	}
	return uint16(e<<12 | uint(m))
}

// RateFromWire decodes the rate section's 16-bit rate to kbit/s.
func RateFromWire(v uint16) uint32 { return uint32(v&0xFFF) << (v >> 12) }

func appendLinkEntry(b []byte, e *LinkEntry) []byte {
	var m [LinkEntryLen]byte
	be.PutUint32(m[0:], uint32(e.Peer))
	m[4] = e.Flags
	m[5] = byte(e.Drift)
	be.PutUint16(m[6:], e.Loss)
	be.PutUint32(m[8:], e.RTT)
	be.PutUint16(m[12:], e.Jitter)
	be.PutUint16(m[14:], e.LossSamples)
	be.PutUint64(m[16:], uint64(e.Delay))
	return append(b, m[:]...)
}

// ParseLinkState decodes a link-state message into ls, reusing the capacity
// of ls.Entries. A message with a zero origin or more entries than its
// length holds is rejected.
func ParseLinkState(b []byte, ls *LinkState) error {
	if err := expect(b, TypeLinkState, LinkStateFixedLen); err != nil {
		return err
	}
	ls.Origin = SiteID(be.Uint32(b[4:]))
	ls.Incarnation = be.Uint64(b[8:])
	ls.Seq = be.Uint32(b[16:])
	n := int(be.Uint16(b[20:]))
	if ls.Origin == 0 || n > MaxLinkEntries {
		return ErrMalformed
	}
	if len(b) < LinkStateLen(n) {
		return ErrTruncated
	}
	_, flags, _ := ParseCommon(b)
	ls.Delta = flags&FlagDelta != 0
	ls.Rates = flags&FlagRates != 0
	if ls.Rates && (n > MaxRatedLinkEntries || len(b) < LinkStateLen(n)+n*LinkRateLen) {
		return ErrTruncated
	}
	ls.Entries = ls.Entries[:0]
	off := LinkStateFixedLen
	for i := 0; i < n; i++ {
		e := parseLinkEntry(b[off:], flags&FlagLossSamples != 0)
		if e.Peer == 0 || e.Peer == ls.Origin {
			return ErrMalformed
		}
		if ls.Rates {
			r := b[LinkStateLen(n)+i*LinkRateLen:]
			if e.RevRateKind = r[2]; e.RevRateKind <= RateKindSaturated {
				e.RevRate, e.RevRateAge = RateFromWire(be.Uint16(r)), r[3]
			} else {
				e.RevRateKind = RateKindNone
			}
		}
		ls.Entries = append(ls.Entries, e)
		off += LinkEntryLen
	}
	return nil
}

// parseLinkEntry decodes one entry; samples says whether it carries a
// loss sample count (FlagLossSamples) or a 32-bit jitter.
func parseLinkEntry(m []byte, samples bool) LinkEntry {
	e := LinkEntry{
		Peer:  SiteID(be.Uint32(m[0:])),
		Flags: m[4],
		Drift: int8(m[5]),
		Loss:  be.Uint16(m[6:]),
		RTT:   be.Uint32(m[8:]),
		Delay: int64(be.Uint64(m[16:])),
	}
	if samples {
		e.Jitter, e.LossSamples = be.Uint16(m[12:]), be.Uint16(m[14:])
	} else {
		e.Jitter = uint16(min(be.Uint32(m[12:]), 65535))
	}
	return e
}

// LossToWire converts a loss fraction in [0, 1] to its wire form; values
// outside the range are saturated.
func LossToWire(f float64) uint16 {
	if !(f > 0) {
		return 0
	}
	if f >= 1 {
		return 65535
	}
	return uint16(f*65535 + 0.5)
}

// LossFromWire converts a wire loss back to a fraction.
func LossFromWire(v uint16) float64 { return float64(v) / 65535 }

// MicrosToWire converts a non-negative duration to whole microseconds,
// saturating at the largest value the wire holds. Negative values become 0.
// It is only used for RTT and jitter, which are free of clock offsets.
func MicrosToWire(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	us := (d + time.Microsecond/2) / time.Microsecond
	if us > 0xFFFFFFFF {
		return 0xFFFFFFFF
	}
	return uint32(us)
}

// MicrosFromWire converts whole microseconds back to a duration.
func MicrosFromWire(v uint32) time.Duration { return time.Duration(v) * time.Microsecond }
