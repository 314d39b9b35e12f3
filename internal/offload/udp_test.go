package offload

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// dgram describes a hand-built UDP datagram.
type dgram struct {
	v6      bool
	vlan    bool
	id      uint16 // IPv4 identification
	sport   uint16 // 40000 when 0
	tos     uint8
	ttl     uint8  // 64 when 0
	noDF    bool   // IPv4 without the DF flag
	frag    uint16 // IPv4 MF flag (0x2000) and fragment offset
	options []byte // IPv4 options, a multiple of 4 bytes
	payload []byte
}

// buildUDP returns an Ethernet frame for d with correct lengths and
// checksums, every field written by hand.
func buildUDP(d dgram) []byte {
	var b []byte
	b = append(b, 0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1) // dst, src MAC
	if d.vlan {
		b = append(b, 0x81, 0x00, 0x00, 0x07)
	}
	ttl := d.ttl
	if ttl == 0 {
		ttl = 64
	}
	n := 8 + len(d.payload)
	var f l4Frame
	f.l3, f.v6 = len(b)+2, d.v6
	if d.v6 {
		b = append(b, 0x86, 0xdd)
		ip := make([]byte, 40)
		ip[0], ip[1] = 0x60|d.tos>>4, d.tos<<4
		binary.BigEndian.PutUint16(ip[4:], uint16(n))
		ip[6], ip[7] = protoUDP, ttl
		copy(ip[8:], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})
		copy(ip[24:], []byte{0x20, 0x01, 0x0d, 0xb8, 15: 2})
		b = append(b, ip...)
	} else {
		b = append(b, 0x08, 0x00)
		ip := []byte{0x45 + byte(len(d.options)/4), d.tos, 0, 0, 0, 0, 0, 0, ttl, protoUDP, 0, 0, 198, 18, 0, 2, 198, 18, 0, 1}
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(d.options)+n))
		binary.BigEndian.PutUint16(ip[4:], d.id)
		fl := d.frag
		if !d.noDF {
			fl |= 0x4000
		}
		binary.BigEndian.PutUint16(ip[6:], fl)
		ip = append(ip, d.options...)
		ipv4HeaderChecksum(ip)
		b = append(b, ip...)
	}
	f.l4 = len(b)
	sport := d.sport
	if sport == 0 {
		sport = 40000
	}
	udp := make([]byte, 8, n)
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], 4789)
	binary.BigEndian.PutUint16(udp[4:], uint16(n))
	b = append(b, append(udp, d.payload...)...)
	src, dst := f.addrs(b)
	c := ^fold(sum(pseudoSum(src, dst, protoUDP, n), b[f.l4:]))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[f.l4+6:], c)
	return b
}

// datagrams returns the frames of count datagrams of size payload bytes
// (the last of last bytes when last > 0), with consecutive IPv4 IDs from
// d.id, cutting d.payload in order.
func datagrams(d dgram, count, size, last int) [][]byte {
	var fr [][]byte
	p := payload(count * size)
	for i := 0; i < count; i++ {
		di := d
		di.id = d.id + uint16(i)
		di.payload = p[i*size : (i+1)*size]
		if i == count-1 && last > 0 {
			di.payload = di.payload[:last]
		}
		fr = append(fr, buildUDP(di))
	}
	return fr
}

// udpSuperFrame builds what a TAP device with USO hands over for a
// UDP_SEGMENT send: a virtio_net_hdr and one large datagram whose UDP
// checksum field holds the pseudo-header sum.
func udpSuperFrame(d dgram, size int) []byte {
	frame := buildUDP(d)
	var f l4Frame
	parseUDP(frame, &f)
	src, dst := f.addrs(frame)
	binary.BigEndian.PutUint16(frame[f.l4+6:], fold(pseudoSum(src, dst, protoUDP, f.ipEnd-f.l4)))
	h := make([]byte, HdrLen)
	Hdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: uint16(f.end), GSOSize: uint16(size), CsumStart: uint16(f.l4), CsumOffset: 6}.Put(h)
	return append(h, frame...)
}

// checkDatagram verifies the IP and UDP checksums and lengths of one
// frame and returns its IPv4 ID and payload.
func checkDatagram(t testing.TB, frame []byte) (uint16, []byte) {
	t.Helper()
	var f l4Frame
	if !parseUDP(frame, &f) {
		t.Fatalf("not a valid UDP frame: % x", frame[:min(len(frame), 64)])
	}
	if !f.v6 && fold(sum(0, frame[f.l3:f.l4])) != 0xffff {
		t.Fatal("bad IPv4 header checksum")
	}
	if int(binary.BigEndian.Uint16(frame[f.l4+4:])) != f.ipEnd-f.l4 {
		t.Fatal("UDP length differs from the IP length")
	}
	src, dst := f.addrs(frame)
	if binary.BigEndian.Uint16(frame[f.l4+6:]) == 0 || fold(sum(pseudoSum(src, dst, protoUDP, f.ipEnd-f.l4), frame[f.l4:f.ipEnd])) != 0xffff {
		t.Fatal("bad UDP checksum")
	}
	var id uint16
	if !f.v6 {
		id = f.ipv4ID(frame)
	}
	return id, frame[f.end:f.ipEnd]
}

