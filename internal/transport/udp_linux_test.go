package transport

import (
	"net/netip"
	"testing"
)

func loopback(t *testing.T) *UDP {
	t.Helper()
	u, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

func TestUDPBatchRoundTrip(t *testing.T) {
	a, b := loopback(t), loopback(t)
	out := make([]Message, 10)
	for i := range out {
		out[i] = Message{Buf: []byte{byte(i), 1, 2, 3}, N: 4, Addr: b.LocalAddr()}
	}
	if n, err := a.WriteBatch(out); err != nil || n != 10 {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	in := make([]Message, 16)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	got := 0
	for got < 10 {
		n, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if in[i].N != 4 || in[i].Buf[0] != byte(got) || in[i].Addr != a.LocalAddr() {
				t.Fatalf("datagram %d: n=%d first=%d from %v", got, in[i].N, in[i].Buf[0], in[i].Addr)
			}
			got++
		}
	}
}

func TestUDPCloseUnblocksRead(t *testing.T) {
	u := loopback(t)
	done := make(chan error)
	go func() {
		_, err := u.ReadBatch([]Message{{Buf: make([]byte, 100)}})
		done <- err
	}()
	u.Close()
	if err := <-done; err != ErrClosed {
		t.Fatalf("read after close: %v, want ErrClosed", err)
	}
}

func BenchmarkUDPBatch(b *testing.B) {
	x, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	y, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		b.Fatal(err)
	}
	defer y.Close()
	out := make([]Message, 32)
	in := make([]Message, 32)
	for i := range out {
		out[i] = Message{Buf: make([]byte, 1400), N: 1400, Addr: y.LocalAddr()}
		in[i] = Message{Buf: make([]byte, 2048)}
	}
	b.ReportAllocs()
	b.SetBytes(32 * 1400)
	for b.Loop() {
		x.WriteBatch(out)
		for got := 0; got < 32; {
			n, _ := y.ReadBatch(in)
			got += n
		}
	}
}
