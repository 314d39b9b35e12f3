package measure

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestFilterIgnoresJitter feeds a constant delay plus uniform 1 ms jitter
// for ten simulated minutes and checks that the estimate's standard
// deviation stays under 0.1 ms, that it never strays more than 0.25 ms
// from its mean, and that its mean is the samples' mean: an estimate
// that reads jitter low reads a path of several links lower than one of
// fewer.
func TestFilterIgnoresJitter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := NewFilter(DefaultFilterConfig())
	base := -3*time.Second + 20*time.Millisecond // offset-shifted: negative
	var es []float64
	for i := 0; i < 6000; i++ {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		f.Add(now, base+time.Duration(rng.Int64N(int64(time.Millisecond))))
		if i < 60 {
			continue
		}
		e, _ := f.Estimate(now)
		es = append(es, float64(e-base)/1e6)
	}
	mean, sd, maxDev := stats(es)
	t.Logf("estimate − base: mean %.3f ms, sd %.3f ms, max deviation %.3f ms", mean, sd, maxDev)
	if sd > 0.1 || maxDev > 0.25 {
		t.Fatalf("estimate moves too much under 1 ms jitter: sd %.3f ms, max deviation %.3f ms", sd, maxDev)
	}
	if math.Abs(mean-0.5) > 0.05 {
		t.Fatalf("estimate − base averages %.3f ms, want the jitter's mean, 0.5 ms", mean)
	}
	if f.Steps() != 0 {
		t.Fatalf("%d false steps", f.Steps())
	}
}

// TestFilterIgnoresSpikes: one sample in five delayed by 2 to 10 ms (a
// burst of queueing, a host busy for a moment) on top of 1 ms of jitter
// moves the estimate by less than a fifth of a millisecond.
func TestFilterIgnoresSpikes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	f := NewFilter(DefaultFilterConfig())
	base := 20 * time.Millisecond
	var es []float64
	for i := 0; i < 3000; i++ {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		v := base + time.Duration(rng.Int64N(int64(time.Millisecond)))
		if i%5 == 0 {
			v += 2*time.Millisecond + time.Duration(rng.Int64N(int64(8*time.Millisecond)))
		}
		f.Add(now, v)
		if e, _ := f.Estimate(now); i >= 60 {
			es = append(es, float64(e-base)/1e6)
		}
	}
	mean, _, maxDev := stats(es)
	if math.Abs(mean-0.5) > 0.2 || maxDev > 0.3 {
		t.Fatalf("estimate − base: mean %.3f ms (want 0.5 ± 0.2), max deviation %.3f ms", mean, maxDev)
	}
}

// TestFilterFollowsStep checks that a lasting step of 5 ms, up or down, is
// followed within StepCount samples.
func stats(xs []float64) (mean, sd, maxDev float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
		maxDev = max(maxDev, math.Abs(x-mean))
	}
	return mean, math.Sqrt(sd / float64(len(xs))), maxDev
}

func TestFilterFollowsStep(t *testing.T) {
	for _, step := range []time.Duration{5 * time.Millisecond, -5 * time.Millisecond} {
		f := NewFilter(DefaultFilterConfig())
		now := t0
		for i := 0; i < 50; i++ {
			now = now.Add(100 * time.Millisecond)
			f.Add(now, 10*time.Millisecond)
		}
		n := 0
		for {
			now = now.Add(100 * time.Millisecond)
			f.Add(now, 10*time.Millisecond+step)
			n++
			if e, _ := f.Estimate(now); e == 10*time.Millisecond+step {
				break
			}
			if n > 10 {
				t.Fatalf("step %v not followed after %d samples", step, n)
			}
		}
		if n > DefaultFilterConfig().StepCount {
			t.Errorf("step %v followed after %d samples", step, n)
		}
	}
}

func TestFilterExpiresOldSamples(t *testing.T) {
	f := NewFilter(DefaultFilterConfig())
	f.Add(t0, time.Millisecond)
	if _, ok := f.Estimate(t0.Add(time.Second)); !ok {
		t.Fatal("fresh sample dropped")
	}
	if _, ok := f.Estimate(t0.Add(10 * time.Second)); ok {
		t.Fatal("old sample kept")
	}
}

