package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// benchSizes are the frame sizes of the seal/open benchmarks.
var benchSizes = []int{64, 1400}

func BenchmarkSealData(b *testing.B) {
	for _, size := range benchSizes {
		for _, path := range [][]wire.SiteID{{2}, {2, 3}} {
			b.Run(fmt.Sprintf("%dB/path%d", size, len(path)), func(b *testing.B) {
				n := mesh(b, 3)
				connectAll(b, t0, n)
				off := wire.FrameOffset(len(path), true)
				buf := make([]byte, off+size+wire.TagLen)
				var h wire.DataHeader
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					h = wire.DataHeader{Source: 1, PathLen: uint8(len(path))}
					copy(h.Path[:], path)
					if _, err := n[0].SealData(buf, &h, size); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// sealedBatch returns count sealed packets of a frame of size bytes.
func sealedBatch(b *testing.B, src *Node, path []wire.SiteID, size, count int) [][]byte {
	pkts := make([][]byte, count)
	for i := range pkts {
		pkts[i] = dataPacket(b, src, path, testFrame(size))
	}
	return pkts
}

func BenchmarkOpenData(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			n := mesh(b, 2)
			connectAll(b, t0, n)
			const batch = 256
			pkts := sealedBatch(b, n[0], []wire.SiteID{2}, size, batch)
			work := make([]byte, len(pkts[0]))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i == batch { // counters are single-use: reseal a batch
					b.StopTimer()
					pkts = sealedBatch(b, n[0], []wire.SiteID{2}, size, batch)
					i = 0
					b.StartTimer()
				}
				copy(work, pkts[i])
				i++
				var h wire.DataHeader
				off, _ := wire.ParseData(work, &h)
				if _, err := n[1].OpenData(work, &h, off); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRelay measures a relay's hop-tag check and re-tag (two relays
// on the path, so the first re-tags for the second).
func BenchmarkRelay(b *testing.B) {
	n := mesh(b, 4)
	connectAll(b, t0, n)
	path := []wire.SiteID{2, 3, 4}
	const batch = 256
	pkts := sealedBatch(b, n[0], path, 1400, batch)
	work := make([]byte, len(pkts[0]))
	b.SetBytes(1400)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == batch {
			b.StopTimer()
			pkts = sealedBatch(b, n[0], path, 1400, batch)
			i = 0
			b.StartTimer()
		}
		copy(work, pkts[i])
		i++
		var h wire.DataHeader
		off, _ := wire.ParseData(work, &h)
		if _, err := n[1].Relay(work, &h, off); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHandshake(b *testing.B) {
	n := mesh(b, 2)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		n[0].peer(2).mu.Lock()
		init, _ := n[0].initiate(now, n[0].peer(2), true)
		n[0].peer(2).mu.Unlock()
		res, err := n[1].HandleHandshake(now, init)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := n[0].HandleHandshake(now, res.Reply); err != nil {
			b.Fatal(err)
		}
	}
}
