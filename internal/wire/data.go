package wire

// A data packet carries one Ethernet frame from its source site to its
// destination site along a source route (the LEON header idea): the source
// writes the whole path, every relay forwards to the entry after itself, and
// so a frame can never loop, even while routes change.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 1    |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   hop index   |  path length  |     send stamp (see below)    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         source site ID                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     virtual network ID                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              sequence number (per source, destination)        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                path[0]: first receiver's site ID              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:                              ...                              :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        path[length-1]: the destination site's ID              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Ethernet frame (to the end)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The path lists the receivers in order and excludes the source; its last
// entry is the destination. The hop index is the position in the path of the
// site the packet is being sent to: the source sends with index 0, and a
// relay at index i increments it before forwarding to path[i+1]. A frame for
// every site (broadcast, multicast, unknown unicast) is sent as one packet
// per destination, each along that destination's path, so every site gets
// it exactly once.
//
// The send stamp (flag DataFlagStamped) is the source's clock when it sent
// the packet, in units of 2^15 ns (32.8 µs), modulo 2^16 (it wraps every
// 2.1 s). Set by the source, covered by the end-to-end and the first hop's
// authentication and changed by nobody, it measures one link only: the
// first receiver of the path (a relay or the destination) takes its own
// clock, in the same units, less the stamp as a sample of the
// offset-shifted one-way delay of the link from the source, modulo 2^16
// (UnwrapStamp recovers the full value near a known one). Receivers that
// do not read it (sites of earlier versions; the field was reserved)
// lose nothing.

// MaxPath is the longest path a data packet can carry (relays plus the
// destination).
const MaxPath = 8

// DataFixedLen is the length of a data header without its path.
const DataFixedLen = CommonHeaderLen + 4 + 4 + 4 + 4

// Data flags.
const (
	// DataFlagDuplicate marks a copy sent on a second path while the first is
	// in doubt; the destination drops whichever copy arrives second.
	DataFlagDuplicate uint8 = 1 << 0
	// DataFlagStamped says that the header carries a send stamp.
	DataFlagStamped uint8 = 1 << 2
)

// StampShift converts nanoseconds to the units of a send stamp: a stamp is
// uint16(ns >> StampShift).
const StampShift = 15

// StampOf returns the send stamp of a clock reading in nanoseconds.
func StampOf(ns int64) uint16 { return uint16(ns >> StampShift) }

// UnwrapStamp returns the offset-shifted delay, in nanoseconds, that a
// stamp difference rel (receive stamp minus send stamp, modulo 2^16)
// stands for: of the values congruent to rel, the one nearest to near (a
// delay of the same link known otherwise, such as a probe's t2 − t1).
// It is exact to one unit (32.8 µs) when the true delay is within 1.07 s
// of near.
func UnwrapStamp(near int64, rel uint16) int64 {
	u := near >> StampShift
	return (u + int64(int16(rel-uint16(u)))) << StampShift
}

// DataHeader is the parsed form of a data packet's header.
type DataHeader struct {
	Flags   uint8
	Hop     uint8
	Source  SiteID
	Network uint32
	Seq     uint32
	// Stamp is the send stamp, meaningful with DataFlagStamped.
	Stamp   uint16
	PathLen uint8
	Path    [MaxPath]SiteID
}

// DataHeaderLen returns the length of a data header with a path of n sites.
func DataHeaderLen(n int) int { return DataFixedLen + 4*n }

// Len returns the encoded length of h.
func (h *DataHeader) Len() int { return DataHeaderLen(int(h.PathLen)) }

// Destination returns the last site of the path.
func (h *DataHeader) Destination() SiteID { return h.Path[h.PathLen-1] }

// Receiver returns the site the packet is addressed to at its current hop.
func (h *DataHeader) Receiver() SiteID { return h.Path[h.Hop] }

// Put encodes h into the front of b, which must hold h.Len() bytes, and
// returns the number of bytes written. The frame follows at b[n:].
func (h *DataHeader) Put(b []byte) int {
	PutCommon(b, TypeData, h.Flags)
	b[4] = h.Hop
	b[5] = h.PathLen
	be.PutUint16(b[6:], h.Stamp)
	be.PutUint32(b[8:], uint32(h.Source))
	be.PutUint32(b[12:], h.Network)
	be.PutUint32(b[16:], h.Seq)
	off := DataFixedLen
	for i := 0; i < int(h.PathLen); i++ {
		be.PutUint32(b[off:], uint32(h.Path[i]))
		off += 4
	}
	return off
}

// ParseData decodes the data header at the front of b into h and returns
// the offset of the Ethernet frame. The common header must already have been
// checked to be of TypeData.
func ParseData(b []byte, h *DataHeader) (int, error) {
	if len(b) < DataFixedLen {
		return 0, ErrTruncated
	}
	h.Flags = b[3]
	h.Hop = b[4]
	h.PathLen = b[5]
	h.Stamp = be.Uint16(b[6:])
	if h.PathLen == 0 || h.PathLen > MaxPath || h.Hop >= h.PathLen {
		return 0, ErrMalformed
	}
	h.Source = SiteID(be.Uint32(b[8:]))
	h.Network = be.Uint32(b[12:])
	h.Seq = be.Uint32(b[16:])
	n := DataHeaderLen(int(h.PathLen))
	if len(b) < n {
		return 0, ErrTruncated
	}
	off := DataFixedLen
	for i := 0; i < int(h.PathLen); i++ {
		h.Path[i] = SiteID(be.Uint32(b[off:]))
		off += 4
	}
	return n, nil
}

// SetHop rewrites the hop index of an encoded data packet in place; relays
// use it to forward without re-encoding.
func SetHop(b []byte, hop uint8) { b[4] = hop }
