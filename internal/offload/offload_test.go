package offload

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// flow describes a hand-built TCP segment.
type flow struct {
	v6      bool
	vlan    bool
	seq     uint32
	flags   uint8
	payload []byte
	options []byte // a multiple of 4 bytes
	window  uint16
}

// build returns an Ethernet frame for fl with correct lengths and
// checksums, every field written by hand.
func build(fl flow) []byte {
	var b []byte
	b = append(b, 0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1) // dst, src MAC
	if fl.vlan {
		b = append(b, 0x81, 0x00, 0x00, 0x07)
	}
	tcpLen := 20 + len(fl.options) + len(fl.payload)
	l3 := len(b) + 2
	if fl.v6 {
		b = append(b, 0x86, 0xdd)
		ip := make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(tcpLen))
		ip[6], ip[7] = 6, 64
		copy(ip[8:], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})
		copy(ip[24:], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 2})
		b = append(b, ip...)
	} else {
		b = append(b, 0x08, 0x00)
		ip := []byte{0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 198, 19, 1, 1, 198, 19, 3, 1}
		binary.BigEndian.PutUint16(ip[2:], uint16(20+tcpLen))
		ipv4HeaderChecksum(ip)
		b = append(b, ip...)
	}
	l4 := len(b)
	tcp := make([]byte, 20, tcpLen)
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5201)
	binary.BigEndian.PutUint32(tcp[4:], fl.seq)
	binary.BigEndian.PutUint32(tcp[8:], 777)
	tcp[12] = byte((20+len(fl.options))/4) << 4
	tcp[13] = fl.flags
	binary.BigEndian.PutUint16(tcp[14:], fl.window)
	tcp = append(append(tcp, fl.options...), fl.payload...)
	b = append(b, tcp...)
	var f l4Frame
	f.l3, f.l4, f.v6 = l3, l4, fl.v6
	src, dst := f.addrs(b)
	binary.BigEndian.PutUint16(b[l4+16:], ^fold(sum(pseudoSum(src, dst, 6, tcpLen), b[l4:])))
	return b
}

func payload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	return p
}

// checkFrame verifies the IP and TCP checksums and lengths of one frame
// and returns its sequence number, flags and payload.
func checkFrame(t *testing.T, frame []byte) (uint32, uint8, []byte) {
	t.Helper()
	var f l4Frame
	if !parseTCP(frame, &f) {
		t.Fatalf("not a valid TCP frame: % x", frame[:min(len(frame), 64)])
	}
	if !f.v6 && fold(sum(0, frame[f.l3:f.l4])) != 0xffff {
		t.Fatal("bad IPv4 header checksum")
	}
	src, dst := f.addrs(frame)
	if fold(sum(pseudoSum(src, dst, 6, f.ipEnd-f.l4), frame[f.l4:f.ipEnd])) != 0xffff {
		t.Fatal("bad TCP checksum")
	}
	return binary.BigEndian.Uint32(frame[f.l4+4:]), frame[f.l4+13], frame[f.end:f.ipEnd]
}

// superFrame builds what a TAP device hands over for a TSO send: a
// virtio_net_hdr and one large segment with a partial checksum.
func superFrame(fl flow, mss int) []byte {
	frame := build(fl)
	var f l4Frame
	parseTCP(frame, &f)
	src, dst := f.addrs(frame)
	binary.BigEndian.PutUint16(frame[f.l4+16:], fold(pseudoSum(src, dst, 6, f.ipEnd-f.l4)))
	gso := uint8(GSOTCPv4)
	if fl.v6 {
		gso = GSOTCPv6
	}
	h := make([]byte, HdrLen)
	Hdr{Flags: FlagNeedsCsum, GSOType: gso, HdrLen: uint16(f.end), GSOSize: uint16(mss), CsumStart: uint16(f.l4), CsumOffset: 16}.Put(h)
	return append(h, frame...)
}

func outBufs(n, size int) ([][]byte, []int) {
	outs := make([][]byte, n)
	for i := range outs {
		outs[i] = make([]byte, size)
	}
	return outs, make([]int, n)
}