// exchange simulates one probe over a link with the given one-way delays
// and responder clock offset, returning the reply's receive time.
func exchange(l *Link, now time.Time, fwd, back, offset, hold time.Duration) time.Time {
	seq, stamp := l.Probe(now)
	t2 := now.Add(fwd + offset)
	r := wire.ProbeReply{Sender: 2, Receiver: 1, Seq: seq, ProbeSendTime: stamp,
		ProbeRecvTime: t2.UnixNano(), ReplySendTime: t2.Add(hold).UnixNano()}
	t4 := now.Add(fwd + hold + back)
	if err := l.OnReply(t4, t4, &r); err != nil {
		panic(err)
	}
	return t4
}

func TestLinkEstimates(t *testing.T) {
	l := NewLink(DefaultConfig())
	now := t0
	offset := 7 * time.Second
	for i := 0; i < 20; i++ {
		exchange(l, now, 15*time.Millisecond, 17*time.Millisecond, offset, 2*time.Millisecond)
		now = now.Add(100 * time.Millisecond)
	}
	s := l.Stats(now)
	if !s.Up || !s.Valid {
		t.Fatalf("link not up: %+v", s)
	}
	if s.Delay != 15*time.Millisecond+offset {
		t.Errorf("delay %v", s.Delay)
	}
	if s.RTT != 32*time.Millisecond || s.OneWayEstimate != 16*time.Millisecond {
		t.Errorf("rtt %v one-way %v", s.RTT, s.OneWayEstimate)
	}
	if s.Loss.Rate != 0 || s.Loss.Samples != 19 || s.ReturnLoss.Rate != 0 {
		t.Errorf("loss %+v back %+v, want none over 19 probes", s.Loss, s.ReturnLoss)
	}
	if l.Up(now.Add(600 * time.Millisecond)) {
		t.Error("link up after 600 ms of silence")
	}
}

func TestLinkBadReplies(t *testing.T) {
	l := NewLink(DefaultConfig())
	now := t0
	r := wire.ProbeReply{Seq: 9999}
	if err := l.OnReply(now, now, &r); err != ErrUnknownProbe {
		t.Errorf("unknown probe: %v", err)
	}
	seq, stamp := l.Probe(now)
	r = wire.ProbeReply{Seq: seq, ProbeSendTime: stamp, ProbeRecvTime: 10, ReplySendTime: 5}
	if err := l.OnReply(now, now, &r); err != ErrBadTimes {
		t.Errorf("negative hold: %v", err)
	}
}

// TestLinkTakesARestampedSendTime: a probe that left 3 ms after it was
// recorded (a busy sender, restamped by its I/O shell) is measured from
// when it left; an echoed send time before the recorded one or more than
// MaxRestamp after it is not a reply to that probe.
func TestLinkTakesARestampedSendTime(t *testing.T) {
	l := NewLink(DefaultConfig())
	now := t0
	const late, fwd, back = 3 * time.Millisecond, 10 * time.Millisecond, 12 * time.Millisecond
	for range 20 {
		seq, stamp := l.Probe(now)
		left := stamp + int64(late)
		r := wire.ProbeReply{Seq: seq, ProbeSendTime: left, ProbeRecvTime: left + int64(fwd), ReplySendTime: left + int64(fwd)}
		if err := l.OnReply(now.Add(late+fwd+back), now.Add(late+fwd+back), &r); err != nil {
			t.Fatal(err)
		}
		now = now.Add(100 * time.Millisecond)
	}
	if s := l.Stats(now); s.Delay != fwd || s.RTT != fwd+back {
		t.Errorf("delay %v, rtt %v; want %v and %v, measured from when the probes left", s.Delay, s.RTT, fwd, fwd+back)
	}
	for _, off := range []time.Duration{-time.Nanosecond, MaxRestamp + time.Nanosecond} {
		seq, stamp := l.Probe(now)
		r := wire.ProbeReply{Seq: seq, ProbeSendTime: stamp + int64(off), ProbeRecvTime: stamp + int64(fwd), ReplySendTime: stamp + int64(fwd)}
		if err := l.OnReply(now.Add(fwd+back), now.Add(fwd+back), &r); err != ErrUnknownProbe {
			t.Errorf("echoed send time %v from the recorded one: %v, want ErrUnknownProbe", off, err)
		}
	}
}