func TestSplitUDP(t *testing.T) {
	for _, c := range []struct {
		name string
		d    dgram
		size int
	}{
		{"IPv4", dgram{id: 0xfffd, tos: 0xb8, payload: payload(10000)}, 1400},
		{"IPv6", dgram{v6: true, tos: 0x2e, payload: payload(7000)}, 1232},
		{"VLAN, exact multiple", dgram{vlan: true, id: 7, payload: payload(2800)}, 1400},
		{"one datagram", dgram{id: 9, payload: payload(300)}, 1400},
		{"64 datagrams", dgram{v6: true, payload: payload(64 * 100)}, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			outs, sizes := outBufs(64, 2000)
			n, err := Split(udpSuperFrame(c.d, c.size), outs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			if want := max(1, (len(c.d.payload)+c.size-1)/c.size); n != want {
				t.Fatalf("%d datagrams, want %d", n, want)
			}
			var got []byte
			for i := 0; i < n; i++ {
				id, p := checkDatagram(t, outs[i][:sizes[i]])
				if !c.d.v6 && id != c.d.id+uint16(i) {
					t.Errorf("datagram %d: ID %#x", i, id)
				}
				if i < n-1 && len(p) != c.size {
					t.Errorf("datagram %d: %d bytes", i, len(p))
				}
				got = append(got, p...)
			}
			if !bytes.Equal(got, c.d.payload) {
				t.Fatal("payload differs after splitting")
			}
		})
	}
}

// zeroChecksumPayload returns a payload of n bytes for which the UDP
// checksum of d computes to 0 (so must be sent as 0xffff).
func zeroChecksumPayload(d dgram, n int) []byte {
	d.payload = payload(n)
	d.payload[0], d.payload[1] = 0, 0
	frame := buildUDP(d)
	var f l4Frame
	parseUDP(frame, &f)
	frame[f.l4+6], frame[f.l4+7] = 0, 0
	src, dst := f.addrs(frame)
	c := ^fold(sum(pseudoSum(src, dst, protoUDP, f.ipEnd-f.l4), frame[f.l4:f.ipEnd]))
	binary.BigEndian.PutUint16(d.payload, c) // now the sum folds to 0xffff
	return d.payload
}

func TestUDPChecksumNeverZero(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		d := dgram{v6: v6, id: 1}
		d.payload = zeroChecksumPayload(d, 200)
		want := buildUDP(d)
		if csum := want[len(want)-200-2:]; csum[0] != 0xff || csum[1] != 0xff {
			t.Fatalf("v6=%v: hand-built checksum % x, want ff ff", v6, csum[:2])
		}
		outs, sizes := outBufs(1, 2000)
		pkt := udpSuperFrame(d, 1400)
		if n, err := Split(pkt, outs, sizes); err != nil || n != 1 || !bytes.Equal(outs[0][:sizes[0]], want) {
			t.Errorf("v6=%v: UDP_L4 split gives %d, %v, frame equal %v", v6, n, err, bytes.Equal(outs[0][:sizes[0]], want))
		}
		pkt = udpSuperFrame(d, 1400)
		pkt[1] = GSONone
		if n, err := Split(pkt, outs, sizes); err != nil || n != 1 || !bytes.Equal(outs[0][:sizes[0]], want) {
			t.Errorf("v6=%v: completed checksum: %d, %v, frame equal %v", v6, n, err, bytes.Equal(outs[0][:sizes[0]], want))
		}
	}
}

func TestSplitUDPErrors(t *testing.T) {
	outs, sizes := outBufs(2, 2000)
	pkt := udpSuperFrame(dgram{payload: payload(5000)}, 1000)
	if _, err := Split(pkt, outs, sizes); err != ErrNoRoom {
		t.Errorf("five datagrams into two buffers: %v", err)
	}
	pkt = superFrame(flow{flags: tcpFlagACK, payload: payload(3000)}, 1000)
	pkt[1] = GSOUDPL4
	if _, err := Split(pkt, outs, sizes); err != ErrUnsupported {
		t.Errorf("UDP_L4 on a TCP frame: %v", err)
	}
	pkt = udpSuperFrame(dgram{payload: payload(1500)}, 1000)
	pkt[1] = GSOTCPv4
	if _, err := Split(pkt, outs, sizes); err != ErrUnsupported {
		t.Errorf("TCPv4 on a UDP frame: %v", err)
	}
	pkt = udpSuperFrame(dgram{payload: payload(1500)}, 0)
	if _, err := Split(pkt, outs, sizes); err != ErrUnsupported {
		t.Errorf("GSO size 0: %v", err)
	}
}