func TestSplitTCP(t *testing.T) {
	ts := []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	for _, c := range []struct {
		name string
		fl   flow
		mss  int
	}{
		{"IPv4", flow{seq: 1000, flags: tcpFlagACK | tcpFlagPSH | tcpFlagFIN | tcpFlagCWR, payload: payload(10000)}, 1448},
		{"IPv6 with timestamps", flow{v6: true, seq: 0xfffff000, flags: tcpFlagACK | tcpFlagPSH, payload: payload(7000), options: ts}, 1388},
		{"VLAN, exact multiple", flow{vlan: true, seq: 5, flags: tcpFlagACK, payload: payload(2896)}, 1448},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkt := superFrame(c.fl, c.mss)
			outs, sizes := outBufs(64, 2000)
			n, err := Split(pkt, outs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			if want := (len(c.fl.payload) + c.mss - 1) / c.mss; n != want {
				t.Fatalf("%d segments, want %d", n, want)
			}
			var got []byte
			for i := 0; i < n; i++ {
				seq, flags, p := checkFrame(t, outs[i][:sizes[i]])
				if seq != c.fl.seq+uint32(i*c.mss) {
					t.Errorf("segment %d: seq %d", i, seq)
				}
				want := c.fl.flags
				if i < n-1 {
					want &^= tcpFlagFIN | tcpFlagPSH
				}
				if i > 0 {
					want &^= tcpFlagCWR
				}
				if flags != want {
					t.Errorf("segment %d: flags %#x, want %#x", i, flags, want)
				}
				if i < n-1 && len(p) != c.mss {
					t.Errorf("segment %d: %d bytes", i, len(p))
				}
				got = append(got, p...)
			}
			if !bytes.Equal(got, c.fl.payload) {
				t.Fatal("payload differs after splitting")
			}
		})
	}
}

func TestSplitCompletesPartialChecksum(t *testing.T) {
	fl := flow{seq: 9, flags: tcpFlagACK, payload: payload(300)}
	pkt := superFrame(fl, 1448)
	pkt[1] = GSONone
	outs, sizes := outBufs(1, 2000)
	n, err := Split(pkt, outs, sizes)
	if err != nil || n != 1 {
		t.Fatalf("Split = %d, %v", n, err)
	}
	if !bytes.Equal(outs[0][:sizes[0]], build(fl)) {
		t.Fatal("frame with completed checksum differs from the hand-built one")
	}
}

func TestSplitErrors(t *testing.T) {
	outs, sizes := outBufs(2, 2000)
	if _, err := Split([]byte{1, 2}, outs, sizes); err != ErrShort {
		t.Errorf("short: %v", err)
	}
	pkt := superFrame(flow{flags: tcpFlagACK, payload: payload(5000)}, 1000)
	if _, err := Split(pkt, outs, sizes); err != ErrNoRoom {
		t.Errorf("five segments into two buffers: %v", err)
	}
	pkt[1] = GSOUDP
	if _, err := Split(pkt, outs, sizes); err != ErrUnsupported {
		t.Errorf("UDP GSO: %v", err)
	}
	pkt = superFrame(flow{flags: tcpFlagACK, payload: payload(10)}, 1000)
	pkt[1], pkt[6] = GSONone, 0xff
	if _, err := Split(pkt, outs, sizes); err != ErrBadOffsets {
		t.Errorf("checksum start past the frame: %v", err)
	}
}

// segmentsOf splits a super-frame of fl and returns the frames.
func segmentsOf(t *testing.T, fl flow, mss int) [][]byte {
	t.Helper()
	return frames(t, superFrame(fl, mss))
}

// resolve turns what Flush returned into the frame the kernel would see:
// a lone frame as is, a super-frame with its checksum completed.
func resolve(t *testing.T, out []byte) (Hdr, []byte) {
	t.Helper()
	h, err := ParseHdr(out)
	if err != nil {
		t.Fatal(err)
	}
	frame := append([]byte(nil), out[HdrLen:]...)
	if h.Flags&FlagNeedsCsum != 0 {
		if err := completeChecksum(frame, int(h.CsumStart), int(h.CsumOffset)); err != nil {
			t.Fatal(err)
		}
	}
	return h, frame
}

