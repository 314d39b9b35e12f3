package wire

// Messages of the overlay's trust root (package ca). A site presents its
// certificate in the clear before its first handshake with a site that
// may not know its key; certificates are public, and accepting one only
// lets the site attempt a Noise handshake, which needs the private key.
// A revocation travels sealed, flooded from site to site.
//
// Certificate (type 12), in the clear:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 12   |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         sender site ID                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:     the sender's certificate (package ca's encoding), to the   :
//	:     end of the datagram                                       :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Flag bit 0 (CertFlagReply) asks the receiver for its own certificate.
//
// Revocation (type 13), only inside a sealed control message: the same
// header and sender, then a revocation in package ca's encoding.

// Message types of the trust root.
const (
	TypeCertificate Type = 12
	TypeRevocation  Type = 13
)

// CertFlagReply asks the receiver of a certificate for its own.
const CertFlagReply uint8 = 1 << 0

// TrustHeaderLen is the length of the header of both messages.
const TrustHeaderLen = CommonHeaderLen + 4

// MaxTrustBody bounds the certificate or revocation a message carries.
const MaxTrustBody = 512

// AppendTrust appends a certificate or revocation message (t) from sender
// carrying body.
func AppendTrust(b []byte, t Type, flags uint8, sender SiteID, body []byte) ([]byte, error) {
	if (t != TypeCertificate && t != TypeRevocation) || sender == 0 || len(body) == 0 || len(body) > MaxTrustBody {
		return b, ErrMalformed
	}
	var h [TrustHeaderLen]byte
	PutCommon(h[:], t, flags)
	be.PutUint32(h[4:], uint32(sender))
	return append(append(b, h[:]...), body...), nil
}

// ParseTrust decodes a message of type t and returns its flags, sender
// and body (aliasing b).
func ParseTrust(b []byte, t Type) (uint8, SiteID, []byte, error) {
	if err := expect(b, t, TrustHeaderLen+1); err != nil {
		return 0, 0, nil, err
	}
	sender := SiteID(be.Uint32(b[4:]))
	if sender == 0 || len(b)-TrustHeaderLen > MaxTrustBody {
		return 0, 0, nil, ErrMalformed
	}
	return b[3], sender, b[TrustHeaderLen:], nil
}
