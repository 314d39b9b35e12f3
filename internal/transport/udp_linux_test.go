package transport

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	sent := time.Now()
	for got < 10 {
		n, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if in[i].N != 4 || in[i].Buf[0] != byte(got) || in[i].Addr != a.LocalAddr() {
				t.Fatalf("datagram %d: n=%d first=%d from %v", got, in[i].N, in[i].Buf[0], in[i].Addr)
			}
			// The kernel's receive time lies between the send and now.
			if at := in[i].At; at.Before(sent.Add(-time.Second)) || at.After(time.Now()) {
				t.Fatalf("datagram %d: receive time %v, sent at %v", got, at, sent)
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

// sendAndCollect sends want as one batch from a to b and reads until every
// datagram arrived, with read batches of batch messages of bufSize bytes.
func sendAndCollect(t *testing.T, a, b *UDP, want []Message, batch, bufSize int) [][]byte {
	t.Helper()
	in := make([]Message, batch)
	for i := range in {
		in[i].Buf = make([]byte, bufSize)
	}
	// A first read switches GRO on (it depends on the buffers' size).
	a.WriteBatch([]Message{{Buf: []byte{0}, N: 1, Addr: b.LocalAddr()}})
	if _, err := b.ReadBatch(in); err != nil {
		t.Fatal(err)
	}
	if n, err := a.WriteBatch(want); err != nil || n != len(want) {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	var got [][]byte
	for len(got) < len(want) {
		n, err := b.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if in[i].Addr != a.LocalAddr() {
				t.Fatalf("datagram from %v", in[i].Addr)
			}
			got = append(got, append([]byte(nil), in[i].Buf[:in[i].N]...))
		}
	}
	return got
}

// mixedBatch is runs of equal sizes (GSO groups), a shorter last segment
// and single datagrams, each with distinct bytes.
func mixedBatch(to netip.AddrPort) []Message {
	var out []Message
	sizes := []int{}
	for i := 0; i < 40; i++ {
		sizes = append(sizes, 1200)
	}
	sizes = append(sizes, 700, 64, 64, 64, 1400, 9)
	for i, n := range sizes {
		m := pattern(to, n, byte(i*7))
		m.Buf[0] = byte(i)
		out = append(out, m)
	}
	return out
}

func TestUDPOffloadsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name           string
		batch, bufSize int
		off            bool
	}{
		{"GRO, batch fits", 64, 65535, false},
		{"GRO, spill across reads", 4, 65535, false},
		{"small buffers, no GRO", 64, 2048, false},
		{"offloads off", 64, 65535, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := loopback(t), loopback(t)
			if c.off {
				a.DisableOffloads()
				b.DisableOffloads()
			}
			want := mixedBatch(b.LocalAddr())
			got := sendAndCollect(t, a, b, want, c.batch, c.bufSize)
			for i := range want {
				if !bytes.Equal(got[i], want[i].Buf[:want[i].N]) {
					t.Fatalf("datagram %d: %d bytes starting %d, want %d starting %d", i, len(got[i]), got[i][0], want[i].N, want[i].Buf[0])
				}
			}
			gso, _ := a.OffloadStats()
			_, gro := b.OffloadStats()
			t.Logf("GSO sends %d, coalesced receives %d", gso, gro)
			if !c.off && (gso == 0 || (c.bufSize >= groBufSize && gro == 0)) {
				t.Errorf("offloads unused: GSO sends %d, coalesced receives %d", gso, gro)
			}
		})
	}
}

func TestUDPLargeDatagrams(t *testing.T) {
	// Two 30000-byte datagrams go out as one GSO send and arrive whole.
	a, b := loopback(t), loopback(t)
	want := []Message{pattern(b.LocalAddr(), 30000, 1), pattern(b.LocalAddr(), 30000, 2)}
	got := sendAndCollect(t, a, b, want, 8, 65535)
	for i := range want {
		if !bytes.Equal(got[i], want[i].Buf) {
			t.Fatalf("datagram %d differs", i)
		}
	}
}

func benchUDP(b *testing.B, size, bufSize int, offloads bool) {
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
	if !offloads {
		x.DisableOffloads()
		y.DisableOffloads()
	}
	out := make([]Message, 32)
	in := make([]Message, MaxBatch)
	for i := range out {
		out[i] = Message{Buf: make([]byte, size), N: size, Addr: y.LocalAddr()}
	}
	for i := range in {
		in[i] = Message{Buf: make([]byte, bufSize)}
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(out) * size))
	for b.Loop() {
		x.WriteBatch(out)
		for got := 0; got < len(out); {
			n, _ := y.ReadBatch(in)
			got += n
		}
	}
}

func BenchmarkUDPOffloads(b *testing.B) {
	for _, size := range []int{64, 1400} {
		b.Run(fmt.Sprintf("size=%d/offloads=off", size), func(b *testing.B) { benchUDP(b, size, 65535, false) })
		b.Run(fmt.Sprintf("size=%d/offloads=on", size), func(b *testing.B) { benchUDP(b, size, 65535, true) })
	}
}

// A filter that rejects every datagram keeps them out of the socket, and
// SocketDrops counts them.
func TestFilterDropsAndCounts(t *testing.T) {
	u, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.SetFilter([]unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}); err != nil {
		t.Fatal(err)
	}
	s, err := ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	msgs := make([]Message, 5)
	for i := range msgs {
		msgs[i] = Message{Buf: []byte{1, 2, 3}, N: 3, Addr: u.LocalAddr()}
	}
	if _, err := s.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, err := u.SocketDrops()
		if err != nil {
			t.Fatal(err)
		}
		if n == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d datagrams dropped by the filter, want 5", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Accept all again: the next datagram is read.
	if err := u.SetFilter([]unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0x40000}}); err != nil {
		t.Fatal(err)
	}
	s.WriteBatch(msgs[:1])
	in := []Message{{Buf: make([]byte, 64)}}
	if n, err := u.ReadBatch(in); err != nil || n != 1 || in[0].N != 3 {
		t.Fatalf("read after the filter was lifted: %d %v", n, err)
	}
}
