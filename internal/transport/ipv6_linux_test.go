package transport

import (
	"net/netip"
	"testing"
	"time"
)

// TestUDPIPv6AndDualStack: a socket bound to [::1] exchanges batches with
// another over IPv6, and a socket bound to the IPv6 wildcard (dual-stack,
// as a gateway that listens on [::]) reaches both an IPv4 and an IPv6
// peer from one batch, and sees their addresses as they are (IPv4 ones
// unmapped), so that a site's address learned from a datagram is the one
// it advertised. Everything stays on loopback.
func TestUDPIPv6AndDualStack(t *testing.T) {
	listen := func(s string) *UDP {
		u, err := ListenUDP(netip.MustParseAddrPort(s))
		if err != nil {
			t.Skipf("no %s on this machine: %v", s, err)
		}
		t.Cleanup(func() { u.Close() })
		return u
	}
	v6, v4 := listen("[::1]:0"), listen("127.0.0.1:0")
	dual := listen("[::]:0")
	port := dual.LocalAddr().Port()
	out := []Message{
		{Buf: []byte{6}, N: 1, Addr: v6.LocalAddr()},
		{Buf: []byte{4}, N: 1, Addr: v4.LocalAddr()},
	}
	if n, err := dual.WriteBatch(out); err != nil || n != 2 {
		t.Fatalf("WriteBatch to an IPv6 and an IPv4 peer = %d, %v", n, err)
	}
	for _, c := range []struct {
		u    *UDP
		want byte
		from netip.AddrPort
	}{
		{v6, 6, netip.AddrPortFrom(netip.IPv6Loopback(), port)},
		{v4, 4, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)},
	} {
		got := readOne(t, c.u)
		if got.N != 1 || got.Buf[0] != c.want || got.Addr != c.from {
			t.Fatalf("IPv%d peer got n=%d byte=%d from %v, want from %v", c.want, got.N, got.Buf[0], got.Addr, c.from)
		}
	}
	// And back: the dual-stack socket names each sender by its own family.
	for _, u := range []*UDP{v6, v4} {
		if n, err := u.WriteBatch([]Message{{Buf: []byte{9}, N: 1, Addr: netip.AddrPortFrom(u.LocalAddr().Addr(), port)}}); err != nil || n != 1 {
			t.Fatalf("reply from %v: %d, %v", u.LocalAddr(), n, err)
		}
		if got := readOne(t, dual); got.Addr != u.LocalAddr() {
			t.Fatalf("dual-stack socket saw %v, want %v", got.Addr, u.LocalAddr())
		}
	}
}

// readOne reads one datagram from u, failing after a second.
func readOne(t *testing.T, u *UDP) Message {
	t.Helper()
	done := make(chan Message, 1)
	go func() {
		in := []Message{{Buf: make([]byte, 64)}}
		if n, err := u.ReadBatch(in); err == nil && n == 1 {
			done <- in[0]
		}
	}()
	select {
	case m := <-done:
		return m
	case <-time.After(time.Second):
		t.Fatalf("nothing received on %v", u.LocalAddr())
		return Message{}
	}
}
