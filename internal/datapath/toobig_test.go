package datapath

import (
	"encoding/binary"
	"testing"
	"time"
)

// tcpFrame builds an Ethernet/IPv4/TCP frame with DF set and n bytes of
// payload, from host a's MAC to host c's.
func tcpFrame(n int) []byte {
	f := make([]byte, 14+20+20+n)
	copy(f[0:6], []byte{0xc, 0, 0, 0, 0, 0xc})
	copy(f[6:12], []byte{0xa, 0, 0, 0, 0, 0xa})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], uint16(40+n))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	copy(ip[12:16], []byte{198, 19, 1, 1})
	copy(ip[16:20], []byte{198, 19, 3, 1})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	ip[20+12] = 5 << 4
	ip[20+13] = 0x10 // ACK
	return f
}

func TestOversizedTCPSegmentIsAnsweredNotSent(t *testing.T) {
	a, _, c := threeSites(t)
	a.eng.SetInnerMTU(1200)
	c.dev.Inject(frame(0xff, 0xc, "here is c"))
	expect(t, a, frame(0xff, 0xc, "here is c"))

	a.dev.Inject(tcpFrame(1300)) // 1340-byte IP packet: too big
	select {
	case got := <-a.dev.Out():
		if len(got) < 14+20+8 || got[14+9] != 1 || got[14+20] != 3 || got[14+20+1] != 4 {
			t.Fatalf("answer is not an ICMP fragmentation-needed: %x", got[:min(len(got), 60)])
		}
		if mtu := binary.BigEndian.Uint16(got[14+20+6:]); mtu != 1200 {
			t.Errorf("next-hop MTU %d, want 1200", mtu)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no ICMP answer")
	}
	expectNone(t, c)
	if a.eng.Stats().TooBig.Load() != 1 {
		t.Errorf("icmp_too_big = %d", a.eng.Stats().TooBig.Load())
	}

	a.dev.Inject(tcpFrame(1100)) // fits: forwarded
	select {
	case got := <-c.dev.Out():
		if len(got) != 14+40+1100 {
			t.Errorf("delivered %d bytes", len(got))
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a segment that fits was not delivered")
	}
}
