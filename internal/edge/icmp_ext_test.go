package edge

import "testing"

// TestTooBigIgnoresOverrunningExtensionHeader: an IPv6 packet whose
// destination options header names TCP next but claims to run past the
// end of the packet carries no TCP header, and gets no answer. (Before
// package frame parsed the extension headers, only the first two bytes
// of each had to lie inside the packet, and this packet was answered.)
func TestTooBigIgnoresOverrunningExtensionHeader(t *testing.T) {
	destOpts := []byte{protoTCP, 0, 1, 4, 0, 0, 0, 0}
	f := ipv6Frame(v6Packet{total: 1500, ext: destOpts, next: []byte{ipv6DestOpts, protoTCP}})
	out := make([]byte, 1400)
	if n := TooBig(f, 1400, out); n == 0 {
		t.Fatal("the well-formed packet is not answered")
	}
	f[14+40+1] = 0xff // 8 + 255*8 bytes of options
	if n := TooBig(f, 1400, out); n != 0 {
		t.Errorf("answered (%d bytes) a packet whose extension header overruns it", n)
	}
}
