package wire

// This file defines the formats of detour's secure channel: the Noise IK
// handshake messages and the cookie reply, sealed control messages and the
// sealed encoding of data packets. The cryptography lives in package session; here are only
// the layouts and their parsers, which never panic and never allocate.

// Message types of the secure channel.
const (
	TypeHandshakeInit     Type = 8  // the first Noise IK message
	TypeHandshakeResponse Type = 9  // the second Noise IK message
	TypeSealed            Type = 10 // a control message sealed between two sites
	TypeCookieReply       Type = 11 // a responder under load asks for a cookie MAC
)

// DataFlagSealed marks a data packet whose frame is sealed end to end (see
// SealedData). A site with keys configured drops data packets without it.
const DataFlagSealed uint8 = 1 << 1

// Lengths of the cryptographic fields.
const (
	// TagLen is the length of a Poly1305 authentication tag.
	TagLen = 16
	// TimestampLen is the length of the TAI64N timestamp an initiation
	// carries.
	TimestampLen = 12
	// NoiseInitLen is the length of the first Noise IK message: the
	// ephemeral key, the encrypted static key and the encrypted timestamp.
	NoiseInitLen = 32 + (32 + TagLen) + (TimestampLen + TagLen)
	// NoiseResponseLen is the length of the second Noise IK message: the
	// ephemeral key and the encrypted 4-byte sender index.
	NoiseResponseLen = 32 + (4 + TagLen)
	// MACLen is the length of each of the two MACs that end a handshake
	// message (keyed BLAKE2s-128).
	MACLen = 16
	// CookieLen is the length of a cookie.
	CookieLen = 16
	// CookieNonceLen is the length of the XChaCha20-Poly1305 nonce of a
	// cookie reply.
	CookieNonceLen = 24
)

// A handshake initiation opens a session (Noise_IK_25519_ChaChaPoly_BLAKE2s).
// It is at version 2 (see HandshakeVersion): two MACs follow the Noise
// message, as in WireGuard.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 2   |   type = 8    |  flags = 0    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        sender site ID                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                sender index (the initiator's key id)          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Noise message 1 (108 bytes): ephemeral key (32),     |
//	:   static key sealed (48), TAI64N timestamp sealed (28)        :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     mac1 (16 bytes): keyed by the responder's public key,     |
//	:     over bytes 0 to 120                                       :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     mac2 (16 bytes): keyed by a cookie from the responder,    |
//	:     over bytes 0 to 136; zero without a cookie                :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The first 12 bytes are the Noise prologue, so they are authenticated.
// mac1 lets a responder drop, before any public-key operation, messages
// from senders who do not know its public key; mac2 lets a responder under
// load drop those from senders who cannot receive at their source address
// (package session computes both).

// HandshakeHeaderLen is the length of the clear header of both handshake
// messages.
const HandshakeHeaderLen = CommonHeaderLen + 8

// HandshakeMACsLen is the length of the two MACs that end both handshake
// messages.
const HandshakeMACsLen = 2 * MACLen

// HandshakeInitLen is the exact length of a handshake initiation.
const HandshakeInitLen = HandshakeHeaderLen + NoiseInitLen + HandshakeMACsLen

// A handshake response completes it; it is at version 2 and ends with the
// same two MACs, mac1 keyed by the initiator's public key.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 2   |   type = 9    |  flags = 0    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        sender site ID                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        receiver index (the initiator's sender index)          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Noise message 2 (52 bytes): ephemeral key (32),       |
//	:         the responder's sender index sealed (4 + 16)          :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         mac1 (16 bytes), over bytes 0 to 64                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         mac2 (16 bytes), over bytes 0 to 80                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

// HandshakeResponseLen is the exact length of a handshake response.
const HandshakeResponseLen = HandshakeHeaderLen + NoiseResponseLen + HandshakeMACsLen

// Handshake is the clear part of a handshake message. Index is the sender
// index of an initiation and the receiver index of a response. Noise, MAC1
// and MAC2 alias the packet.
type Handshake struct {
	Type   Type
	Sender SiteID
	Index  uint32
	Noise  []byte
	MAC1   []byte
	MAC2   []byte
}

// PutHandshakeHeader writes the clear header of a handshake message of type
// t into b, which must hold HandshakeHeaderLen bytes.
func PutHandshakeHeader(b []byte, t Type, sender SiteID, index uint32) {
	PutCommon(b, t, 0)
	be.PutUint32(b[4:], uint32(sender))
	be.PutUint32(b[8:], index)
}

