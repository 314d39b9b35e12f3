package wire

import "net/netip"

// Membership messages. A site joins by sending a hello to any member; the
// member answers with the list of members it knows; the newcomer then says
// hello to each of them. A site leaving cleanly sends a leave to all.
//
// A member record describes one site (used by hello and members):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                            site ID                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     incarnation (64 bits)                     |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| family (4|6)  |  name length  |          UDP port             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:          IP address, 4 or 16 bytes after the family           :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:              site name, 1..MaxNameLen bytes of UTF-8          :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Hello (type 5): the common header, then the sender's member record.
// Flag bit 0 (HelloFlagReply) asks the receiver for its member list.
//
// Members (type 6):
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 6    |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         sender site ID                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         record count          |           reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:                member records, back to back                   :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Leave (type 7):
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 7    |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         sender site ID                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     incarnation (64 bits)                     |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

// MaxNameLen is the longest site name on the wire.
const MaxNameLen = 64

// HelloFlagReply asks the receiver of a hello to answer with its members.
const HelloFlagReply uint8 = 1 << 0

// Membership message sizes.
const (
	memberFixedLen  = 4 + 8 + 1 + 1 + 2
	MembersFixedLen = CommonHeaderLen + 4 + 4
	LeaveLen        = CommonHeaderLen + 4 + 8
	// MaxMembersLen bounds an encoded members message; longer lists are
	// split over several messages.
	MaxMembersLen = 1400
)

// Member is one member record.
type Member struct {
	ID          SiteID
	Incarnation uint64
	Addr        netip.AddrPort
	Name        string
}

// MemberLen returns the encoded length of m's record.
func MemberLen(m *Member) int {
	n := memberFixedLen + len(m.Name)
	if m.Addr.Addr().Is4() {
		return n + 4
	}
	return n + 16
}

// appendMember appends m's record. The caller has checked it with
// validMember.
func appendMember(b []byte, m *Member) []byte {
	var h [memberFixedLen]byte
	be.PutUint32(h[0:], uint32(m.ID))
	be.PutUint64(h[4:], m.Incarnation)
	h[12] = 6
	if m.Addr.Addr().Is4() {
		h[12] = 4
	}
	h[13] = byte(len(m.Name))
	be.PutUint16(h[14:], m.Addr.Port())
	b = append(b, h[:]...)
	if h[12] == 4 {
		a := m.Addr.Addr().As4()
		b = append(b, a[:]...)
	} else {
		a := m.Addr.Addr().As16()
		b = append(b, a[:]...)
	}
	return append(b, m.Name...)
}

// validMember checks that m can be encoded.
func validMember(m *Member) bool {
	return m.ID != 0 && m.Addr.IsValid() && len(m.Name) > 0 && len(m.Name) <= MaxNameLen
}

// parseMember decodes one record from b and returns its length.
func parseMember(b []byte, m *Member) (int, error) {
	if len(b) < memberFixedLen {
		return 0, ErrTruncated
	}
	m.ID = SiteID(be.Uint32(b[0:]))
	m.Incarnation = be.Uint64(b[4:])
	fam, nlen, port := b[12], int(b[13]), be.Uint16(b[14:])
	if m.ID == 0 || nlen == 0 || nlen > MaxNameLen {
		return 0, ErrMalformed
	}
	alen := 0
	switch fam {
	case 4:
		alen = 4
	case 6:
		alen = 16
	default:
		return 0, ErrMalformed
	}
	n := memberFixedLen + alen + nlen
	if len(b) < n {
		return 0, ErrTruncated
	}
	a := b[memberFixedLen : memberFixedLen+alen]
	var ip netip.Addr
	if alen == 4 {
		ip = netip.AddrFrom4([4]byte(a))
	} else {
		ip = netip.AddrFrom16([16]byte(a))
	}
	m.Addr = netip.AddrPortFrom(ip, port)
	m.Name = string(b[memberFixedLen+alen : n])
	return n, nil
}

// AppendHello appends a hello announcing m, with the given flags.
func AppendHello(b []byte, m *Member, flags uint8) ([]byte, error) {
	if !validMember(m) {
		return b, ErrMalformed
	}
	var h [CommonHeaderLen]byte
	PutCommon(h[:], TypeHello, flags)
	return appendMember(append(b, h[:]...), m), nil
}

// ParseHello decodes a hello and returns its flags.
func ParseHello(b []byte, m *Member) (uint8, error) {
	if err := expect(b, TypeHello, CommonHeaderLen); err != nil {
		return 0, err
	}
	if _, err := parseMember(b[CommonHeaderLen:], m); err != nil {
		return 0, err
	}
	return b[3], nil
}

// AppendMembers appends one members message from sender listing ms. It
// returns ErrMalformed if a record cannot be encoded or if the message would
// exceed MaxMembersLen; SplitMembers finds how many records fit.
func AppendMembers(b []byte, sender SiteID, ms []Member) ([]byte, error) {
	n := MembersFixedLen
	for i := range ms {
		if !validMember(&ms[i]) {
			return b, ErrMalformed
		}
		n += MemberLen(&ms[i])
	}
	if n > MaxMembersLen || sender == 0 {
		return b, ErrMalformed
	}
	var h [MembersFixedLen]byte
	PutCommon(h[:], TypeMembers, 0)
	be.PutUint32(h[4:], uint32(sender))
	be.PutUint16(h[8:], uint16(len(ms)))
	b = append(b, h[:]...)
	for i := range ms {
		b = appendMember(b, &ms[i])
	}
	return b, nil
}

// SplitMembers returns how many records from the front of ms fit in one
// members message (at least one if ms is not empty).
func SplitMembers(ms []Member) int {
	n := MembersFixedLen
	for i := range ms {
		n += MemberLen(&ms[i])
		if n > MaxMembersLen {
			return max(i, 1)
		}
	}
	return len(ms)
}

// ParseMembers decodes a members message, appending the records to
// ms[:0] and returning the sender and the records.
func ParseMembers(b []byte, ms []Member) (SiteID, []Member, error) {
	if err := expect(b, TypeMembers, MembersFixedLen); err != nil {
		return 0, ms, err
	}
	sender := SiteID(be.Uint32(b[4:]))
	count := int(be.Uint16(b[8:]))
	if sender == 0 || count*(memberFixedLen+5) > len(b) {
		return 0, ms, ErrMalformed
	}
	ms = ms[:0]
	off := MembersFixedLen
	for i := 0; i < count; i++ {
		var m Member
		n, err := parseMember(b[off:], &m)
		if err != nil {
			return 0, ms, err
		}
		ms = append(ms, m)
		off += n
	}
	return sender, ms, nil
}

// Leave is the parsed form of a leave message.
type Leave struct {
	Sender      SiteID
	Incarnation uint64
}

// AppendLeave appends the encoding of l.
func AppendLeave(b []byte, l *Leave) []byte {
	var m [LeaveLen]byte
	PutCommon(m[:], TypeLeave, 0)
	be.PutUint32(m[4:], uint32(l.Sender))
	be.PutUint64(m[8:], l.Incarnation)
	return append(b, m[:]...)
}

// ParseLeave decodes a leave message.
func ParseLeave(b []byte, l *Leave) error {
	if err := expect(b, TypeLeave, LeaveLen); err != nil {
		return err
	}
	l.Sender = SiteID(be.Uint32(b[4:]))
	l.Incarnation = be.Uint64(b[8:])
	if l.Sender == 0 {
		return ErrMalformed
	}
	return nil
}