func BenchmarkFilterAdd(b *testing.B) {
	f := NewFilter(DefaultFilterConfig())
	now := t0
	for i := 0; i < b.N; i++ {
		now = now.Add(100 * time.Millisecond)
		f.Add(now, time.Duration(i%1000)*time.Microsecond)
	}
}

// A host that stalls stamps a burst of probes late, by decreasing amounts;
// that is not a lasting change and must not move the estimate, while a
// real step of the same size is followed within StepCount samples.
func TestFilterIgnoresAStallButFollowsAStep(t *testing.T) {
	feed := func(f *Filter, now *time.Time, vs ...time.Duration) {
		for _, v := range vs {
			*now = now.Add(100 * time.Millisecond)
			f.Add(*now, v)
		}
	}
	ms := time.Millisecond
	base := make([]time.Duration, 40)
	for i := range base {
		base[i] = 10*ms + time.Duration(i%5)*100*time.Microsecond
	}

	stalled := NewFilter(DefaultFilterConfig())
	now := time.Unix(0, 0)
	feed(stalled, &now, base...)
	feed(stalled, &now, 390*ms, 290*ms, 190*ms, 90*ms)
	if e, _ := stalled.Estimate(now); e > 10500*time.Microsecond {
		t.Errorf("a stall moved the estimate to %v", e)
	}

	stepped := NewFilter(DefaultFilterConfig())
	now = time.Unix(0, 0)
	feed(stepped, &now, base...)
	feed(stepped, &now, 30*ms, 30100*time.Microsecond, 29900*time.Microsecond)
	if e, _ := stepped.Estimate(now); e < 29*ms {
		t.Errorf("a step to 30 ms left the estimate at %v after 3 samples", e)
	}

	// A link made faster: the first probe after the change still waits
	// behind older packets (a transitional sample), then the new delay.
	faster := NewFilter(DefaultFilterConfig())
	now = time.Unix(0, 0)
	feed(faster, &now, base...)
	feed(faster, &now, 5*ms, 2*ms, 2100*time.Microsecond)
	if e, _ := faster.Estimate(now); e > 3*ms {
		t.Errorf("a step down to 2 ms left the estimate at %v after 3 samples", e)
	}
}

// TestFilterStepRunAcrossExpiry: samples about 5 s apart (probes lost for
// seconds, as on an overloaded machine) leave at most one sample in the
// window each time, while a step run goes on counting; the restart must
// not reach back past the samples that are left. This sequence, found by
// FuzzFilter, crashed the agent.
func TestFilterStepRunAcrossExpiry(t *testing.T) {
	f := NewFilter(DefaultFilterConfig())
	now := t0
	for _, s := range []struct{ gap, v time.Duration }{
		{4800, 179}, {4800, 120}, {4800, 48}, {5500, 243}, {4800, 48}, {4800, 48}, {4800, 48}, {4800, 48}, {4800, 48},
	} {
		now = now.Add(s.gap * time.Millisecond)
		f.Add(now, s.v*time.Millisecond)
	}
	if est, ok := f.Estimate(now); !ok || est != 48*time.Millisecond {
		t.Fatalf("estimate %v, %v after the samples settled at 48 ms", est, ok)
	}
}

// FuzzFilter feeds arbitrary sample sequences (gaps and values) to a
// filter: it must never panic and its estimate must lie within the
// samples' range.
func FuzzFilter(f *testing.F) {
	f.Add([]byte{1, 10, 1, 10, 60, 200, 1, 200, 1, 250})
	f.Fuzz(func(t *testing.T, b []byte) {
		fl := NewFilter(DefaultFilterConfig())
		now := t0
		lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
		for i := 0; i+1 < len(b); i += 2 {
			now = now.Add(time.Duration(b[i]) * 100 * time.Millisecond)
			v := time.Duration(b[i+1]) * time.Millisecond
			fl.Add(now, v)
			lo, hi = min(lo, v), max(hi, v)
			if est, ok := fl.Estimate(now); ok && (est < lo || est > hi) {
				t.Fatalf("estimate %v outside the samples' range [%v, %v]", est, lo, hi)
			}
		}
	})
}

