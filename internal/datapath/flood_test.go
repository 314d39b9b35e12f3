package datapath

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

func distinct(i int) []byte { return frame(0xff, 0xa, fmt.Sprintf("storm %d", i)) }

// TestFloodRateLimit: a burst is allowed up to a tenth of a second's worth
// (plus 16); a steady stream above the rate is cut to the rate.
func TestFloodRateLimit(t *testing.T) {
	g := NewFloodGuard(100)
	now := int64(1e9)
	ok := 0
	for i := range 1000 {
		if g.admit(distinct(i), now) == floodOK {
			ok++
		}
	}
	if ok != 26 {
		t.Errorf("a burst of 1000 at once: %d flooded, want 26", ok)
	}
	ok = 0
	for i := range 2000 { // 1000 frames a second for two seconds
		now += 1e6
		if g.admit(distinct(i), now) == floodOK {
			ok++
		}
	}
	if ok < 195 || ok > 205 {
		t.Errorf("1000 frames/s for 2 s at a rate of 100: %d flooded, want about 200", ok)
	}
	g.SetRate(0)
	if g.Rate() != DefaultFloodRate {
		t.Errorf("rate 0 gives %d, want the default", g.Rate())
	}
}

// TestLoopDetector: the same frame coming back every 10 ms is a loop from
// its eighth copy on, reported with its source, until 10 s after the last
// copy; an ARP retried every second, and a burst of five gratuitous ARPs,
// are not.
func TestLoopDetector(t *testing.T) {
	g := NewFloodGuard(1e6)
	now := int64(1e9)
	arp := frame(0xff, 0xb, "who-has 10.0.0.9")
	for range 20 {
		now += 1e9
		if v := g.admit(arp, now); v != floodOK {
			t.Fatalf("an ARP retried every second: %v", v)
		}
	}
	garp := frame(0xff, 0xb, "gratuitous")
	for range 5 {
		if v := g.admit(garp, now); v != floodOK {
			t.Fatalf("five gratuitous ARPs at once: %v", v)
		}
	}
	if active, n, _ := g.LoopReport(now); active || n != 0 {
		t.Fatalf("a loop reported without one: %v %d", active, n)
	}
	looping := frame(0xff, 0xc, "round and round")
	var verdicts []verdict
	for range 12 {
		now += 10e6
		verdicts = append(verdicts, g.admit(looping, now))
		g.admit(distinct(int(now)), now) // other floods go on between
	}
	for i, v := range verdicts {
		if want := i >= loopRepeats-1; (v == floodLoop) != want {
			t.Errorf("copy %d: verdict %v", i+1, v)
		}
	}
	active, n, src := g.LoopReport(now)
	if !active || n != 1 || src != [6]byte{0xc, 0, 0, 0, 0, 0xc} {
		t.Errorf("report: active %v, loops %d, source %x", active, n, src)
	}
	if g.admit(distinct(-1), now) != floodOK {
		t.Error("a frame that does not loop is not flooded during a loop")
	}
	if g.admit(distinct(-1), now+1e6) != floodLoop {
		t.Error("during a loop, a frame back a second time is flooded")
	}
	if active, _, _ := g.LoopReport(now + 1e6 + loopHold + 1); active {
		t.Error("a loop still reported 10 s after its last copy")
	}
}

// TestStormIsLimitedInTheDataPath: 500 distinct broadcast frames injected
// at once into a site whose network allows 100 flooded frames a second
// reach the other site 26 times, the rest are counted as flood_limited,
// and a unicast frame to a known host still goes through.
func TestStormIsLimitedInTheDataPath(t *testing.T) {
	nw := transport.NewFakeNetwork()
	addrs := map[wire.SiteID]netip.AddrPort{1: netip.MustParseAddrPort("198.18.0.1:4800"), 2: netip.MustParseAddrPort("198.18.0.2:4800")}
	var sites [2]*site
	for i, id := range []wire.SiteID{1, 2} {
		s := &site{id: id, dev: device.NewFake("tap", 1400, 1024)}
		conn := nw.Listen(addrs[id])
		s.eng = New(Config{Self: id, Conn: conn, Now: func() int64 { return time.Now().UnixNano() },
			Ports: []*Port{{Network: testNet, Dev: s.dev, FDB: fdb.New(time.Minute), Flood: NewFloodGuard(100)}}})
		other := 3 - id
		s.eng.SetRoutes(staticRoutes(id, addrs, map[wire.SiteID][]wire.SiteID{other: {other}}))
		done := make(chan error, 1)
		go func() { done <- s.eng.Run() }()
		t.Cleanup(func() { conn.Close(); s.dev.Close(); <-done })
		sites[i] = s
	}
	a, b := sites[0], sites[1]
	b.dev.Inject(frame(0xff, 0xb, "b's host announces itself"))
	expect(t, a, frame(0xff, 0xb, "b's host announces itself"))
	for i := range 500 {
		a.dev.Inject(distinct(i))
	}
	got := 0
	for deadline := time.After(time.Second); ; {
		select {
		case <-b.dev.Out():
			got++
			continue
		case <-deadline:
		}
		break
	}
	limited := a.eng.Stats().FloodLimited.Load()
	if got < 26 || got > 40 || int(limited) != 500-got {
		t.Errorf("500 broadcast frames: %d flooded, %d limited; want about 26 and the rest", got, limited)
	}
	uni := frame(0xb, 0xa, "unicast during the storm")
	a.dev.Inject(uni)
	expect(t, b, uni)
}

// TestFloodingDoesNotAllocate: a flooded frame, through the guard, costs
// no allocation once the batch's buffers exist.
func TestFloodingDoesNotAllocate(t *testing.T) {
	e := benchEngine()
	p := e.Port(testNet)
	p.Flood = NewFloodGuard(1e6)
	g := e.newEgress(p)
	fr := frame(0xff, 0xa, string(make([]byte, 200)))
	copy(g.frames[0], fr)
	i := byte(0)
	allocs := testing.AllocsPerRun(200, func() {
		i++
		g.frames[0][20] = i // distinct frames: not a loop
		g.begin()
		g.forward(0, len(fr))
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per flooded frame", allocs)
	}
	if e.Stats().Flooded.Load() == 0 || e.Stats().FloodLimited.Load()+e.Stats().FloodLoopDrop.Load() != 0 {
		t.Errorf("frames not flooded: %v", e.Stats().Snapshot())
	}
}
