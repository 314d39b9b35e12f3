package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestHandshakeHeaderRoundTrip(t *testing.T) {
	for _, c := range []struct {
		t Type
		n int
	}{{TypeHandshakeInit, HandshakeInitLen}, {TypeHandshakeResponse, HandshakeResponseLen}} {
		b := make([]byte, c.n)
		for i := HandshakeHeaderLen; i < c.n; i++ {
			b[i] = byte(i)
		}
		PutHandshakeHeader(b, c.t, 0x01020304, 0xa0b0c0d0)
		var m Handshake
		if err := ParseHandshake(b, &m); err != nil {
			t.Fatalf("%v: %v", c.t, err)
		}
		macs := c.n - HandshakeMACsLen
		if m.Type != c.t || m.Sender != 0x01020304 || m.Index != 0xa0b0c0d0 || !bytes.Equal(m.Noise, b[HandshakeHeaderLen:macs]) ||
			!bytes.Equal(m.MAC1, b[macs:macs+MACLen]) || !bytes.Equal(m.MAC2, b[macs+MACLen:]) {
			t.Fatalf("%v: parsed %+v", c.t, m)
		}
		if err := ParseHandshake(b[:c.n-1], &m); !errors.Is(err, ErrTruncated) {
			t.Fatalf("%v short: %v", c.t, err)
		}
		if err := ParseHandshake(append(b, 0), &m); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%v long: %v", c.t, err)
		}
	}
	if HandshakeInitLen != 152 || HandshakeResponseLen != 96 || CookieReplyLen != 68 {
		t.Fatalf("handshake lengths %d, %d", HandshakeInitLen, HandshakeResponseLen)
	}
}

func TestHandshakeRejectsZeroSenderAndOtherTypes(t *testing.T) {
	b := make([]byte, HandshakeInitLen)
	PutHandshakeHeader(b, TypeHandshakeInit, 0, 1)
	var m Handshake
	if err := ParseHandshake(b, &m); !errors.Is(err, ErrMalformed) {
		t.Fatalf("zero sender: %v", err)
	}
	PutHandshakeHeader(b, TypeProbe, 5, 1)
	if err := ParseHandshake(b, &m); !errors.Is(err, ErrMalformed) {
		t.Fatalf("probe type: %v", err)
	}
}

func TestHandshakeVersion(t *testing.T) {
	b := make([]byte, HandshakeInitLen)
	PutHandshakeHeader(b, TypeHandshakeInit, 1, 2)
	if b[1] != HandshakeVersion {
		t.Fatalf("initiation written at version %d", b[1])
	}
	var m Handshake
	b[1] = Version // a version 1 initiation, without MACs
	if err := ParseHandshake(b, &m); !errors.Is(err, ErrBadVersion) {
		t.Fatalf("version 1 initiation: %v", err)
	}
	p := make([]byte, CommonHeaderLen)
	PutCommon(p, TypeProbe, 0)
	if _, _, err := ParseCommon(p); err != nil || p[1] != Version {
		t.Fatalf("probe at version %d: %v", p[1], err)
	}
	p[1] = HandshakeVersion
	if _, _, err := ParseCommon(p); !errors.Is(err, ErrBadVersion) {
		t.Fatalf("probe at version 2: %v", err)
	}
}

func TestCookieReplyRoundTrip(t *testing.T) {
	b := make([]byte, CookieReplyLen)
	for i := range b {
		b[i] = byte(i)
	}
	PutCookieReplyHeader(b, 0x0a0b0c0d, 77)
	var m CookieReply
	if err := ParseCookieReply(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Sender != 0x0a0b0c0d || m.Index != 77 || !bytes.Equal(m.Nonce, b[12:36]) || !bytes.Equal(m.Sealed, b[36:]) {
		t.Fatalf("parsed %+v", m)
	}
	if err := ParseCookieReply(b[:CookieReplyLen-1], &m); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short: %v", err)
	}
	if err := ParseCookieReply(append(b, 0), &m); !errors.Is(err, ErrMalformed) {
		t.Fatalf("long: %v", err)
	}
	PutCookieReplyHeader(b, 0, 77)
	if err := ParseCookieReply(b, &m); !errors.Is(err, ErrMalformed) {
		t.Fatalf("zero sender: %v", err)
	}
	PutHandshakeHeader(b, TypeHandshakeResponse, 5, 77)
	if err := ParseCookieReply(b, &m); !errors.Is(err, ErrMalformed) {
		t.Fatalf("response type: %v", err)
	}
}

func TestSealedRoundTrip(t *testing.T) {
	b := make([]byte, SealedOverhead+5)
	PutSealedHeader(b, 7, 9, 1<<40+3)
	var m Sealed
	if err := ParseSealed(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Sender != 7 || m.Index != 9 || m.Counter != 1<<40+3 || len(m.Body) != 5+TagLen {
		t.Fatalf("parsed %+v", m)
	}
	if err := ParseSealed(b[:SealedOverhead-1], &m); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short: %v", err)
	}
}

