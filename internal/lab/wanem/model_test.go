package wanem

import (
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/scenario"
)

const ms = int64(time.Millisecond)

func props(delay time.Duration) scenario.LinkProps { return scenario.LinkProps{Delay: delay} }

func TestLinkDelay(t *testing.T) {
	l := NewLink(props(30*time.Millisecond), 1)
	for _, now := range []int64{0, 5 * ms, 5 * ms, 100 * ms} {
		got, ok := l.Offer(now, 100)
		if !ok || got != now+30*ms {
			t.Errorf("Offer(%d) = %d, %v; want %d", now, got, ok, now+30*ms)
		}
	}
}

func TestRateSerialisesAndQueueingDelayIsBytesOverRate(t *testing.T) {
	// 12 Mbit/s: a 1500-byte packet takes exactly 1 ms to send.
	p := props(10 * time.Millisecond)
	p.Rate = 12e6
	p.Queue = scenario.Queue{Bytes: 15000}
	l := NewLink(p, 1)
	for i := int64(1); i <= 10; i++ {
		got, ok := l.Offer(0, 1500)
		if !ok || got != i*ms+10*ms {
			t.Fatalf("packet %d arrives at %v, %v; want %v", i, time.Duration(got), ok, time.Duration(i*ms+10*ms))
		}
	}
	// The queue is full (10 packets = 15000 bytes): the next one is dropped.
	if _, ok := l.Offer(0, 1500); ok {
		t.Error("packet beyond the queue accepted")
	}
	if l.QueueDrops != 1 {
		t.Errorf("QueueDrops = %d", l.QueueDrops)
	}
	// At 4 ms, 6 packets (9000 bytes) are queued: 6 ms of queueing.
	if got := l.Backlog(4 * ms); got != 6*time.Millisecond {
		t.Errorf("Backlog = %v, want 6ms", got)
	}
	if got := l.Expected(4*ms, 1500); got != 17*time.Millisecond {
		t.Errorf("Expected = %v, want 6+1+10 ms", got)
	}
	// Once drained, a packet sees no queue.
	if got, _ := l.Offer(50*ms, 1500); got != 61*ms {
		t.Errorf("after draining: %v", time.Duration(got))
	}
}

func TestJitterDoesNotReorderUnlessAsked(t *testing.T) {
	p := props(20 * time.Millisecond)
	p.Jitter = 5 * time.Millisecond
	for _, reorder := range []bool{false, true} {
		p.Reorder = reorder
		l := NewLink(p, 7)
		var last, sum int64
		reordered, min, maxd := 0, int64(1<<62), int64(0)
		const n = 20000
		for i := int64(0); i < n; i++ {
			now := i * ms / 10 // 10 000 packets/s: closer than the jitter
			got, _ := l.Offer(now, 100)
			if got < last {
				reordered++
			}
			last = max(last, got)
			d := got - now
			sum += d
			min, maxd = minI(min, d), max(maxd, d)
		}
		mean := time.Duration(sum / n)
		if !reorder && reordered != 0 {
			t.Errorf("reorder=false: %d packets overtook", reordered)
		}
		if reorder && reordered == 0 {
			t.Errorf("reorder=true: no packet overtook")
		}
		if time.Duration(min) < 15*time.Millisecond || (reorder && time.Duration(maxd) > 25*time.Millisecond) {
			t.Errorf("reorder=%v: delays %v..%v outside 15..25ms", reorder, time.Duration(min), time.Duration(maxd))
		}
		if reorder && (mean < 19900*time.Microsecond || mean > 20100*time.Microsecond) {
			t.Errorf("reorder=true: mean %v, want 20ms", mean)
		}
	}
}