// newUDPCoalescer returns a Coalescer with UDP enabled.
func newUDPCoalescer() *Coalescer {
	c := NewCoalescer(make([]byte, HdrLen+65535+18))
	c.EnableUDP()
	return c
}

// frames splits what Flush returned and returns copies of the frames.
func frames(t testing.TB, out []byte) [][]byte {
	t.Helper()
	outs, sizes := outBufs(64, 2000)
	n, err := Split(append([]byte(nil), out...), outs, sizes)
	if err != nil {
		t.Fatal(err)
	}
	var fr [][]byte
	for i := 0; i < n; i++ {
		fr = append(fr, outs[i][:sizes[i]])
	}
	return fr
}

func TestCoalesceUDPRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name              string
		d                 dgram
		count, size, last int
	}{
		{"IPv4", dgram{id: 100, tos: 0xb8, payload: nil}, 10, 1200, 0},
		{"IPv4, short last, IDs wrap", dgram{id: 0xfffa, vlan: true}, 12, 1400, 77},
		{"IPv6", dgram{v6: true, tos: 0x2e}, 20, 1232, 0},
		{"IPv6, short last", dgram{v6: true, vlan: true}, 5, 1000, 1},
		{"64 datagrams", dgram{id: 5}, 64, 1000, 0},
		{"two", dgram{v6: true}, 2, 8, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := datagrams(c.d, c.count, c.size, c.last)
			co := newUDPCoalescer()
			for i, fr := range in {
				if !co.Add(fr) {
					t.Fatalf("datagram %d not taken", i)
				}
			}
			out := co.Flush()
			if co.Pending() {
				t.Fatal("pending after Flush")
			}
			h, _ := ParseHdr(out)
			var f l4Frame
			parseUDP(in[0], &f)
			want := Hdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: uint16(f.end), GSOSize: uint16(c.size),
				CsumStart: uint16(f.l4), CsumOffset: 6}
			if h != want {
				t.Fatalf("header %+v, want %+v", h, want)
			}
			sameFrames(t, frames(t, out), in, "after the round trip")
			// Completed, the super-frame is one large valid datagram.
			_, whole := resolve(t, out)
			checkDatagram(t, whole)
		})
	}
}

func TestCoalesceUDPLone(t *testing.T) {
	co := newUDPCoalescer()
	fr := buildUDP(dgram{id: 3, payload: payload(500)})
	if !co.Add(fr) {
		t.Fatal("not taken")
	}
	if h, frame := resolve(t, co.Flush()); h != (Hdr{}) || !bytes.Equal(frame, fr) {
		t.Fatal("a lone datagram did not go out unchanged with a plain header")
	}
}

func TestCoalesceUDPRefuses(t *testing.T) {
	base := dgram{id: 100, tos: 0x10, payload: payload(1000)}
	next := func(mod func(*dgram)) []byte {
		d := base
		d.id++
		d.payload = payload(1000)[3:]
		d.payload = append(d.payload, 1, 2, 3)
		mod(&d)
		return buildUDP(d)
	}
	tcp := build(flow{seq: 1, flags: tcpFlagACK, payload: payload(1000)})
	badLen := next(func(*dgram) {})
	badLen[14+20+5]-- // UDP length one less than the IP payload
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"other source port", next(func(d *dgram) { d.sport = 40001 })},
		{"larger than the first", next(func(d *dgram) { d.payload = payload(1001) })},
		{"same IPv4 ID", next(func(d *dgram) { d.id-- })},
		{"IPv4 ID skipped", next(func(d *dgram) { d.id++ })},
		{"other TOS", next(func(d *dgram) { d.tos = 0 })},
		{"other TTL", next(func(d *dgram) { d.ttl = 63 })},
		{"without DF", next(func(d *dgram) { d.noDF = true })},
		{"first fragment", next(func(d *dgram) { d.frag = 0x2000 })},
		{"later fragment", next(func(d *dgram) { d.frag = 185 })},
		{"IP options", next(func(d *dgram) { d.options = []byte{1, 1, 1, 0} })},
		{"other family", next(func(d *dgram) { d.v6 = true })},
		{"VLAN", next(func(d *dgram) { d.vlan = true })},
		{"empty", next(func(d *dgram) { d.payload = nil })},
		{"UDP length not the IP length", badLen},
		{"TCP", tcp},
	} {
		checkRefused(t, newUDPCoalescer(), buildUDP(base), c.frame, c.name)
	}
}

func TestCoalesceUDPFirstRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		d    dgram
	}{
		{"fragment", dgram{frag: 0x2000, payload: payload(100)}},
		{"IP options", dgram{options: []byte{1, 1, 1, 0}, payload: payload(100)}},
		{"empty", dgram{}},
	} {
		if newUDPCoalescer().Add(buildUDP(c.d)) {
			t.Errorf("%s: taken", c.name)
		}
	}
	if NewCoalescer(make([]byte, HdrLen+65535+18)).Add(buildUDP(dgram{payload: payload(100)})) {
		t.Error("UDP taken without EnableUDP")
	}
}

func TestCoalesceUDPClosesAfterShort(t *testing.T) {
	in := datagrams(dgram{id: 1}, 3, 1000, 0)
	short := buildUDP(dgram{id: 2, payload: payload(500)})
	co := newUDPCoalescer()
	co.Add(in[0])
	if !co.Add(short) {
		t.Fatal("short last datagram refused")
	}
	if co.Add(buildUDP(dgram{id: 3, payload: payload(500)})) {
		t.Fatal("joined after a short datagram")
	}
	if co.Add(in[2]) {
		t.Fatal("joined after a short datagram")
	}
}

func TestCoalesceUDPLimits(t *testing.T) {
	co := newUDPCoalescer()
	in := datagrams(dgram{v6: true}, 65, 100, 0)
	for i, fr := range in {
		if got := co.Add(fr); got != (i < 64) {
			t.Fatalf("datagram %d: Add = %v", i, got)
		}
	}
	// 1400-byte datagrams: 46 make 46*1400+8+20 = 64428 bytes of IP; a 47th
	// would pass 65535.
	co = newUDPCoalescer()
	for i, fr := range datagrams(dgram{id: 9}, 47, 1400, 0) {
		if got := co.Add(fr); got != (i < 46) {
			t.Fatalf("1400 bytes, datagram %d: Add = %v", i, got)
		}
	}
}

// udpVariant derives datagram i of a fuzzed sequence from one byte: most
// continue the flow, some change a field or the size.
func udpVariant(d dgram, i int, v byte, size int) dgram {
	d.id += uint16(i)
	d.payload = payload(size + i)[i:]
	switch v % 16 {
	case 1:
		d.sport++
	case 2:
		d.id++
	case 3:
		d.payload = d.payload[:int(v)%size]
	case 4:
		d.tos++
	case 5:
		d.frag = 0x2000
	case 6:
		d.payload = append(d.payload, v)
	case 7:
		d.v6 = !d.v6
	case 8:
		d.noDF = true
	}
	return d
}

// FuzzCoalesceUDP feeds the Coalescer a sequence of datagrams of which
// some break the flow, as the data path does (flush and retry on
// refusal), and checks that splitting whatever it writes gives back
// exactly the datagrams it took, in order.
func FuzzCoalesceUDP(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0}, uint16(1200), false)
	f.Add([]byte{0, 1, 0, 2, 0, 3, 0, 0, 4, 5, 6, 7, 8, 0}, uint16(100), true)
	f.Add([]byte{0, 0, 0x33, 0, 0}, uint16(9), false)
	f.Fuzz(func(t *testing.T, seq []byte, size uint16, v6 bool) {
		if size == 0 || size > 1400 || len(seq) > 200 {
			return
		}
		base := dgram{v6: v6, id: uint16(size) * 31, sport: 1000}
		co := newUDPCoalescer()
		var taken, written [][]byte
		write := func() {
			if co.Pending() {
				written = append(written, frames(t, co.Flush())...)
			}
		}
		for i, v := range seq {
			fr := buildUDP(udpVariant(base, i, v, int(size)))
			if !co.Add(fr) {
				write()
				if !co.Add(fr) {
					continue // a frame the caller writes alone
				}
			}
			taken = append(taken, fr)
		}
		write()
		sameFrames(t, written, taken, "written against taken")
	})
}

func BenchmarkSplitUDP(b *testing.B) {
	benchSplit(b, udpSuperFrame(dgram{id: 1, payload: payload(64000)}, 1400))
}

func BenchmarkCoalesceUDP(b *testing.B) {
	in := datagrams(dgram{id: 1}, 46, 1400, 0)
	c := newUDPCoalescer()
	b.ReportAllocs()
	b.SetBytes(46 * 1400)
	for b.Loop() {
		for _, fr := range in {
			if !c.Add(fr) {
				b.Fatal("datagram refused")
			}
		}
		c.Flush()
	}
}
