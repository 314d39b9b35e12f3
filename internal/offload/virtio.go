package offload

import (
	"encoding/binary"
	"errors"
)

// HdrLen is the size of struct virtio_net_hdr, which a TAP device opened
// with IFF_VNET_HDR puts in front of every frame it reads and expects in
// front of every frame written to it.
const HdrLen = 10

// Flags and GSO types of a virtio_net_hdr (<linux/virtio_net.h>).
const (
	FlagNeedsCsum = 1 // the L4 checksum is partial: complete it
	FlagDataValid = 2 // the checksum was checked

	GSONone  = 0
	GSOTCPv4 = 1
	GSOUDP   = 3 // UDP fragmentation offload (UFO): not supported
	GSOTCPv6 = 4
	GSOUDPL4 = 5 // UDP segmentation offload (USO), IPv4 or IPv6
	GSOECN   = 0x80
)

// Hdr is a decoded virtio_net_hdr. Offsets count from the start of the
// Ethernet frame that follows the header.
type Hdr struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16 // length of the Ethernet, IP and TCP or UDP headers
	GSOSize    uint16 // payload bytes per segment (the MSS or datagram size)
	CsumStart  uint16 // where checksumming starts (the L4 header)
	CsumOffset uint16 // where, after CsumStart, the checksum goes
}

// ErrShort is returned for a buffer shorter than a header.
var ErrShort = errors.New("offload: shorter than a virtio_net_hdr")

// ParseHdr decodes the header at the start of b. TAP devices use the
// host's byte order, little-endian on every platform detour runs on.
func ParseHdr(b []byte) (Hdr, error) {
	if len(b) < HdrLen {
		return Hdr{}, ErrShort
	}
	return Hdr{
		Flags: b[0], GSOType: b[1],
		HdrLen:     binary.LittleEndian.Uint16(b[2:]),
		GSOSize:    binary.LittleEndian.Uint16(b[4:]),
		CsumStart:  binary.LittleEndian.Uint16(b[6:]),
		CsumOffset: binary.LittleEndian.Uint16(b[8:]),
	}, nil
}

// Put encodes h into b[:HdrLen].
func (h Hdr) Put(b []byte) {
	b[0], b[1] = h.Flags, h.GSOType
	binary.LittleEndian.PutUint16(b[2:], h.HdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.GSOSize)
	binary.LittleEndian.PutUint16(b[6:], h.CsumStart)
	binary.LittleEndian.PutUint16(b[8:], h.CsumOffset)
}

// PutPlain writes the header of a frame that needs nothing done: no
// segmentation, checksum complete.
func PutPlain(b []byte) { clear(b[:HdrLen]) }
