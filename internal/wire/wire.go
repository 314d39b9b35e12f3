// Package wire defines every packet format detour puts on the underlay and
// parses them by hand. Parsers never panic and never allocate: they check
// lengths and return ErrTruncated or ErrMalformed, so that a packet, whatever
// its bytes, can only be dropped and counted.
//
// Every detour datagram starts with a four-byte common header:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |    version    |     type      |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The type selects the message that follows (see the Type constants). The
// meaning of the flags depends on the type; unknown flags are ignored.
//
// The version is that of the message's type, so one format can change
// without breaking the others: the handshake messages and the cookie reply
// (types 8, 9 and 11) are at version 2 since they carry MACs against
// floods (see secure.go); every other type is at version 1. A message
// whose version is not the one its type speaks is dropped (ErrBadVersion).
//
// Sites are named by a 32-bit SiteID derived from the site's name.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
)

// Magic is the first byte of every detour datagram.
const Magic = 0xD7

// Version is the wire format version of the data and control messages
// (types 1 to 7 and 10).
const Version = 1

// HandshakeVersion is the version of the handshake messages and the cookie
// reply (types 8, 9 and 11). Version 1 handshakes had no MACs.
const HandshakeVersion = 2

// VersionOf returns the version messages of type t are written at.
func VersionOf(t Type) uint8 {
	switch t {
	case TypeHandshakeInit, TypeHandshakeResponse, TypeCookieReply:
		return HandshakeVersion
	}
	return Version
}

// CommonHeaderLen is the length of the common header.
const CommonHeaderLen = 4

// Type identifies the message carried in a datagram.
type Type uint8

// Message types. Data carries Ethernet frames; the others belong to the
// control plane (membership, measurement and link state).
const (
	TypeData       Type = 1 // an Ethernet frame on a source route
	TypeProbe      Type = 2 // a measurement probe
	TypeProbeReply Type = 3 // the answer to a probe
	TypeLinkState  Type = 4 // a site's measured links, flooded to all sites
	TypeHello      Type = 5 // a join request or membership announcement
	TypeMembers    Type = 6 // the list of members a site knows
	TypeLeave      Type = 7 // a site leaving cleanly
)

func (t Type) String() string {
	switch t {
	case TypeData:
		return "data"
	case TypeProbe:
		return "probe"
	case TypeProbeReply:
		return "probe-reply"
	case TypeLinkState:
		return "link-state"
	case TypeHello:
		return "hello"
	case TypeMembers:
		return "members"
	case TypeLeave:
		return "leave"
	case TypeHandshakeInit:
		return "handshake-init"
	case TypeHandshakeResponse:
		return "handshake-response"
	case TypeSealed:
		return "sealed"
	case TypeCookieReply:
		return "cookie-reply"
	case TypeCertificate:
		return "certificate"
	case TypeRevocation:
		return "revocation"
	case TypeKVPool:
		return "kv-pool"
	case TypeKVDigest:
		return "kv-digest"
	case TypeTrain:
		return "train"
	case TypeInband:
		return "inband"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Errors returned by the parsers. Callers count them by kind.
var (
	ErrTruncated  = errors.New("wire: truncated packet")
	ErrBadMagic   = errors.New("wire: not a detour packet")
	ErrBadVersion = errors.New("wire: unsupported version")
	ErrMalformed  = errors.New("wire: malformed packet")
)

// SiteID names a site on the wire.
type SiteID uint32

// SiteIDFromName derives a site's ID from its configured name (FNV-1a, 32
// bits). ID 0 is reserved for "none", so a name that hashes to 0 maps to 1.
func SiteIDFromName(name string) SiteID {
	h := fnv.New32a()
	h.Write([]byte(name))
	id := SiteID(h.Sum32())
	if id == 0 {
		id = 1
	}
	return id
}

// String formats the ID in hexadecimal.
func (id SiteID) String() string { return fmt.Sprintf("%08x", uint32(id)) }

// PutCommon writes the common header for type t with the given flags into
// b, which must hold at least CommonHeaderLen bytes.
func PutCommon(b []byte, t Type, flags uint8) {
	b[0] = Magic
	b[1] = VersionOf(t)
	b[2] = byte(t)
	b[3] = flags
}

// ParseCommon checks the common header of b, including that its version is
// the one its type speaks, and returns its type and flags.
func ParseCommon(b []byte) (Type, uint8, error) {
	if len(b) < CommonHeaderLen {
		return 0, 0, ErrTruncated
	}
	if b[0] != Magic {
		return 0, 0, ErrBadMagic
	}
	if b[1] != VersionOf(Type(b[2])) {
		return 0, 0, ErrBadVersion
	}
	return Type(b[2]), b[3], nil
}

var be = binary.BigEndian
