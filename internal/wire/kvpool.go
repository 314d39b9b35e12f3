package wire

import (
	"errors"
	"net/netip"
	"slices"
)

// Messages that distribute the key router's pools (issue 17) over the
// control plane, with no central server (package site, kvpools.go). A
// pool travels whole, as one versioned record: the site that changes it
// floods the new record to every member, each member floods a record it
// did not have onward, and members compare digests of what they hold
// every few seconds and send each other their records when they differ.
// Both types travel only inside a sealed control message, or in the clear
// on an overlay that runs in the clear.
//
// KV pool (type 14):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 14   |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              sender site ID (the site sending it)             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         origin site ID (the site that made this version)      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     pool version (64 bits)                    |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 network ID (the overlay's, VNI)               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  virtual IPv4 address                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        virtual port           |     hash      | site count    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        server count           |  name length  |  pool name... :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:  site table: site count × (length (1 byte), site name)        :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:  servers: server count × 10 bytes:                            :
//	:   IPv4 (4) | port (2) | weight (2) | site index (1) | flags (1):
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The pool name is 1..MaxKVNameLen bytes and each site name
// 1..MaxNameLen; a server names its site by index into the site table, so
// a pool of many servers on few sites stays small. Server flag bit 0
// (KVServerDrained) keeps the server in the ring with no keys; bit 1
// (KVServerJoining) marks a server just added, which takes no keys until
// its own site has learned its MAC and sends the next version without the
// flag. The hash is ring.Hash's value. A message is at most MaxKVPoolLen
// bytes, so that it fits one datagram once sealed.
//
// Versions are ordered by (version, origin): the higher version wins, and
// of two versions with the same number, that of the higher origin ID, so
// that every site keeps the same one whatever the order they arrive in.
//
// KV digest (type 15): the sender's summary of the pools it holds.
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 15   |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         sender site ID                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          pool count                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      digest (64 bits): FNV-1a over each pool's name, version  |
//	+      and origin, in name order                                +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

// Message types of the pool distribution.
const (
	TypeKVPool   Type = 14
	TypeKVDigest Type = 15
)

// Server flags of a KV pool message.
const (
	KVServerDrained uint8 = 1 << 0
	KVServerJoining uint8 = 1 << 1
)

// Bounds of a KV pool message.
const (
	// MaxKVPoolLen is the largest KV pool message: with the sealing's
	// overhead it stays under 1280 bytes, the IPv6 minimum MTU.
	MaxKVPoolLen = 1200
	// MaxKVNameLen is the longest pool name.
	MaxKVNameLen = 64
	// kvPoolFixedLen is the length up to the pool name.
	kvPoolFixedLen = CommonHeaderLen + 4 + 4 + 8 + 4 + 4 + 2 + 1 + 1 + 2 + 1
	// kvServerLen is the length of one server entry.
	kvServerLen = 10
	// KVDigestLen is the exact length of a digest message.
	KVDigestLen = CommonHeaderLen + 4 + 4 + 8
)

// ErrKVPoolTooLarge says a pool does not fit one message.
var ErrKVPoolTooLarge = errors.New("wire: the pool does not fit one control datagram")

// KVPool is one version of a pool as the control plane carries it.
type KVPool struct {
	Name    string
	Origin  SiteID
	Version uint64
	Network uint32
	VIP     netip.AddrPort
	Hash    uint8
	Servers []KVServer
}

// KVServer is one server of a KVPool.
type KVServer struct {
	Addr   netip.AddrPort
	Weight uint16
	Site   string
	Flags  uint8
}

// Newer reports whether version (v, origin) of p comes after q's: a
// higher version, or the same version made at a higher origin.
func (p *KVPool) Newer(q *KVPool) bool {
	if p.Version != q.Version {
		return p.Version > q.Version
	}
	return p.Origin > q.Origin
}

// Clone returns a deep copy.
func (p KVPool) Clone() KVPool {
	p.Servers = slices.Clone(p.Servers)
	return p
}

// KVPoolLen returns the length of p's message, which may exceed
// MaxKVPoolLen (AppendKVPool then refuses it).
func KVPoolLen(p *KVPool) int {
	n := kvPoolFixedLen + len(p.Name) + kvServerLen*len(p.Servers)
	var seen []string
	for _, s := range p.Servers {
		if !slices.Contains(seen, s.Site) {
			seen = append(seen, s.Site)
			n += 1 + len(s.Site)
		}
	}
	return n
}

