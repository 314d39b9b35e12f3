package transport

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"
)

var (
	addrA = netip.MustParseAddrPort("198.18.0.1:4800")
	addrB = netip.MustParseAddrPort("198.18.0.2:4800")
)

func sized(addr netip.AddrPort, sizes ...int) []Message {
	var m []Message
	for _, n := range sizes {
		m = append(m, Message{Buf: make([]byte, n), N: n, Addr: addr})
	}
	return m
}

func TestGSOGroup(t *testing.T) {
	cases := []struct {
		name string
		msgs []Message
		want int
	}{
		{"empty", nil, 0},
		{"one", sized(addrA, 100), 1},
		{"equal run", sized(addrA, 100, 100, 100), 3},
		{"shorter last", sized(addrA, 100, 100, 60, 100), 3},
		{"longer second", sized(addrA, 100, 200), 1},
		{"other address", append(sized(addrA, 100, 100), sized(addrB, 100)...), 2},
		{"zero size", sized(addrA, 0, 0), 1},
		{"byte limit", sized(addrA, 30000, 30000, 30000), 2},
		{"segment limit", sized(addrA, make([]int, 100)...), 1},
	}
	big := sized(addrA)
	for i := 0; i < 100; i++ {
		big = append(big, sized(addrA, 10)...)
	}
	cases = append(cases, struct {
		name string
		msgs []Message
		want int
	}{"64 segments at most", big, maxGSOSegments})
	for _, c := range cases {
		if got := gsoGroup(c.msgs); got != c.want {
			t.Errorf("%s: gsoGroup = %d, want %d", c.name, got, c.want)
		}
	}
}

// groCmsg builds a control buffer with a UDP_GRO message of size s after
// an unrelated message.
func groCmsg(s int32, other bool) []byte {
	var b []byte
	if other {
		h := make([]byte, 24)
		binary.NativeEndian.PutUint64(h, 20)
		binary.NativeEndian.PutUint32(h[8:], 0) // SOL_IP
		binary.NativeEndian.PutUint32(h[12:], 8)
		b = append(b, h...)
	}
	h := make([]byte, 24)
	binary.NativeEndian.PutUint64(h, 20)
	binary.NativeEndian.PutUint32(h[8:], solUDP)
	binary.NativeEndian.PutUint32(h[12:], udpGRO)
	binary.NativeEndian.PutUint32(h[16:], uint32(s))
	return append(b, h...)
}

func TestGROSize(t *testing.T) {
	if got := groSize(groCmsg(1234, false)); got != 1234 {
		t.Errorf("plain: %d", got)
	}
	if got := groSize(groCmsg(1400, true)); got != 1400 {
		t.Errorf("after another message: %d", got)
	}
	if got := groSize(groCmsg(-5, false)); got != 0 {
		t.Errorf("negative size: %d", got)
	}
	if got := groSize(nil); got != 0 {
		t.Errorf("empty: %d", got)
	}
	bad := groCmsg(1400, false)
	binary.NativeEndian.PutUint64(bad, 1000)
	if got := groSize(bad); got != 0 {
		t.Errorf("length past the buffer: %d", got)
	}
}

func TestPutGSOCmsgRoundTrip(t *testing.T) {
	b := make([]byte, gsoCmsgLen)
	if n := putGSOCmsg(b, 1452); n != gsoCmsgLen {
		t.Fatalf("length %d", n)
	}
	if l := binary.NativeEndian.Uint64(b); l != 18 {
		t.Fatalf("cmsg_len %d, want 18", l)
	}
	if s := binary.NativeEndian.Uint16(b[16:]); s != 1452 {
		t.Fatalf("segment size %d", s)
	}
}

// datagrams expands received messages into the datagrams they carry, the
// expected result of splitCoalesced.
func datagrams(msgs []Message, seg []int) [][]byte {
	var out [][]byte
	for i, m := range msgs {
		k, s := segments(m.N, seg[i]), seg[i]
		if k == 1 {
			s = m.N
		}
		for j := 0; j < k; j++ {
			out = append(out, append([]byte(nil), m.Buf[j*s:min((j+1)*s, m.N)]...))
		}
	}
	return out
}