// TestFilterMeanIncludesQueueing: samples that swing with a queue give a
// mean in the middle and an estimate from the middle half (40, 50 and 60
// ms: 50 ms), which a short lull in the queue does not pull down to the
// floor.
func TestFilterMeanIncludesQueueing(t *testing.T) {
	f := NewFilter(DefaultFilterConfig())
	for i := range 40 {
		f.Add(t0.Add(time.Duration(i)*100*time.Millisecond), time.Duration(30+i%5*10)*time.Millisecond) // 30..70 ms
	}
	now := t0.Add(4 * time.Second)
	est, _ := f.Estimate(now)
	mean, ok := f.Mean(now)
	if !ok || (mean-50*time.Millisecond).Abs() > time.Millisecond {
		t.Fatalf("mean %v, %v; want 50 ms (the first samples may have restarted the window)", mean, ok)
	}
	if (est - 50*time.Millisecond).Abs() > time.Millisecond {
		t.Fatalf("estimate %v, want the middle half's mean, 50 ms", est)
	}
	for i := range 5 { // a lull of half a second
		f.Add(now.Add(time.Duration(i+1)*100*time.Millisecond), 30*time.Millisecond)
	}
	if est, _ := f.Estimate(now.Add(500 * time.Millisecond)); est < 45*time.Millisecond {
		t.Fatalf("estimate %v after a lull of 0.5 s, want it at 45 ms or more", est)
	}
}

// TestInbandRisesFastFallsSlowly: a link probed every 100 ms and carrying
// traffic sampled every 5 ms. When its queue fills (+30 ms), the data's
// samples raise the estimate within a few samples, where the probes alone
// would take several probes; when the queue drains for 300 ms (a TCP flow
// backing off), the estimate stays up; once the traffic stops, the probes'
// estimate is reported again. A link that is down takes no samples.
func TestInbandRisesFastFallsSlowly(t *testing.T) {
	const offset = -3 * time.Second
	ms := time.Millisecond
	l := NewLink(DefaultConfig())
	now := t0
	// run probes every 100 ms and, when traffic is on, adds a sample of
	// the data every 5 ms, for d at one-way delay owd.
	run := func(d, owd time.Duration, traffic bool) {
		for end := now.Add(d); now.Before(end); now = now.Add(5 * ms) {
			if now.Sub(t0)%(100*ms) == 0 {
				exchange(l, now, owd, 20*ms, offset, 0)
			}
			if traffic && !l.AddInband(now, []int64{int64(offset + owd)}) {
				t.Fatalf("%v: samples refused on a live link", now.Sub(t0))
			}
		}
	}
	delay := func() time.Duration { return l.Stats(now).Delay - offset }
	run(3*time.Second, 20*ms, true)
	if d := delay(); d != 20*ms {
		t.Fatalf("idle estimate %v, want 20 ms", d)
	}
	run(40*ms, 50*ms, true) // eight samples of the filled queue
	if d := delay(); d < 45*ms {
		t.Fatalf("estimate %v 40 ms after the queue filled; want the new 50 ms", d)
	}
	run(time.Second, 50*ms, true)
	run(300*ms, 20*ms, true) // the queue drains for a moment
	if d := delay(); d < 40*ms {
		t.Errorf("estimate %v after a 300 ms drain; want it to stay within a third of the queue", d)
	}
	run(time.Second, 50*ms, true)
	run(6*time.Second, 20*ms, false) // the traffic moves away; the probes see the idle link
	if d := delay(); d != 20*ms {
		t.Errorf("estimate %v without traffic; want the probes' 20 ms", d)
	}
	if l.AddInband(now.Add(time.Second), []int64{int64(offset)}) {
		t.Error("a link silent for a second took in-band samples")
	}
}

