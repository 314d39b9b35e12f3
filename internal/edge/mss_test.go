package edge

import (
	"encoding/binary"
	"testing"
)

// tcpChecksum computes the TCP checksum of seg over the IPv4 pseudo
// header, for checking incremental updates against a full computation.
func tcpChecksum(src, dst [4]byte, seg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src[:])
	add(dst[:])
	sum += protoTCP + uint32(len(seg))
	c := append([]byte(nil), seg...)
	c[16], c[17] = 0, 0
	add(c)
	for sum > 0xffff {
		sum = (sum & 0xffff) + (sum >> 16)
	}
	return ^uint16(sum)
}

// synFrame builds an Ethernet/IPv4/TCP SYN with the given options.
func synFrame(flags byte, opts []byte) []byte {
	src, dst := [4]byte{198, 19, 1, 1}, [4]byte{198, 19, 3, 1}
	tcp := make([]byte, 20+len(opts))
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5201)
	tcp[12] = byte((20+len(opts))/4) << 4
	tcp[13] = flags
	copy(tcp[20:], opts)
	binary.BigEndian.PutUint16(tcp[16:], tcpChecksum(src, dst, tcp))
	ip := make([]byte, 20)
	ip[0], ip[9] = 0x45, protoTCP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(tcp)))
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	eth := make([]byte, 14)
	binary.BigEndian.PutUint16(eth[12:], etherTypeIPv4)
	return append(append(eth, ip...), tcp...)
}

func mssOf(f []byte) uint16 {
	opts := f[34+20:]
	for i := 0; i < len(opts); {
		if opts[i] == tcpOptNOP {
			i++
			continue
		}
		if i+1 >= len(opts) || opts[i+1] < 2 || i+int(opts[i+1]) > len(opts) {
			return 0
		}
		if opts[i] == tcpOptMSS {
			return binary.BigEndian.Uint16(opts[i+2:])
		}
		i += int(opts[i+1])
	}
	return 0
}

func checksumOK(f []byte) bool {
	seg := f[34:]
	return binary.BigEndian.Uint16(seg[16:]) == tcpChecksum([4]byte{198, 19, 1, 1}, [4]byte{198, 19, 3, 1}, seg)
}

func TestClampMSS(t *testing.T) {
	cases := []struct {
		name    string
		flags   byte
		opts    []byte
		clamped bool
		want    uint16
	}{
		{"SYN with MSS 1460", tcpFlagSYN, []byte{2, 4, 0x05, 0xb4, 1, 1, 4, 2}, true, 1234},
		{"SYN with MSS at an odd offset", tcpFlagSYN, []byte{1, 2, 4, 0x05, 0xb4, 1, 1, 0}, true, 1234},
		{"SYN-ACK", tcpFlagSYN | 0x10, []byte{2, 4, 0x05, 0xb4}, true, 1234},
		{"SYN with a small MSS", tcpFlagSYN, []byte{2, 4, 0x04, 0x00}, false, 1024},
		{"ACK is left alone", 0x10, []byte{2, 4, 0x05, 0xb4}, false, 1460},
		{"SYN without MSS", tcpFlagSYN, []byte{1, 1, 4, 2}, false, 0},
		{"truncated option", tcpFlagSYN, []byte{1, 1, 1, 2}, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := synFrame(c.flags, c.opts)
			if got := ClampMSS(f, 1234, 1214); got != c.clamped {
				t.Fatalf("ClampMSS = %v, want %v", got, c.clamped)
			}
			if got := mssOf(f); got != c.want {
				t.Errorf("MSS = %d, want %d", got, c.want)
			}
			if !checksumOK(f) {
				t.Error("TCP checksum is wrong after clamping")
			}
		})
	}
}

func TestClampMSSIgnoresOtherFrames(t *testing.T) {
	arp := make([]byte, 42)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	if ClampMSS(arp, 1000, 1000) || ClampMSS(arp[:10], 1000, 1000) {
		t.Error("clamped a frame that is not TCP")
	}
}

func FuzzClampMSS(f *testing.F) {
	f.Add(synFrame(tcpFlagSYN, []byte{2, 4, 0x05, 0xb4, 1, 1, 4, 2}))
	f.Add(synFrame(tcpFlagSYN, []byte{1, 2, 4, 0x05, 0xb4, 1, 1, 0}))
	f.Fuzz(func(t *testing.T, frame []byte) {
		before := append([]byte(nil), frame...)
		changed := ClampMSS(frame, 1200, 1180)
		if !changed && string(before) != string(frame) {
			t.Fatal("frame changed but ClampMSS reported no change")
		}
		if len(before) != len(frame) {
			t.Fatal("length changed")
		}
	})
}

func BenchmarkClampMSS(b *testing.B) {
	f := synFrame(0x10, []byte{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0})
	b.ReportAllocs()
	for b.Loop() {
		ClampMSS(f, 1234, 1214)
	}
}