// HandshakeLen returns the exact length of a handshake message of type t,
// or 0 if t is not a handshake type.
func HandshakeLen(t Type) int {
	switch t {
	case TypeHandshakeInit:
		return HandshakeInitLen
	case TypeHandshakeResponse:
		return HandshakeResponseLen
	}
	return 0
}

// ParseHandshake decodes a handshake initiation or response. Its length
// must be exactly that of its type.
func ParseHandshake(b []byte, m *Handshake) error {
	t, _, err := ParseCommon(b)
	if err != nil {
		return err
	}
	want := HandshakeLen(t)
	if want == 0 {
		return ErrMalformed
	}
	if len(b) < want {
		return ErrTruncated
	}
	if len(b) > want {
		return ErrMalformed
	}
	m.Type = t
	m.Sender = SiteID(be.Uint32(b[4:]))
	m.Index = be.Uint32(b[8:])
	m.Noise = b[HandshakeHeaderLen : want-HandshakeMACsLen]
	m.MAC1 = b[want-HandshakeMACsLen : want-MACLen]
	m.MAC2 = b[want-MACLen : want]
	if m.Sender == 0 {
		return ErrMalformed
	}
	return nil
}

// A cookie reply answers a handshake message that a responder under load
// did not process because its mac2 was missing or wrong. It carries a
// cookie bound to the address the message came from, sealed so that only
// the sender of that message can read it (XChaCha20-Poly1305 keyed by a
// hash of the responder's public key, with the message's mac1 as
// associated data). It is at version 2.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 2   |   type = 11   |  flags = 0    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 sender site ID (the responder)                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     receiver index (the index of the message answered)        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      nonce (24 bytes)                         |
//	:                                                               :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          cookie sealed (16 bytes + 16-byte tag)               |
//	:                                                               :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

// CookieReplyLen is the exact length of a cookie reply.
const CookieReplyLen = HandshakeHeaderLen + CookieNonceLen + CookieLen + TagLen

// CookieReply is a parsed cookie reply. Nonce and Sealed alias the packet.
type CookieReply struct {
	Sender SiteID
	Index  uint32
	Nonce  []byte
	Sealed []byte
}

// PutCookieReplyHeader writes the header of a cookie reply into b, which
// must hold HandshakeHeaderLen bytes; the nonce and sealed cookie follow.
func PutCookieReplyHeader(b []byte, sender SiteID, index uint32) {
	PutCommon(b, TypeCookieReply, 0)
	be.PutUint32(b[4:], uint32(sender))
	be.PutUint32(b[8:], index)
}

// ParseCookieReply decodes a cookie reply, whose length must be exact.
func ParseCookieReply(b []byte, m *CookieReply) error {
	t, _, err := ParseCommon(b)
	if err != nil {
		return err
	}
	if t != TypeCookieReply {
		return ErrMalformed
	}
	if len(b) < CookieReplyLen {
		return ErrTruncated
	}
	if len(b) > CookieReplyLen {
		return ErrMalformed
	}
	m.Sender = SiteID(be.Uint32(b[4:]))
	m.Index = be.Uint32(b[8:])
	m.Nonce = b[HandshakeHeaderLen : HandshakeHeaderLen+CookieNonceLen]
	m.Sealed = b[HandshakeHeaderLen+CookieNonceLen:]
	if m.Sender == 0 {
		return ErrMalformed
	}
	return nil
}

// A sealed message carries a control message (a whole datagram: probe,
// link state, membership...) between two sites that share a session.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 10   |  flags = 0    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        sender site ID                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+ -.
//	|                        receiver index                         |  | nonce
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  |
//	|                     counter (64 bits)                         |  |
//	|                                                               |  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+ -'
//	|        the inner control datagram, encrypted (ChaCha20)       |
//	:                                                               :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Poly1305 tag (16 bytes)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The first 20 bytes are the associated data; bytes 8 to 20 the nonce. An
// empty inner message is a keepalive.

// SealedHeaderLen is the length of a sealed message's clear header.
const SealedHeaderLen = CommonHeaderLen + 4 + 4 + 8

// SealedOverhead is the number of bytes sealing adds to a control message.
const SealedOverhead = SealedHeaderLen + TagLen

// Sealed is the clear part of a sealed message. Body (ciphertext and tag)
// aliases the packet.
type Sealed struct {
	Sender  SiteID
	Index   uint32
	Counter uint64
	Body    []byte
}

// PutSealedHeader writes a sealed message's clear header into b, which must
// hold SealedHeaderLen bytes.
func PutSealedHeader(b []byte, sender SiteID, index uint32, counter uint64) {
	PutCommon(b, TypeSealed, 0)
	be.PutUint32(b[4:], uint32(sender))
	be.PutUint32(b[8:], index)
	be.PutUint64(b[12:], counter)
}

