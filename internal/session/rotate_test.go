package session

import (
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// TestRotateLosesNothing: site 1 takes a new key while it has a session
// with site 2. Its first initiation with the new key reaches 2 before 2
// knows the key and is refused; frames keep flowing on the old session
// meanwhile. Once 2 admits the new key, the retry completes, frames use
// the new session, and a frame sealed on the old one before the switch
// and delivered after it still opens: nothing is lost.
func TestRotateLosesNothing(t *testing.T) {
	nodes := mesh(t, 2)
	a, b := nodes[0], nodes[1]
	handshake(t, t0, a, b)
	frame := testFrame(200)
	deliver := func(pkt []byte, what string) {
		t.Helper()
		if _, got, err := receive(b, pkt); err != nil || string(got) != string(frame) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	deliver(dataPacket(t, a, []wire.SiteID{2}, frame), "before the rotation")

	newKey, _ := keys.Generate(seeded(999))
	now := t0.Add(time.Second)
	out := a.Rotate(now, newKey)
	if len(out) != 1 || out[0].To != 2 {
		t.Fatalf("Rotate returned %d initiations", len(out))
	}
	if a.PublicKey() != newKey.Public() {
		t.Fatalf("public key not rotated")
	}
	if _, err := b.HandleHandshake(now, out[0].Packet); err == nil {
		t.Fatalf("an initiation with a key site 2 does not know was accepted")
	}
	inFlight := dataPacket(t, a, []wire.SiteID{2}, frame) // still the old session
	deliver(dataPacket(t, a, []wire.SiteID{2}, frame), "after the rotation, before the new handshake")

	if changed, err := b.Admit(1, newKey.Public()); !changed || err != nil {
		t.Fatalf("Admit = %v, %v", changed, err)
	}
	var retry []byte
	for at := now; at.Before(now.Add(3 * time.Second)); at = at.Add(100 * time.Millisecond) {
		for _, o := range a.Tick(at) {
			if o.To == 2 {
				retry = o.Packet
			}
		}
		if retry != nil {
			now = at
			break
		}
	}
	if retry == nil {
		t.Fatalf("no retry of the initiation")
	}
	complete(t, now, a, b, retry)
	deliver(dataPacket(t, a, []wire.SiteID{2}, frame), "on the new session")
	deliver(inFlight, "sealed on the old session before the switch, delivered after")
	// Site 2 initiates to the new key too (it may rekey first).
	b.Forget(1)
	a.Forget(2)
	handshake(t, now.Add(time.Second), b, a)
}
