package measure

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Known values of the Wilson score interval at 95 %.
func TestWilsonInterval(t *testing.T) {
	for _, c := range []struct {
		p       float64
		n       int
		lo, hi  float64
		comment string
	}{
		{0, 300, 0, 0.01264, "no loss in 300 still allows 1.3 %"},
		{0.01, 1000, 0.00544, 0.01832, "10 of 1000"},
		{0.5, 20, 0.29929, 0.70071, "10 of 20"},
		{1, 3, 0.43850, 1, "3 of 3"},
	} {
		lo, hi := WilsonInterval(c.p, c.n, 1.96)
		if math.Abs(lo-c.lo) > 5e-5 || math.Abs(hi-c.hi) > 5e-5 {
			t.Errorf("%s: [%.5f, %.5f], want [%.5f, %.5f]", c.comment, lo, hi, c.lo, c.hi)
		}
	}
	if lo, hi := WilsonInterval(0.3, 0, 1.96); lo != 0 || hi != 1 {
		t.Errorf("no samples: [%v, %v], want [0, 1]", lo, hi)
	}
}

// sendAt feeds a window one second of 10 probes of which lost were lost.
func sendAt(w *LossWindow, at time.Time, lost int) { w.Add(at, 10, lost) }

// The window grows until it holds Events losses: a light rate is measured
// over minutes, a heavy one over seconds.
func TestLossWindowLengthFollowsTheRate(t *testing.T) {
	cfg := DefaultLossConfig()
	heavy, light := NewLossWindow(cfg), NewLossWindow(cfg)
	now := t0
	for i := range 600 { // 10 minutes, 10 probes a second
		sendAt(heavy, now, 5)              // 50 %
		sendAt(light, now, b2i(i%20 == 0)) // 0.5 %
		now = now.Add(time.Second)
	}
	h := heavy.Estimate(now)
	if h.Rate != 0.5 || h.Samples > 200 {
		t.Errorf("50 %% loss: %+v, want 0.5 over at most 200 probes (50 losses and a bucket)", h)
	}
	l := light.Estimate(now)
	if math.Abs(l.Rate-0.005) > 0.0005 || l.Samples < 5000 {
		t.Errorf("0.5 %% loss: %+v, want 0.005 over at least 5000 probes", l)
	}
	if l.Low > 0.005 || l.High < 0.005 || l.High-l.Low > 0.005 {
		t.Errorf("0.5 %% loss: interval [%v, %v] misses the rate or is wider than the rate", l.Low, l.High)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A link that heals is not judged by its lossy past for the rest of the
// span, and one that starts losing is not diluted by its clean past.
func TestLossWindowRestartsOnAChange(t *testing.T) {
	w := NewLossWindow(DefaultLossConfig())
	now := t0
	for range 300 { // 5 minutes at 5 %
		sendAt(w, now, b2i(now.Sub(t0)%(2*time.Second) == 0))
		now = now.Add(time.Second)
	}
	if e := w.Estimate(now); math.Abs(e.Rate-0.05) > 0.005 {
		t.Fatalf("5 %% loss reads %+v", e)
	}
	healed := now
	for w.Estimate(now).Low > 0 || w.Estimate(now).Rate > 0.001 {
		sendAt(w, now, 0)
		now = now.Add(time.Second)
		if now.Sub(healed) > 2*time.Minute {
			t.Fatalf("2 minutes after healing the loss still reads %+v", w.Estimate(now))
		}
	}
	t.Logf("a healed 5 %% link reads no loss after %v", now.Sub(healed))
	if now.Sub(healed) > time.Minute {
		t.Errorf("healing took %v to show, want within a minute", now.Sub(healed))
	}
	for range 600 {
		sendAt(w, now, 0)
		now = now.Add(time.Second)
	}
	start := now
	for w.Estimate(now).Low < 0.03 {
		sendAt(w, now, 1) // 10 %
		now = now.Add(time.Second)
		if now.Sub(start) > time.Minute {
			t.Fatalf("a minute into 10 %% loss the estimate is %+v", w.Estimate(now))
		}
	}
	t.Logf("10 %% loss after 10 clean minutes is surely above 3 %% after %v", now.Sub(start))
}

// At a steady rate the change test rarely fires, and the charged lower
// bound of a rate below the floor of 2 % stays below it.
func TestLossWindowSteadyRateIsQuiet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range []float64{0.001, 0.005, 0.01} {
		w := NewLossWindow(DefaultLossConfig())
		now := t0
		maxLow := 0.0
		for range 3600 { // an hour
			lost := 0
			for range 10 {
				if rng.Float64() < p {
					lost++
				}
			}
			w.Add(now, 10, lost)
			now = now.Add(time.Second)
			maxLow = max(maxLow, w.Estimate(now).Low)
		}
		if maxLow >= 0.02 {
			t.Errorf("%.1f %% loss: the interval's lower bound reached %.4f in an hour", 100*p, maxLow)
		}
		t.Logf("%.1f %% loss: highest lower bound in an hour %.4f; now %+v", 100*p, maxLow, w.Estimate(now))
	}
}

// peerLink drives a Link against a responder that counts the probes it
// receives, with the given forward and return loss decided per probe.
type peerLink struct {
	l        *Link
	received uint32
	now      time.Time
}

func (p *peerLink) probe(fwdLost, backLost bool) {
	seq, stamp := p.l.Probe(p.now)
	if !fwdLost {
		p.received++
		t2 := p.now.Add(5 * time.Millisecond)
		r := wire.ProbeReply{Sender: 2, Receiver: 1, Seq: seq, ProbeSendTime: stamp, ProbeRecvTime: t2.UnixNano(),
			ReplySendTime: t2.UnixNano(), HasReceived: true, Received: p.received}
		if !backLost {
			if err := p.l.OnReply(p.now.Add(10*time.Millisecond), p.now.Add(10*time.Millisecond), &r); err != nil {
				panic(err)
			}
		}
	}
	p.now = p.now.Add(100 * time.Millisecond)
}

// Each direction's loss is told apart by the responder's count of probes
// received: 10 % of the probes are lost, and 400 of the 1800 replies to
// the others (22.2 %).
func TestLinkLossPerDirection(t *testing.T) {
	p := &peerLink{l: NewLink(DefaultConfig()), now: t0}
	for i := range 2000 {
		p.probe(i%10 == 3, i%5 == 1)
	}
	out, back := p.l.Loss(p.now)
	if math.Abs(out.Rate-0.1) > 0.01 || math.Abs(back.Rate-2.0/9) > 0.01 {
		t.Errorf("outgoing %+v, return %+v; want 10 %% and 22.2 %%", out, back)
	}
	if out.Low > 0.1 || out.High < 0.1 {
		t.Errorf("outgoing interval [%v, %v] misses 10 %%", out.Low, out.High)
	}
}

// An outage (no reply for longer than DownAfter) is reported by Up, not
// counted as loss; nor is a responder's restart (its count goes back).
func TestLinkLossLeavesOutOutagesAndRestarts(t *testing.T) {
	p := &peerLink{l: NewLink(DefaultConfig()), now: t0}
	for range 100 {
		p.probe(false, false)
	}
	for range 30 { // 3 s with nothing through
		p.probe(true, false)
	}
	p.received = 0 // the responder restarted
	for range 100 {
		p.probe(false, false)
	}
	if out, back := p.l.Loss(p.now); out.Rate != 0 || back.Rate != 0 || out.Samples < 150 {
		t.Errorf("outgoing %+v, return %+v; want no loss over at least 150 probes", out, back)
	}
}

// A reply from a site that does not count probes received gives the round
// trip's loss, charged to the outgoing direction.
func TestLinkLossWithoutCounts(t *testing.T) {
	l := NewLink(DefaultConfig())
	now := t0
	for i := range 400 {
		if i%4 == 0 {
			l.Probe(now) // lost one way or the other
		} else {
			exchange(l, now, 5*time.Millisecond, 5*time.Millisecond, 0, 0)
		}
		now = now.Add(100 * time.Millisecond)
	}
	if out, back := l.Loss(now); math.Abs(out.Rate-0.25) > 0.01 || back.Samples != 0 {
		t.Errorf("outgoing %+v, return %+v; want 25 %% outgoing, nothing known of the return", out, back)
	}
}

// A lossy link may miss more replies before it is down: at 2 % round-trip
// loss a run of five losses is likelier than one in a billion, so it gets
// six probe intervals; a clean link keeps five.
func TestLinkDownAfterStretchesForLoss(t *testing.T) {
	clean := &peerLink{l: NewLink(DefaultConfig()), now: t0}
	lossy := &peerLink{l: NewLink(DefaultConfig()), now: t0}
	for i := range 3000 {
		clean.probe(false, false)
		lossy.probe(i%100 == 7, i%100 == 57) // 1 % each way
	}
	if d := clean.l.DownAfter(); d != 500*time.Millisecond {
		t.Errorf("clean link down after %v, want 500ms", d)
	}
	if d := lossy.l.DownAfter(); d != 600*time.Millisecond {
		t.Errorf("link losing 2 %% of round trips down after %v, want 600ms", d)
	}
	last := lossy.l.LastReply()
	if !lossy.l.Up(last.Add(550*time.Millisecond)) || lossy.l.Up(last.Add(600*time.Millisecond)) {
		t.Error("the lossy link is not up 550 ms after its last reply, or still up at 600 ms")
	}
}

// The kept estimate follows the counts and the span: counts added after it
// are seen at once, and buckets that leave the span leave the estimate.
func TestLossWindowEstimateFollowsCountsAndSpan(t *testing.T) {
	cfg := DefaultLossConfig()
	w := NewLossWindow(cfg)
	w.Add(t0, 10, 5)
	if e := w.Estimate(t0.Add(time.Second)); e.Rate != 0.5 || e.Samples != 10 {
		t.Fatalf("after one bucket: %+v", e)
	}
	w.Add(t0.Add(2*time.Second), 10, 0)
	if e := w.Estimate(t0.Add(3 * time.Second)); e.Rate != 0.25 || e.Samples != 20 {
		t.Fatalf("after more counts in the same bucket: %+v, want 5 of 20", e)
	}
	if e := w.Estimate(t0.Add(cfg.Span + time.Second)); e.Samples != 0 {
		t.Fatalf("a span later: %+v, want no samples", e)
	}
}

// The charged bound's quantile grows with the overlay's links, so that the
// chance of charging any link for loss it does not have stays at alpha.
func TestChargeZ(t *testing.T) {
	for _, c := range []struct {
		links int
		want  float64
	}{{1, 1.645}, {2, 1.96}, {380, 3.65}, {2862, 4.14}} {
		if got := ChargeZ(0.05, c.links); math.Abs(got-c.want) > 0.01 {
			t.Errorf("ChargeZ(0.05, %d) = %.3f, want %.2f", c.links, got, c.want)
		}
	}
	// 3 losses in 25 probes of a 0.5 % link (a chance of 3e-4 for one
	// link, likely somewhere among 2,862) are above a 2 % floor at 95 %,
	// not at the 54-site overlay's quantile.
	lo95, _ := WilsonInterval(3.0/25, 25, 1.96)
	lo54, _ := WilsonInterval(3.0/25, 25, ChargeZ(0.05, 2862))
	if lo95 <= 0.02 || lo54 >= 0.02 {
		t.Errorf("3 of 25: lower bound %.4f at 95 %%, %.4f overlay-wide; want above and below 2 %%", lo95, lo54)
	}
}

// TestLossWindowGrowsKeepingItsOrder: a window whose ring starts small and
// grows as buckets come holds, after many wraps, exactly the buckets of
// its span: its rate is the one over the last 30 one-second buckets.
func TestLossWindowGrowsKeepingItsOrder(t *testing.T) {
	cfg := LossConfig{Bucket: time.Second, Span: 30 * time.Second, Events: 1 << 30, Recent: 5 * time.Second, Z: 1.96, ChangeZ: 100}
	w := NewLossWindow(cfg)
	now := time.Unix(0, 0)
	lost := func(s int) int { return s % 3 }
	for s := 0; s <= 100; s++ {
		w.Add(now.Add(time.Duration(s)*time.Second), 10, lost(s))
	}
	var sent, l int
	for s := 71; s <= 100; s++ {
		sent, l = sent+10, l+lost(s)
	}
	e := w.Estimate(now.Add(100 * time.Second))
	if e.Samples != sent || e.Rate != float64(l)/float64(sent) {
		t.Fatalf("%d samples at %.4f, want %d at %.4f", e.Samples, e.Rate, sent, float64(l)/float64(sent))
	}
}
