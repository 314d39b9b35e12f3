package session

import (
	"sync"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Data-path calls run concurrently with each other and with handshakes and
// Tick (run with -race). Every packet sealed is opened exactly once.
func TestConcurrentUse(t *testing.T) {
	n := mesh(t, 2)
	connectAll(t, t0, n)
	pkts := make(chan []byte, 1024)
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				b, m, err := trySeal(n[0], []wire.SiteID{2}, testFrame(100))
				if err != nil {
					t.Error(err)
					return
				}
				pkts <- b[:m]
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			now := t0.Add(time.Duration(i) * time.Second)
			n[0].Tick(now)
			n[1].Tick(now)
		}
	}()
	go func() { wg.Wait(); close(pkts) }()
	opened := 0
	for p := range pkts {
		if _, _, err := receive(n[1], p); err != nil {
			t.Fatalf("packet %d: %v", opened, err)
		}
		opened++
	}
	if opened != 600 {
		t.Fatalf("opened %d of 600", opened)
	}
}