// AppendKVPool appends the message carrying p, sent by sender.
func AppendKVPool(b []byte, sender SiteID, p *KVPool) ([]byte, error) {
	switch {
	case sender == 0 || p.Origin == 0 || p.Version == 0 || len(p.Name) == 0 || len(p.Name) > MaxKVNameLen:
		return b, ErrMalformed
	case !p.VIP.Addr().Is4() || len(p.Servers) == 0:
		return b, ErrMalformed
	case KVPoolLen(p) > MaxKVPoolLen:
		return b, ErrKVPoolTooLarge
	}
	var sites []string
	for _, s := range p.Servers {
		if len(s.Site) == 0 || len(s.Site) > MaxNameLen || !s.Addr.Addr().Is4() {
			return b, ErrMalformed
		}
		if !slices.Contains(sites, s.Site) {
			sites = append(sites, s.Site)
		}
	}
	if len(sites) > 255 {
		return b, ErrKVPoolTooLarge
	}
	start := len(b)
	b = append(b, make([]byte, kvPoolFixedLen)...)
	h := b[start:]
	PutCommon(h, TypeKVPool, 0)
	be.PutUint32(h[4:], uint32(sender))
	be.PutUint32(h[8:], uint32(p.Origin))
	be.PutUint64(h[12:], p.Version)
	be.PutUint32(h[20:], p.Network)
	vip := p.VIP.Addr().As4()
	copy(h[24:28], vip[:])
	be.PutUint16(h[28:], p.VIP.Port())
	h[30], h[31] = p.Hash, byte(len(sites))
	be.PutUint16(h[32:], uint16(len(p.Servers)))
	h[34] = byte(len(p.Name))
	b = append(b, p.Name...)
	for _, s := range sites {
		b = append(append(b, byte(len(s))), s...)
	}
	for _, s := range p.Servers {
		ip := s.Addr.Addr().As4()
		b = append(b, ip[:]...)
		b = be.AppendUint16(b, s.Addr.Port())
		b = be.AppendUint16(b, s.Weight)
		b = append(b, byte(slices.Index(sites, s.Site)), s.Flags)
	}
	return b, nil
}

// ParseKVPool decodes a KV pool message into p, reusing p.Servers'
// storage, and returns its sender. Unlike the data path's parsers it
// allocates the names it returns (a pool changes rarely).
func ParseKVPool(b []byte, p *KVPool) (SiteID, error) {
	if err := expect(b, TypeKVPool, kvPoolFixedLen); err != nil {
		return 0, err
	}
	if len(b) > MaxKVPoolLen {
		return 0, ErrMalformed
	}
	sender := SiteID(be.Uint32(b[4:]))
	origin := SiteID(be.Uint32(b[8:]))
	version := be.Uint64(b[12:])
	nsites, nservers, nameLen := int(b[31]), int(be.Uint16(b[32:])), int(b[34])
	if sender == 0 || origin == 0 || version == 0 || nameLen == 0 || nameLen > MaxKVNameLen || nsites == 0 || nservers == 0 {
		return 0, ErrMalformed
	}
	off := kvPoolFixedLen
	if len(b) < off+nameLen {
		return 0, ErrTruncated
	}
	name := b[off : off+nameLen]
	off += nameLen
	var sites [255][]byte
	for i := range nsites {
		if off >= len(b) {
			return 0, ErrTruncated
		}
		l := int(b[off])
		if l == 0 || l > MaxNameLen {
			return 0, ErrMalformed
		}
		if off+1+l > len(b) {
			return 0, ErrTruncated
		}
		sites[i] = b[off+1 : off+1+l]
		off += 1 + l
	}
	if len(b)-off != nservers*kvServerLen {
		if len(b)-off < nservers*kvServerLen {
			return 0, ErrTruncated
		}
		return 0, ErrMalformed
	}
	var vip [4]byte
	copy(vip[:], b[24:28])
	*p = KVPool{Name: string(name), Origin: origin, Version: version, Network: be.Uint32(b[20:]),
		VIP: netip.AddrPortFrom(netip.AddrFrom4(vip), be.Uint16(b[28:])), Hash: b[30], Servers: p.Servers[:0]}
	names := make([]string, nsites)
	for i := range nsites {
		names[i] = string(sites[i])
	}
	for i := range nsites {
		for j := range i {
			if names[i] == names[j] {
				return 0, ErrMalformed
			}
		}
	}
	// Sites are listed in the order servers first name them, each once,
	// so that a pool has exactly one encoding.
	next := 0
	for range nservers {
		e := b[off : off+kvServerLen]
		off += kvServerLen
		idx := int(e[8])
		if idx > next || idx >= nsites {
			return 0, ErrMalformed
		}
		if idx == next {
			next++
		}
		var ip [4]byte
		copy(ip[:], e[:4])
		p.Servers = append(p.Servers, KVServer{Addr: netip.AddrPortFrom(netip.AddrFrom4(ip), be.Uint16(e[4:])),
			Weight: be.Uint16(e[6:]), Site: names[idx], Flags: e[9]})
	}
	if next != nsites {
		return 0, ErrMalformed
	}
	return sender, nil
}

// AppendKVDigest appends a digest message.
func AppendKVDigest(b []byte, sender SiteID, count uint32, digest uint64) []byte {
	var h [KVDigestLen]byte
	PutCommon(h[:], TypeKVDigest, 0)
	be.PutUint32(h[4:], uint32(sender))
	be.PutUint32(h[8:], count)
	be.PutUint64(h[12:], digest)
	return append(b, h[:]...)
}

// ParseKVDigest decodes a digest message: sender, pool count and digest.
func ParseKVDigest(b []byte) (SiteID, uint32, uint64, error) {
	if err := expect(b, TypeKVDigest, KVDigestLen); err != nil {
		return 0, 0, 0, err
	}
	sender := SiteID(be.Uint32(b[4:]))
	if sender == 0 || len(b) != KVDigestLen {
		return 0, 0, 0, ErrMalformed
	}
	return sender, be.Uint32(b[8:]), be.Uint64(b[12:]), nil
}