func TestCoalesceRoundTrip(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		fl := flow{v6: v6, seq: 42, flags: tcpFlagACK | tcpFlagPSH, payload: payload(20000), window: 500}
		c := NewCoalescer(make([]byte, HdrLen+65535+18))
		for i, fr := range segmentsOf(t, fl, 1448) {
			if !c.Add(fr) {
				t.Fatalf("segment %d not taken", i)
			}
		}
		h, frame := resolve(t, c.Flush())
		if h.GSOSize != 1448 || (h.GSOType != GSOTCPv4 && !v6) || (h.GSOType != GSOTCPv6 && v6) {
			t.Fatalf("header %+v", h)
		}
		if !bytes.Equal(frame, build(fl)) {
			t.Fatalf("v6=%v: coalesced frame differs from the original super-frame", v6)
		}
		if c.Pending() {
			t.Fatal("pending after Flush")
		}
	}
}

func TestCoalesceRefuses(t *testing.T) {
	base := flow{seq: 100, flags: tcpFlagACK, payload: payload(1000)}
	next := func(mod func(*flow)) []byte {
		fl := base
		fl.seq += 1000
		mod(&fl)
		return build(fl)
	}
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"gap in sequence", next(func(f *flow) { f.seq += 1 })},
		{"retransmission", next(func(f *flow) { f.seq -= 1000 })},
		{"SYN", next(func(f *flow) { f.flags |= tcpFlagSYN })},
		{"FIN", next(func(f *flow) { f.flags |= tcpFlagFIN })},
		{"larger than the first", next(func(f *flow) { f.payload = payload(1200) })},
		{"other options", next(func(f *flow) { f.options = []byte{1, 1, 1, 1} })},
		{"other family", next(func(f *flow) { f.v6 = true })},
		{"not TCP", arp},
		{"UDP", buildUDP(dgram{payload: payload(1000)})},
	} {
		co := NewCoalescer(make([]byte, HdrLen+65535+18))
		co.EnableUDP()
		checkRefused(t, co, build(base), c.frame, c.name)
	}
}

// checkRefused adds first to an empty Coalescer, checks that other does
// not join it and that first then goes out alone and unchanged.
func checkRefused(t *testing.T, co *Coalescer, first, other []byte, name string) {
	t.Helper()
	if !co.Add(first) {
		t.Fatalf("%s: first frame not taken", name)
	}
	if co.Add(other) {
		t.Errorf("%s: joined", name)
	}
	h, frame := resolve(t, co.Flush())
	if h.GSOType != GSONone || !bytes.Equal(frame, first) {
		t.Errorf("%s: a lone frame did not go out unchanged", name)
	}
}

func TestCoalesceClosesAfterShortOrPSH(t *testing.T) {
	c := NewCoalescer(make([]byte, HdrLen+65535+18))
	c.Add(build(flow{seq: 0, flags: tcpFlagACK, payload: payload(1000)}))
	if !c.Add(build(flow{seq: 1000, flags: tcpFlagACK, payload: payload(500)})) {
		t.Fatal("short last segment refused")
	}
	if c.Add(build(flow{seq: 1500, flags: tcpFlagACK, payload: payload(500)})) {
		t.Fatal("joined after a short segment")
	}
}