// TestFilterUndecided: the sample that begins a rise asks for the
// StepCount − 1 samples that decide it; a rise still climbing after
// StepCount samples (a queue filling) asks for as many again; a fall,
// a sample within the jitter, a rise below ConfirmRise (decided by the
// samples as they come) or the rest of a run ask for none.
func TestFilterUndecided(t *testing.T) {
	ms := time.Millisecond
	f := NewFilter(DefaultFilterConfig())
	now := t0
	add := func(v time.Duration) int {
		now = now.Add(100 * ms)
		f.Add(now, v)
		return f.Undecided()
	}
	for i := range 40 {
		if u := add(20*ms + time.Duration(i%4)*100*time.Microsecond); u != 0 {
			t.Fatalf("sample %d within the jitter: undecided %d", i, u)
		}
	}
	if u := add(5 * ms); u != 0 {
		t.Errorf("a sample below the estimate: undecided %d, want 0", u)
	}
	add(20 * ms)
	for i := range 3 { // a rise below ConfirmRise, decided by the samples as they come
		if u := add(26 * ms); u != 0 {
			t.Errorf("sample %d of a 6 ms rise: undecided %d, want 0", i+1, u)
		}
	}
	if e, _ := f.Estimate(now); e != 26*ms {
		t.Errorf("estimate %v after three samples at 26 ms", e)
	}
	for range 40 {
		add(26 * ms)
	}
	// A run that begins 4 ms up asks for the one sample that decides it
	// once a later sample reads 14 ms up.
	for i, c := range []struct {
		v    time.Duration
		want int
	}{{30 * ms, 0}, {40 * ms, 1}, {40 * ms, 0}} {
		if u := add(c.v); u != c.want {
			t.Errorf("ramp sample %d (%v): undecided %d, want %d", i+1, c.v, u, c.want)
		}
	}
	for range 40 {
		add(40 * ms)
	}
	for i, want := range []int{2, 0, 3, 0, 0} { // 55, 65, 75 ms: not settled; then 75, 75: the run of six steps
		v := (55 + 10*time.Duration(min(i, 2))) * ms
		if u := add(v); u != want {
			t.Errorf("climbing sample %d (%v): undecided %d, want %d", i+1, v, u, want)
		}
	}
	if e, _ := f.Estimate(now); e < 70*ms {
		t.Errorf("estimate %v after the climb", e)
	}
}

// TestLinkConfirm: a reply that begins a rise asks for two probes; in-band
// samples that begin one ask for three while the probes have seen none,
// and none once the probes are already deciding it.
func TestLinkConfirm(t *testing.T) {
	ms := time.Millisecond
	l := NewLink(DefaultConfig())
	now := t0
	for range 30 {
		exchange(l, now, 20*ms, 20*ms, 0, 0)
		if c := l.Confirm(); c != 0 {
			t.Fatalf("steady link: confirm %d", c)
		}
		if l.AddInband(now, []int64{int64(20 * ms)}); l.Confirm() != 0 {
			t.Fatalf("steady in-band samples: confirm %d", l.Confirm())
		}
		now = now.Add(100 * ms)
	}
	if l.AddInband(now, []int64{int64(60 * ms)}); l.Confirm() != 3 {
		t.Errorf("in-band samples began a rise: confirm %d, want 3", l.Confirm())
	}
	exchange(l, now, 60*ms, 20*ms, 0, 0)
	if c := l.Confirm(); c != 2 {
		t.Errorf("a reply began a rise: confirm %d, want 2", c)
	}
	if l.AddInband(now, []int64{int64(20 * ms), int64(60 * ms)}); l.Confirm() != 0 {
		t.Errorf("in-band samples began a rise the probes are deciding: confirm %d, want 0", l.Confirm())
	}
	r := wire.ProbeReply{Seq: 9999}
	if err := l.OnReply(now, now, &r); err == nil || l.Confirm() != 0 {
		t.Errorf("a bad reply: %v, confirm %d", err, l.Confirm())
	}
}