func TestSealedDataLayout(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		h := DataHeader{Flags: DataFlagSealed, PathLen: uint8(n), Source: 1, Network: 2, Seq: 3}
		for i := 0; i < n; i++ {
			h.Path[i] = SiteID(10 + i)
		}
		b := make([]byte, h.Len()+SealedDataOverhead(n)+20)
		hl := h.Put(b)
		PutSealedDataE2E(b, hl, 0x11, 0x22)
		if n > 1 {
			PutSealedDataHop(b, hl+SealedDataE2ELen, 0x33, 0x44)
		}
		var p DataHeader
		off, err := ParseData(b, &p)
		if err != nil {
			t.Fatal(err)
		}
		var s SealedData
		if err := ParseSealedData(b, &p, off, &s); err != nil {
			t.Fatal(err)
		}
		if s.Index != 0x11 || s.Counter != 0x22 || s.BodyOff != hl+SealedDataPrefixLen(n) {
			t.Fatalf("path %d: %+v", n, s)
		}
		if n > 1 && (s.HopIndex != 0x33 || s.HopCounter != 0x44 || s.HopOff != hl+12) {
			t.Fatalf("path %d hop fields: %+v", n, s)
		}
		if n == 1 && s.HopOff != 0 {
			t.Fatalf("direct packet has hop fields: %+v", s)
		}
		short := b[:hl+SealedDataOverhead(n)-1]
		if err := ParseSealedData(short, &p, off, &s); !errors.Is(err, ErrTruncated) {
			t.Fatalf("path %d truncated: %v", n, err)
		}
	}
	if SealedDataOverhead(1) != 28 || SealedDataOverhead(3) != 56 {
		t.Fatalf("overheads %d %d", SealedDataOverhead(1), SealedDataOverhead(3))
	}
}

func TestSealedDataNeedsFlag(t *testing.T) {
	h := DataHeader{PathLen: 1, Source: 1, Path: [MaxPath]SiteID{2}}
	b := make([]byte, 100)
	off := h.Put(b)
	var s SealedData
	if err := ParseSealedData(b, &h, off, &s); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unsealed packet parsed as sealed: %v", err)
	}
}

// FuzzSecure feeds arbitrary bytes to every parser of this file: none may
// panic, and accepted slices must lie inside the packet.
func FuzzSecure(f *testing.F) {
	hs := make([]byte, HandshakeInitLen)
	PutHandshakeHeader(hs, TypeHandshakeInit, 1, 2)
	f.Add(hs)
	rs := make([]byte, HandshakeResponseLen)
	PutHandshakeHeader(rs, TypeHandshakeResponse, 1, 2)
	f.Add(rs)
	sl := make([]byte, SealedOverhead+3)
	PutSealedHeader(sl, 1, 2, 3)
	f.Add(sl)
	h := DataHeader{Flags: DataFlagSealed, PathLen: 2, Path: [MaxPath]SiteID{4, 5}}
	d := make([]byte, h.Len()+SealedDataOverhead(2)+4)
	h.Put(d)
	f.Add(d)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Handshake
		if ParseHandshake(b, &m) == nil && (len(m.Noise)+HandshakeHeaderLen+HandshakeMACsLen != len(b) || len(m.MAC1) != MACLen || len(m.MAC2) != MACLen) {
			t.Fatalf("handshake noise length %d of %d", len(m.Noise), len(b))
		}
		var s Sealed
		if ParseSealed(b, &s) == nil && len(s.Body) < TagLen {
			t.Fatalf("sealed body %d bytes", len(s.Body))
		}
		var dh DataHeader
		off, err := ParseData(b, &dh)
		if err != nil {
			return
		}
		var sd SealedData
		if ParseSealedData(b, &dh, off, &sd) == nil {
			if sd.BodyOff+TagLen > len(b) || (dh.PathLen > 1) != (sd.HopOff != 0) {
				t.Fatalf("sealed data %+v in %d bytes", sd, len(b))
			}
		}
	})
}

// FuzzHandshakeV2 feeds arbitrary bytes to the parsers of the version 2
// handshake messages and the cookie reply: none may panic, accepted
// messages have the exact length of their type, and their fields tile the
// packet.
func FuzzHandshakeV2(f *testing.F) {
	for _, t := range []Type{TypeHandshakeInit, TypeHandshakeResponse} {
		b := make([]byte, HandshakeLen(t))
		PutHandshakeHeader(b, t, 1, 2)
		f.Add(b)
	}
	c := make([]byte, CookieReplyLen)
	PutCookieReplyHeader(c, 1, 2)
	f.Add(c)
	f.Add([]byte{Magic, Version, byte(TypeHandshakeInit), 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Handshake
		if ParseHandshake(b, &m) == nil {
			if len(b) != HandshakeLen(m.Type) || b[1] != HandshakeVersion || m.Sender == 0 {
				t.Fatalf("accepted %d-byte %v at version %d", len(b), m.Type, b[1])
			}
			if HandshakeHeaderLen+len(m.Noise)+len(m.MAC1)+len(m.MAC2) != len(b) || &m.MAC2[MACLen-1] != &b[len(b)-1] {
				t.Fatalf("fields do not tile the packet: %d+%d+%d of %d", len(m.Noise), len(m.MAC1), len(m.MAC2), len(b))
			}
		}
		var c CookieReply
		if ParseCookieReply(b, &c) == nil {
			if len(b) != CookieReplyLen || b[1] != HandshakeVersion || len(c.Nonce) != CookieNonceLen || len(c.Sealed) != CookieLen+TagLen {
				t.Fatalf("cookie reply %d bytes, nonce %d, sealed %d", len(b), len(c.Nonce), len(c.Sealed))
			}
		}
	})
}