// FuzzSplitCoalesce splits a TCP or UDP super-frame of n payload bytes
// cut at mss, coalesces the pieces again and checks that the result is
// the super-frame it started from (and, for UDP, that splitting that
// gives the same pieces).
func FuzzSplitCoalesce(f *testing.F) {
	f.Add(uint16(5000), uint16(1448), false, uint8(tcpFlagACK), false)
	f.Add(uint16(1), uint16(1), true, uint8(tcpFlagACK|tcpFlagPSH), false)
	f.Add(uint16(5000), uint16(1400), false, uint8(0), true)
	f.Add(uint16(6400), uint16(100), true, uint8(0), true)
	f.Fuzz(func(t *testing.T, n, mss uint16, v6 bool, flags uint8, udp bool) {
		if n == 0 || mss < 8 || int(n)/int(mss) >= 64 || int(n)+100 > 65000 {
			return
		}
		if udp {
			roundTripUDP(t, dgram{v6: v6, id: n * 7919, tos: flags, payload: payload(int(n))}, int(mss))
			return
		}
		fl := flow{v6: v6, seq: uint32(n) * 7919, flags: flags&^(tcpFlagSYN|tcpFlagRST|tcpFlagURG|tcpFlagECE|tcpFlagFIN|tcpFlagCWR) | tcpFlagACK, payload: payload(int(n))}
		c := NewCoalescer(make([]byte, HdrLen+65535+18))
		c.EnableUDP() // must not change what happens to TCP
		for i, fr := range segmentsOf(t, fl, int(mss)) {
			checkFrame(t, fr)
			if !c.Add(fr) {
				t.Fatalf("segment %d not taken", i)
			}
		}
		if _, frame := resolve(t, c.Flush()); !bytes.Equal(frame, build(fl)) {
			t.Fatal("round trip differs")
		}
	})
}

// roundTripUDP splits a UDP super-frame of d cut at size, coalesces the
// datagrams and checks both directions.
func roundTripUDP(t *testing.T, d dgram, size int) {
	t.Helper()
	pieces := frames(t, udpSuperFrame(d, size))
	c := NewCoalescer(make([]byte, HdrLen+65535+18))
	c.EnableUDP()
	for i, fr := range pieces {
		checkDatagram(t, fr)
		if !c.Add(fr) {
			t.Fatalf("datagram %d not taken", i)
		}
	}
	out := c.Flush()
	if _, frame := resolve(t, out); !bytes.Equal(frame, buildUDP(d)) {
		t.Fatal("round trip differs")
	}
	sameFrames(t, frames(t, out), pieces, "split again")
}

// sameFrames fails the test unless got holds the frames of want, in
// order, byte for byte; what says where got comes from.
func sameFrames(t *testing.T, got, want [][]byte, what string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d frames, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: frame %d differs", what, i)
		}
	}
}

func FuzzParseAndSplit(f *testing.F) {
	f.Add(superFrame(flow{flags: tcpFlagACK, payload: payload(3000)}, 1000))
	f.Add(superFrame(flow{v6: true, vlan: true, flags: tcpFlagACK, payload: payload(100)}, 60))
	f.Add(udpSuperFrame(dgram{id: 3, payload: payload(3000)}, 1000))
	f.Add(udpSuperFrame(dgram{v6: true, vlan: true, payload: payload(100)}, 60))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		outs, sizes := outBufs(64, 2100)
		Split(append([]byte(nil), pkt...), outs, sizes)
		c := NewCoalescer(make([]byte, 3000))
		c.EnableUDP()
		if len(pkt) > HdrLen && c.Add(pkt[HdrLen:]) {
			c.Flush()
		}
	})
}

func BenchmarkSplit(b *testing.B) {
	benchSplit(b, superFrame(flow{seq: 1, flags: tcpFlagACK, payload: payload(64000)}, 1448))
}

// benchSplit measures Split on a copy of the super-frame pkt.
func benchSplit(b *testing.B, pkt []byte) {
	work := make([]byte, len(pkt))
	outs, sizes := outBufs(64, 2000)
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		copy(work, pkt)
		if _, err := Split(work, outs, sizes); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCoalesce(b *testing.B) {
	fl := flow{seq: 1, flags: tcpFlagACK, payload: payload(64000)}
	outs, sizes := outBufs(64, 2000)
	n, _ := Split(superFrame(fl, 1448), outs, sizes)
	c := NewCoalescer(make([]byte, HdrLen+65535+18))
	b.ReportAllocs()
	b.SetBytes(int64(len(fl.payload)))
	for b.Loop() {
		for i := 0; i < n; i++ {
			c.Add(outs[i][:sizes[i]])
		}
		c.Flush()
	}
}
