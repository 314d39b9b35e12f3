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
		if m.Type != c.t || m.Sender != 0x01020304 || m.Index != 0xa0b0c0d0 || !bytes.Equal(m.Noise, b[HandshakeHeaderLen:]) {
			t.Fatalf("%v: parsed %+v", c.t, m)
		}
		if err := ParseHandshake(b[:c.n-1], &m); !errors.Is(err, ErrTruncated) {
			t.Fatalf("%v short: %v", c.t, err)
		}
		if err := ParseHandshake(append(b, 0), &m); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%v long: %v", c.t, err)
		}
	}
	if HandshakeInitLen != 120 || HandshakeResponseLen != 64 {
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
		if ParseHandshake(b, &m) == nil && len(m.Noise)+HandshakeHeaderLen != len(b) {
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
