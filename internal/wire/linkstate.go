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

// Link-state sizes.
const (
	LinkStateFixedLen = CommonHeaderLen + 4 + 8 + 4 + 4
	LinkEntryLen      = 24
	// MaxLinkEntries bounds the entries of one message so that it fits in
	// a 1400-byte datagram.
	MaxLinkEntries = (1400 - LinkStateFixedLen) / LinkEntryLen
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
	Delta   bool
	Entries []LinkEntry
}

// LinkStateLen returns the encoded length of a message with n entries.
func LinkStateLen(n int) int { return LinkStateFixedLen + n*LinkEntryLen }

// AppendLinkState appends the encoding of ls to b. It returns ErrMalformed if
// ls has more than MaxLinkEntries entries.
func AppendLinkState(b []byte, ls *LinkState) ([]byte, error) {
	if len(ls.Entries) > MaxLinkEntries {
		return b, ErrMalformed
	}
	var h [LinkStateFixedLen]byte
	flags := FlagLossSamples
	if ls.Delta {
		flags |= FlagDelta
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
	return b, nil
}

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
	ls.Entries = ls.Entries[:0]
	off := LinkStateFixedLen
	for i := 0; i < n; i++ {
		e := parseLinkEntry(b[off:], flags&FlagLossSamples != 0)
		if e.Peer == 0 || e.Peer == ls.Origin {
			return ErrMalformed
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