// ParseSealed decodes a sealed message's clear header.
func ParseSealed(b []byte, m *Sealed) error {
	t, _, err := ParseCommon(b)
	if err != nil {
		return err
	}
	if t != TypeSealed {
		return ErrMalformed
	}
	if len(b) < SealedOverhead {
		return ErrTruncated
	}
	m.Sender = SiteID(be.Uint32(b[4:]))
	m.Index = be.Uint32(b[8:])
	m.Counter = be.Uint64(b[12:])
	m.Body = b[SealedHeaderLen:]
	return nil
}

// A sealed data packet is a data packet (see data.go) with DataFlagSealed
// set, whose frame is encrypted end to end between the source and the
// destination. A security block sits between the header and the frame:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:   data header, flags has DataFlagSealed (20 + 4*length bytes) :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+ -.
//	|          end-to-end receiver index (destination's key id)     |  | e2e
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  | nonce
//	|                 end-to-end counter (64 bits)                  |  |
//	|                                                               |  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+ -'
//	|       hop receiver index (the current receiver's key id)      |  \
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  |
//	|                 hop counter (64 bits, per link)               |  | only when
//	|                                                               |  | length > 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  | (relayed)
//	|                     hop tag (16 bytes)                        |  |
//	:                                                               :  /
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Ethernet frame, encrypted (ChaCha20), to the tag       |
//	:                                                               :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            end-to-end Poly1305 tag (16 bytes)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The end-to-end associated data is the data header, with the hop index
// read as zero, and the end-to-end fields; relays can therefore rewrite the
// hop index and the hop fields, and nothing else. The hop tag authenticates
// the header, the end-to-end fields and the hop fields (hop index as sent)
// to the relay the packet is addressed to, under the session of the link
// it crosses; it is absent on direct paths.

// SealedDataE2ELen is the length of the end-to-end fields.
const SealedDataE2ELen = 12

// SealedDataHopLen is the length of the hop fields of a relayed packet.
const SealedDataHopLen = 4 + 8 + TagLen

// SealedDataPrefixLen returns the length of the security block between a
// data header with a path of pathLen sites and the encrypted frame.
func SealedDataPrefixLen(pathLen int) int {
	if pathLen > 1 {
		return SealedDataE2ELen + SealedDataHopLen
	}
	return SealedDataE2ELen
}

// SealedDataOverhead returns the bytes sealing adds to a data packet with
// a path of pathLen sites: 28 on a direct path, 56 through relays.
func SealedDataOverhead(pathLen int) int { return SealedDataPrefixLen(pathLen) + TagLen }

// SealedData is the parsed security block of a sealed data packet. Offsets
// are from the start of the packet.
type SealedData struct {
	Index      uint32
	Counter    uint64
	HopIndex   uint32 // zero on direct packets
	HopCounter uint64
	E2EOff     int // offset of the end-to-end fields (= the header length)
	HopOff     int // offset of the hop fields, 0 on direct packets
	BodyOff    int // offset of the encrypted frame
}

// PutSealedDataE2E writes the end-to-end fields at b[off:].
func PutSealedDataE2E(b []byte, off int, index uint32, counter uint64) {
	be.PutUint32(b[off:], index)
	be.PutUint64(b[off+4:], counter)
}

// PutSealedDataHop writes the hop index and counter at b[off:]; the tag is
// written by the sealer.
func PutSealedDataHop(b []byte, off int, index uint32, counter uint64) {
	be.PutUint32(b[off:], index)
	be.PutUint64(b[off+4:], counter)
}

// ParseSealedData decodes the security block of the sealed data packet b,
// whose header h of length hdrLen has been parsed by ParseData.
func ParseSealedData(b []byte, h *DataHeader, hdrLen int, s *SealedData) error {
	if h.Flags&DataFlagSealed == 0 || hdrLen != h.Len() || hdrLen > len(b) {
		return ErrMalformed
	}
	if len(b)-hdrLen < SealedDataOverhead(int(h.PathLen)) {
		return ErrTruncated
	}
	s.E2EOff = hdrLen
	s.Index = be.Uint32(b[hdrLen:])
	s.Counter = be.Uint64(b[hdrLen+4:])
	s.HopOff, s.HopIndex, s.HopCounter = 0, 0, 0
	if h.PathLen > 1 {
		s.HopOff = hdrLen + SealedDataE2ELen
		s.HopIndex = be.Uint32(b[s.HopOff:])
		s.HopCounter = be.Uint64(b[s.HopOff+4:])
	}
	s.BodyOff = hdrLen + SealedDataPrefixLen(int(h.PathLen))
	return nil
}
