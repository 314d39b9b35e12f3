package wire

import "testing"

// TestLayout builds data packets field by field, as the data path and the
// session layer write them, and checks the layout functions against them.
func TestLayout(t *testing.T) {
	for n := 1; n <= MaxPath; n++ {
		for _, sealed := range []bool{false, true} {
			h := DataHeader{Source: 1, Network: 7, Seq: 9, PathLen: uint8(n)}
			if sealed {
				h.Flags = DataFlagSealed
			}
			for i := range n {
				h.Path[i] = SiteID(i + 2)
			}
			frame := 100
			b := make([]byte, 400)
			off := h.Put(b)
			if sealed {
				PutSealedDataE2E(b, off, 5, 6)
				off += SealedDataE2ELen
				if n > 1 {
					PutSealedDataHop(b, off, 7, 8)
					off += SealedDataHopLen
				}
			}
			if off != FrameOffset(n, sealed) {
				t.Errorf("path %d, sealed %v: frame at %d, FrameOffset %d", n, sealed, off, FrameOffset(n, sealed))
			}
			end := off + frame
			if sealed {
				end += TagLen
				var hh DataHeader
				hl, err := ParseData(b[:end], &hh)
				var s SealedData
				if err != nil || ParseSealedData(b[:end], &hh, hl, &s) != nil || s.BodyOff != off {
					t.Errorf("path %d: the parsers disagree: %v, body at %d", n, err, s.BodyOff)
				}
			}
			if end-frame != DataOverhead(n, sealed) {
				t.Errorf("path %d, sealed %v: overhead %d, DataOverhead %d", n, sealed, end-frame, DataOverhead(n, sealed))
			}
		}
	}
	if Headroom != FrameOffset(MaxPath, true) || Headroom != 92 || Tailroom != 16 {
		t.Errorf("Headroom %d, Tailroom %d", Headroom, Tailroom)
	}
}

func TestInnerMTU(t *testing.T) {
	cases := []struct {
		mtu, path    int
		sealed, ipv6 bool
		want         int
	}{
		// 1500 - 20 - 8 - (20 + 12) - 12 - 28 - 16 - 14
		{1500, 3, true, false, 1370},
		// 1500 - 20 - 8 - (20 + 4) - 12 - 16 - 14: no hop fields
		{1500, 1, true, false, 1406},
		// 1500 - 40 - 8 - (20 + 12) - 12 - 28 - 16 - 14
		{1500, 3, true, true, 1350},
		// 1400 - 20 - 8 - (20 + 12) - 14
		{1400, 3, false, false, 1326},
	}
	for _, c := range cases {
		if got := InnerMTU(c.mtu, c.path, c.sealed, c.ipv6); got != c.want {
			t.Errorf("InnerMTU(%d, %d, %v, %v) = %d, want %d", c.mtu, c.path, c.sealed, c.ipv6, got, c.want)
		}
	}
}
