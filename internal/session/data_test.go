package session

import (
	"bytes"
	"errors"
	"testing"

	"github.com/detour-overlay/detour/internal/wire"
)

func TestSealOpenDirect(t *testing.T) {
	n := mesh(t, 2)
	connectAll(t, t0, n)
	frame := testFrame(300)
	pkt := dataPacket(t, n[0], []wire.SiteID{2}, frame)
	if len(pkt) != wire.DataHeaderLen(1)+len(frame)+wire.SealedDataOverhead(1) {
		t.Fatalf("packet length %d", len(pkt))
	}
	if bytes.Contains(pkt, frame[20:60]) {
		t.Fatal("plaintext visible in the sealed packet")
	}
	_, got, err := receive(n[1], pkt)
	if err != nil || !bytes.Equal(got, frame) {
		t.Fatalf("OpenData: %v", err)
	}
	if _, _, err := receive(n[1], pkt); !errors.Is(err, ErrReplay) {
		t.Fatalf("replayed packet: %v", err)
	}
	if n[1].Stats().Replays != 1 {
		t.Fatalf("replay not counted: %+v", n[1].Stats())
	}
}

// A frame crosses two relays; each relay checks and re-tags, the
// destination decrypts; relays never see the plaintext.
func TestSealRelayOpen(t *testing.T) {
	n := mesh(t, 4)
	connectAll(t, t0, n)
	frame := testFrame(1400)
	path := []wire.SiteID{2, 3, 4}
	pkt := dataPacket(t, n[0], path, frame)
	at := n[1]
	for hop := 0; hop < 2; hop++ {
		if bytes.Contains(pkt, frame[100:140]) {
			t.Fatal("plaintext visible to a relay")
		}
		next, _, err := receive(at, pkt)
		if err != nil || next != path[hop+1] {
			t.Fatalf("relay %v: next %v, %v", at.Self(), next, err)
		}
		at = n[next-1]
	}
	_, got, err := receive(n[3], pkt)
	if err != nil || !bytes.Equal(got, frame) {
		t.Fatalf("destination: %v", err)
	}
}

// A relay forwards only packets authenticated by the previous site: a
// replayed relayed packet and a packet from a site without a session are
// dropped.
func TestRelayRejectsReplayAndUnauthenticated(t *testing.T) {
	n := mesh(t, 3)
	connectAll(t, t0, n)
	pkt := dataPacket(t, n[0], []wire.SiteID{2, 3}, testFrame(64))
	replay := bytes.Clone(pkt)
	if _, _, err := receive(n[1], pkt); err != nil {
		t.Fatal(err)
	}
	if _, _, err := receive(n[1], replay); !errors.Is(err, ErrReplay) {
		t.Fatalf("replayed relayed packet: %v", err)
	}
	// Site 3 has no session with a stranger: a packet that claims a source
	// not in the relay's set is dropped.
	bad := bytes.Clone(replay)
	bad[8], bad[9], bad[10], bad[11] = 0, 0, 0, 99
	if _, _, err := receive(n[1], bad); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("relayed packet from an unlisted site: %v", err)
	}
}

// hopMutable reports whether byte i of a sealed packet with a path of
// pathLen sites is one a relay may legitimately rewrite.
func hopMutable(i, pathLen int) bool {
	if i == 4 {
		return true // hop index
	}
	hop := wire.DataHeaderLen(pathLen) + wire.SealedDataE2ELen
	return pathLen > 1 && i >= hop && i < hop+wire.SealedDataHopLen
}

// A modified relay flips one bit anywhere in what it forwards: the
// destination rejects every such packet, except for the bytes relays are
// meant to rewrite (hop index, hop block), which cannot alter the frame.
func TestModifiedRelayDetectedAtDestination(t *testing.T) {
	n := mesh(t, 3)
	connectAll(t, t0, n)
	frame := testFrame(100)
	path := []wire.SiteID{2, 3}
	for i := 0; i < len(dataPacket(t, n[0], path, frame)); i++ {
		for _, bit := range []byte{0x01, 0x80} {
			pkt := dataPacket(t, n[0], path, frame)
			if _, _, err := receive(n[1], pkt); err != nil {
				t.Fatalf("honest relay step: %v", err)
			}
			pkt[i] ^= bit // the relay's modification
			_, got, err := receive(n[2], pkt)
			if hopMutable(i, len(path)) {
				// Relays may rewrite these: the packet is then delivered
				// intact, or dropped (a hop index that no longer names
				// this site), but never altered.
				if err == nil && !bytes.Equal(got, frame) {
					t.Fatalf("byte %d (relay-writable) altered the frame", i)
				}
				if i > 4 && err != nil {
					t.Fatalf("hop block byte %d broke delivery: %v", i, err)
				}
				continue
			}
			if err == nil {
				t.Fatalf("destination accepted a packet with byte %d bit %#x flipped by the relay", i, bit)
			}
		}
	}
	if n[2].Stats().AuthFailures == 0 {
		t.Fatal("authentication failures not counted")
	}
}

