package session

import (
	"testing"
	"time"
)

// TestForgetStartsAfresh: after Forget a site has no session with the
// peer, sealing to it fails, and Connect starts a new handshake, which
// the peer answers as usual.
func TestForgetStartsAfresh(t *testing.T) {
	nodes := mesh(t, 2)
	a, b := nodes[0], nodes[1]
	handshake(t, t0, a, b)
	if !a.Ready(b.Self()) {
		t.Fatal("no session after the handshake")
	}
	a.Forget(b.Self())
	if a.Ready(b.Self()) {
		t.Fatal("a session survived Forget")
	}
	if _, err := a.SealControl(nil, b.Self(), []byte("probe")); err == nil {
		t.Fatal("sealed to a forgotten peer")
	}
	if got := a.Stats().Forgotten; got != 1 {
		t.Errorf("Forgotten = %d, want 1", got)
	}
	handshake(t, t0.Add(time.Second), a, b)
	if !a.Ready(b.Self()) {
		t.Fatal("no session after a new handshake")
	}
	a.Forget(0) // an unknown site is ignored
}
