package session

import (
	"bytes"
	"errors"
	"testing"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// A forged probe cannot pass OpenControl: not from a stranger with its own
// keys, not with a tampered byte, not as a replay.
func TestForgedControlRejected(t *testing.T) {
	n := mesh(t, 2)
	connectAll(t, t0, n)
	probe := []byte{wire.Magic, wire.Version, byte(wire.TypeProbe), 0, 1, 2, 3, 4}
	msg, err := n[0].SealControl(nil, 2, probe)
	if err != nil || len(msg) != len(probe)+wire.SealedOverhead {
		t.Fatalf("SealControl: %v, %d bytes", err, len(msg))
	}
	for i := range msg {
		bad := bytes.Clone(msg)
		bad[i] ^= 0x10
		if _, _, err := n[1].OpenControl(bad); err == nil {
			t.Fatalf("sealed probe with byte %d changed accepted", i)
		}
	}
	if _, inner, err := n[1].OpenControl(bytes.Clone(msg)); err != nil || !bytes.Equal(inner, probe) {
		t.Fatalf("genuine probe: %v", err)
	}
	if _, _, err := n[1].OpenControl(msg); !errors.Is(err, ErrReplay) {
		t.Fatalf("replayed probe: %v", err)
	}
	// A stranger that knows site 2's public key but is not in its set.
	k, _ := keys.Generate(seeded(77))
	stranger, _ := NewNode(Config{Self: 1, Private: k, Peers: map[wire.SiteID]keys.PublicKey{2: n[1].PublicKey()}, Rand: seeded(78)})
	init, _ := stranger.Connect(t0, 2)
	if _, err := n[1].HandleHandshake(t0, init); err == nil {
		t.Fatal("stranger completed a handshake")
	}
	if _, err := stranger.SealControl(nil, 2, probe); !errors.Is(err, ErrNoSession) {
		t.Fatalf("stranger sealed without a session: %v", err)
	}
	// An unsealed probe is not a sealed message.
	if _, _, err := n[1].OpenControl(probe); err == nil {
		t.Fatal("unsealed probe accepted")
	}
}

func TestSealControlAppends(t *testing.T) {
	n := mesh(t, 2)
	connectAll(t, t0, n)
	prefix := []byte("keep")
	out, err := n[0].SealControl(prefix, 2, []byte("hello"))
	if err != nil || !bytes.Equal(out[:4], prefix) {
		t.Fatalf("prefix lost: %v", err)
	}
	if _, inner, err := n[1].OpenControl(out[4:]); err != nil || string(inner) != "hello" {
		t.Fatalf("OpenControl: %v %q", err, inner)
	}
}
