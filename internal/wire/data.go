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
//	|   hop index   |  path length  |           reserved            |
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
)

// DataHeader is the parsed form of a data packet's header.
type DataHeader struct {
	Flags   uint8
	Hop     uint8
	Source  SiteID
	Network uint32
	Seq     uint32
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
	b[6], b[7] = 0, 0
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