// Tampering before a relay: the relay rejects any change to the header or
// the security block (its hop tag covers them); a change to the ciphertext
// passes the relay (it cannot check it cheaply) and fails at the
// destination.
func TestTamperedBeforeRelay(t *testing.T) {
	n := mesh(t, 3)
	connectAll(t, t0, n)
	path := []wire.SiteID{2, 3}
	size := len(dataPacket(t, n[0], path, testFrame(64)))
	body := wire.FrameOffset(len(path), true)
	for i := 0; i < size; i++ {
		pkt := dataPacket(t, n[0], path, testFrame(64))
		pkt[i] ^= 0x04
		_, _, err := receive(n[1], pkt)
		if i < body {
			if err == nil {
				t.Fatalf("relay accepted a packet with header/security byte %d changed", i)
			}
			continue
		}
		if err != nil {
			t.Fatalf("relay rejected a ciphertext change at %d: %v", i, err)
		}
		if _, _, err := receive(n[2], pkt); !errors.Is(err, ErrAuth) {
			t.Fatalf("destination accepted ciphertext byte %d changed: %v", i, err)
		}
	}
}

func TestSealNeedsSessions(t *testing.T) {
	n := mesh(t, 3)
	handshake(t, t0, n[0], n[2]) // 1-3 only
	if _, _, err := trySeal(n[0], []wire.SiteID{2, 3}, testFrame(64)); !errors.Is(err, ErrNoSession) {
		t.Fatalf("seal through a relay without a session: %v", err)
	}
	if _, _, err := trySeal(n[0], []wire.SiteID{3}, testFrame(64)); err != nil {
		t.Fatalf("direct seal: %v", err)
	}
	h := wire.DataHeader{Source: 1, PathLen: 1, Path: [wire.MaxPath]wire.SiteID{3}}
	if _, err := n[0].SealData(make([]byte, 40), &h, 64); !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("short buffer: %v", err)
	}
}

func TestOpenRejectsUnsealedAndMisdirected(t *testing.T) {
	n := mesh(t, 2)
	connectAll(t, t0, n)
	h := wire.DataHeader{Source: 1, PathLen: 1, Path: [wire.MaxPath]wire.SiteID{2}}
	b := make([]byte, 200)
	off := h.Put(b)
	if _, err := n[1].OpenData(b, &h, off); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("unsealed packet: %v", err)
	}
	pkt := dataPacket(t, n[0], []wire.SiteID{2}, testFrame(64))
	var ph wire.DataHeader
	off, _ = wire.ParseData(pkt, &ph)
	if _, err := n[0].OpenData(pkt, &ph, off); !errors.Is(err, ErrMisdirected) {
		t.Fatalf("packet opened by its source: %v", err)
	}
}

// The data-path operations must not allocate.
func TestDataPathDoesNotAllocate(t *testing.T) {
	n := mesh(t, 3)
	connectAll(t, t0, n)
	frame := testFrame(1400)
	buf := make([]byte, wire.FrameOffset(2, true)+len(frame)+wire.TagLen)
	pkt := make([]byte, len(buf))
	var h wire.DataHeader
	allocs := testing.AllocsPerRun(200, func() {
		h = wire.DataHeader{Source: 1, PathLen: 2, Path: [wire.MaxPath]wire.SiteID{2, 3}}
		copy(buf[wire.FrameOffset(2, true):], frame)
		m, err := n[0].SealData(buf, &h, len(frame))
		if err != nil {
			t.Fatal(err)
		}
		copy(pkt, buf[:m])
		var ph wire.DataHeader
		off, _ := wire.ParseData(pkt, &ph)
		if _, err := n[1].Relay(pkt, &ph, off); err != nil {
			t.Fatal(err)
		}
		if _, err := n[2].OpenData(pkt, &ph, off); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("seal+relay+open allocate %.1f times per packet", allocs)
	}
	ctl := make([]byte, 0, 256)
	allocs = testing.AllocsPerRun(200, func() {
		m, err := n[0].SealControl(ctl[:0], 2, frame[:100])
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := n[1].OpenControl(m); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("control seal+open allocate %.1f times", allocs)
	}
}