// checkSplit runs splitCoalesced on msgs (room for cap messages) and
// checks that the datagrams come out in order, whole, with their
// addresses, across the batch and the spill.
func checkSplit(t *testing.T, recv []Message, seg []int, room int) {
	t.Helper()
	want := datagrams(recv, seg)
	msgs := make([]Message, room)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 65535)
	}
	for i, m := range recv {
		msgs[i].N = copy(msgs[i].Buf, m.Buf[:m.N])
		msgs[i].Addr = m.Addr
	}
	var sp spill
	n := splitCoalesced(msgs, len(recv), seg, &sp)
	var got [][]byte
	for i := 0; i < n; i++ {
		got = append(got, append([]byte(nil), msgs[i].Buf[:msgs[i].N]...))
	}
	for sp.pending() {
		k := sp.drain(msgs[:min(3, len(msgs))])
		for i := 0; i < k; i++ {
			got = append(got, append([]byte(nil), msgs[i].Buf[:msgs[i].N]...))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d datagrams, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("datagram %d: % x, want % x", i, got[i], want[i])
		}
	}
}

func pattern(addr netip.AddrPort, n int, tag byte) Message {
	b := make([]byte, n)
	for i := range b {
		b[i] = tag + byte(i)
	}
	return Message{Buf: b, N: n, Addr: addr}
}

func TestSplitCoalesced(t *testing.T) {
	recv := []Message{pattern(addrA, 250, 1), pattern(addrB, 30, 2), pattern(addrA, 100, 3), pattern(addrB, 64, 4)}
	seg := []int{100, 0, 100, 16}
	t.Run("fits", func(t *testing.T) { checkSplit(t, recv, seg, 16) })
	t.Run("spills inside a message", func(t *testing.T) { checkSplit(t, recv, seg, 5) })
	t.Run("spills at a boundary", func(t *testing.T) { checkSplit(t, recv, seg, 4) })
	t.Run("plain datagrams", func(t *testing.T) { checkSplit(t, recv, []int{0, 0, 0, 0}, 4) })
}

func FuzzSplitCoalesced(f *testing.F) {
	f.Add([]byte{10, 3, 20, 0, 7, 7}, uint8(4))
	f.Add([]byte{200, 50, 1, 1}, uint8(2))
	f.Fuzz(func(t *testing.T, spec []byte, room uint8) {
		// spec is pairs of (length, segment size) of received messages.
		var recv []Message
		var seg []int
		for i := 0; i+1 < len(spec) && len(recv) < 8; i += 2 {
			recv = append(recv, pattern(addrA, int(spec[i])+1, byte(i)))
			seg = append(seg, int(spec[i+1]))
		}
		r := int(room%16) + 1
		if len(recv) == 0 || len(recv) > r {
			return
		}
		checkSplit(t, recv, seg, r)
	})
}

// FuzzGROSize feeds arbitrary control data to the control-message
// readers: no panic, no negative size, no receive time before 1970.
func FuzzGROSize(f *testing.F) {
	f.Add(groCmsg(1400, true))
	f.Add(append(groCmsg(1400, false), tsCmsg(1700000000, 5)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if s := groSize(b); s < 0 {
			t.Fatalf("negative size %d", s)
		}
		if at := rxTime(b); !at.IsZero() && at.Unix() <= 0 {
			t.Fatalf("receive time %v", at)
		}
	})
}

// tsCmsg builds an SO_TIMESTAMPNS control message.
func tsCmsg(sec, nsec int64) []byte {
	b := make([]byte, cmsgHdrLen+16)
	binary.NativeEndian.PutUint64(b[0:8], cmsgHdrLen+16)
	binary.NativeEndian.PutUint32(b[8:12], solSocket)
	binary.NativeEndian.PutUint32(b[12:16], scmTimestampNS)
	binary.NativeEndian.PutUint64(b[16:24], uint64(sec))
	binary.NativeEndian.PutUint64(b[24:32], uint64(nsec))
	return b
}

func TestRxTime(t *testing.T) {
	b := append(groCmsg(1400, false), tsCmsg(1700000000, 5)...)
	if got := rxTime(b); !got.Equal(time.Unix(1700000000, 5)) {
		t.Fatalf("rxTime = %v", got)
	}
	if groSize(b) != 1400 {
		t.Fatal("GRO size lost next to a timestamp")
	}
	if !rxTime(groCmsg(1400, true)).IsZero() || !rxTime(tsCmsg(5, 2e9)).IsZero() {
		t.Fatal("a time from no timestamp or a bad one")
	}
}
