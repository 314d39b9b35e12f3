package session

import (
	"errors"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/wire"
)

// TestAdmitRemoveAndNewKey: a node that did not know site 3 refuses its
// initiation, admits it at run time and then completes a handshake and
// opens its frames; given a new key for site 3, its sessions keep
// working until a handshake with the new key replaces them, and an
// initiation with the old key is refused; removed, site 3's frames and
// handshakes are refused and nothing is sealed to it.
func TestAdmitRemoveAndNewKey(t *testing.T) {
	nodes := mesh(t, 2)
	a := nodes[0]
	k3, _ := keys.Generate(seeded(300))
	c, err := NewNode(Config{Self: 3, Private: k3, Peers: map[wire.SiteID]keys.PublicKey{1: a.PublicKey()}, Rand: seeded(3)})
	if err != nil {
		t.Fatal(err)
	}
	init, _ := c.Connect(t0, 1)
	if _, err := a.HandleHandshake(t0, init); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("initiation from a site not admitted: %v", err)
	}
	if changed, err := a.Admit(3, k3.Public()); !changed || err != nil {
		t.Fatalf("Admit = %v, %v", changed, err)
	}
	if changed, _ := a.Admit(3, k3.Public()); changed {
		t.Errorf("admitting the same key twice changed the set")
	}
	if _, err := a.Admit(2, k3.Public()); err == nil {
		t.Errorf("a second site with site 3's key admitted")
	}
	now := t0.Add(time.Second)
	c.Forget(1) // its first initiation was refused
	handshake(t, now, c, a)
	frame := testFrame(100)
	if _, got, err := receive(a, dataPacket(t, c, []wire.SiteID{1}, frame)); err != nil || string(got) != string(frame) {
		t.Fatalf("frame from the admitted site: %v", err)
	}

	// Site 3 rotates: a new node with a new key, same site.
	k3b, _ := keys.Generate(seeded(301))
	c2, _ := NewNode(Config{Self: 3, Private: k3b, Peers: map[wire.SiteID]keys.PublicKey{1: a.PublicKey()}, Rand: seeded(4)})
	if changed, err := a.Admit(3, k3b.Public()); !changed || err != nil {
		t.Fatalf("Admit of a new key = %v, %v", changed, err)
	}
	if _, got, err := receive(a, dataPacket(t, c, []wire.SiteID{1}, frame)); err != nil || string(got) != string(frame) {
		t.Fatalf("frame on the session made with the old key, after the new key was given: %v", err)
	}
	later := now.Add(time.Second)
	old, _ := c.Connect(later, 1) // no new initiation: c has a session
	if old == nil {
		c.Forget(1)
		old, _ = c.Connect(later, 1)
	}
	if _, err := a.HandleHandshake(later, old); err == nil {
		t.Errorf("initiation with the replaced key accepted")
	}
	handshake(t, later.Add(time.Millisecond), c2, a)
	if _, got, err := receive(a, dataPacket(t, c2, []wire.SiteID{1}, frame)); err != nil || string(got) != string(frame) {
		t.Fatalf("frame with the new key: %v", err)
	}

	if !a.Remove(3) || a.Remove(3) {
		t.Fatalf("Remove does not report the site once")
	}
	if _, _, err := receive(a, dataPacket(t, c2, []wire.SiteID{1}, frame)); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("frame from a removed site: %v", err)
	}
	if _, _, err := trySeal(a, []wire.SiteID{3}, frame); err == nil {
		t.Errorf("sealed a frame to a removed site")
	}
	c2.Forget(1)
	again, _ := c2.Connect(later.Add(time.Second), 1)
	if _, err := a.HandleHandshake(later.Add(time.Second), again); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("initiation from a removed site: %v", err)
	}
	if st := a.Stats(); st.Admitted != 2 || st.Removed != 1 {
		t.Errorf("admitted %d, removed %d; want 2, 1", st.Admitted, st.Removed)
	}
}