func minI(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

func TestLossIsSeededAndHasTheConfiguredRate(t *testing.T) {
	p := props(0)
	p.Loss = 0.02
	a, b := NewLink(p, 42), NewLink(p, 42)
	const n = 100000
	for i := range n {
		_, okA := a.Offer(int64(i), 100)
		_, okB := b.Offer(int64(i), 100)
		if okA != okB {
			t.Fatalf("same seed, different fate at packet %d", i)
		}
	}
	if rate := float64(a.Lost) / n; rate < 0.018 || rate > 0.022 {
		t.Errorf("loss %.4f, want 0.02", rate)
	}
	c := NewLink(p, 43)
	for i := range n {
		c.Offer(int64(i), 100)
	}
	if c.Lost == a.Lost {
		t.Errorf("different seeds gave the same number of losses (%d)", c.Lost)
	}
}

func TestShorterDelayDoesNotLetNewPacketsOvertake(t *testing.T) {
	l := NewLink(props(50*time.Millisecond), 1)
	old, _ := l.Offer(0, 100)
	l.Set(props(10 * time.Millisecond))
	next, _ := l.Offer(1*ms, 100)
	if next < old {
		t.Errorf("new packet arrives at %v before the old one at %v", time.Duration(next), time.Duration(old))
	}
	if later, _ := l.Offer(60*ms, 100); later != 70*ms {
		t.Errorf("once the old packet is out, the new delay applies: %v", time.Duration(later))
	}
	// A longer delay applies at once; queued packets keep their schedule.
	l.Set(props(80 * time.Millisecond))
	if got, _ := l.Offer(61*ms, 100); got != 141*ms {
		t.Errorf("longer delay: %v", time.Duration(got))
	}
}

func TestRateChangeKeepsQueuedPackets(t *testing.T) {
	p := props(0)
	p.Rate = 12e6
	l := NewLink(p, 1)
	first, _ := l.Offer(0, 1500) // leaves at 1 ms
	p.Rate = 1.2e6
	l.Set(p)
	second, _ := l.Offer(0, 1500) // starts at 1 ms, takes 10 ms
	if first != 1*ms || second != 11*ms {
		t.Errorf("arrivals %v %v, want 1ms 11ms", time.Duration(first), time.Duration(second))
	}
}

func scen(t *testing.T, doc string) *scenario.Scenario {
	t.Helper()
	s, err := scenario.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAccessCapacityIsSharedAndARelayUsesItTwice(t *testing.T) {
	s := scen(t, `
sites:
  - {name: A, access: {up: 12mbit, queue: 1MB}}
  - {name: B, access: {up: 12mbit, down: 12mbit, queue: 1MB}}
  - {name: C}
links:
  default: {delay: 5ms}
`)
	nw := NewNetwork(s)
	// Two packets from A to different sites share A's uplink.
	toB, _ := nw.Ingress(0, 0, 1, 1500)
	toC, _ := nw.Ingress(0, 0, 2, 1500)
	if toB != 6*ms || toC != 7*ms {
		t.Errorf("A's paths do not share the uplink: %v %v", time.Duration(toB), time.Duration(toC))
	}
	if nw.HasDownlink(0) || !nw.HasDownlink(1) {
		t.Error("HasDownlink is wrong")
	}
	// At B the packet crosses B's downlink (1 ms), then B relays it to C
	// through B's uplink (1 ms) and the link (5 ms).
	atB, _ := nw.Downlink(toB, 1, 1500)
	toC2, _ := nw.Ingress(atB, 1, 2, 1500)
	if atB != 7*ms || toC2 != 13*ms {
		t.Errorf("relay through B: delivered %v, at C %v; want 7ms, 13ms", time.Duration(atB), time.Duration(toC2))
	}
}

func TestNetworkUsesTheScenarioLinks(t *testing.T) {
	s := scen(t, `
sites: [{name: A}, {name: B}]
links:
  default: {delay: 5ms}
  overrides:
    - {from: A, to: B, delay: 7ms}
`)
	nw := NewNetwork(s)
	if got, _ := nw.Ingress(0, 0, 1, 100); got != 7*ms {
		t.Errorf("A->B %v", time.Duration(got))
	}
	if got, _ := nw.Ingress(0, 1, 0, 100); got != 5*ms {
		t.Errorf("B->A %v", time.Duration(got))
	}
}

func BenchmarkLinkOffer(b *testing.B) {
	p := props(20 * time.Millisecond)
	p.Jitter = time.Millisecond
	p.Rate = 1e9
	p.Loss = 0.001
	l := NewLink(p, 1)
	var now int64
	b.ReportAllocs()
	for b.Loop() {
		now += 12000
		l.Offer(now, 1500)
	}
}

// TestLinkOnset: a load's onset is the first packet of the run that
// waited QueueOnset or more and reached QueueLoad; a blip of a few
// milliseconds is none, a drain for a moment goes on with the same load,
// and a queue after no packet waited QueueLoad for IdleReset (a trickle
// of small packets meanwhile) is a new one.
func TestLinkOnset(t *testing.T) {
	const ms = int64(time.Millisecond)
	p := props(10 * time.Millisecond)
	p.Rate = 12e6 // a 1500-byte packet takes 1 ms to send
	p.Queue = scenario.Queue{Bytes: 40000}
	l := NewLink(p, 1)
	// burst offers k packets at at, one every gap.
	burst := func(at, gap int64, k int) {
		for i := range k {
			l.Offer(at+int64(i)*gap, 1500)
		}
	}
	base := 10_000 * ms
	burst(base, 0, 8) // a blip: the last packet waits 7 ms
	if at, ok := l.Onset(); ok {
		t.Fatalf("onset %v after a blip of 7 ms", time.Duration(at))
	}
	// The queue grows by 0.5 ms a packet: 5 ms at the 11th, 20 ms at the 41st.
	start := base + 100*ms
	burst(start, ms/2, 45)
	want := start + 5*ms
	if at, ok := l.Onset(); !ok || at != want {
		t.Fatalf("onset %v, %v; want the 11th packet, %v", time.Duration(at), ok, time.Duration(want))
	}
	burst(base+300*ms, 0, 25) // drained for a moment, then a load again
	if at, _ := l.Onset(); at != want {
		t.Errorf("a queue after a short drain moved the onset to %v", time.Duration(at))
	}
	for at := base + 400*ms; at < base+2000*ms; at += 100 * ms {
		burst(at, 0, 1) // small packets that never wait
	}
	burst(base+2000*ms, 0, 25)
	if at, ok := l.Onset(); !ok || at != base+2000*ms {
		t.Errorf("new onset %v, %v; want %v", time.Duration(at), ok, time.Duration(base+2000*ms))
	}
}
