package session

import (
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// Verdict is what a Guard decided about a handshake message.
type Verdict uint8

// Verdicts. Only Admit lets a message through to HandleHandshake or
// HandleCookieReply; every other verdict is a drop, counted by reason.
const (
	Admit           Verdict = iota
	DropMalformed           // not a handshake message of the right length and version
	DropMAC1                // mac1 missing or wrong: the sender does not know our key
	DropMAC2                // under load without a valid mac2: a cookie reply is sent
	DropRateLimited         // its source spent its budget of handshake work
	numVerdicts
)

func (v Verdict) String() string {
	return [...]string{"admit", "malformed", "mac1", "mac2", "rate_limited"}[v]
}

// GuardConfig tunes a Guard; zero fields take the defaults below.
type GuardConfig struct {
	// LoadRate is the rate of handshake work (messages with a valid mac1,
	// each of which would cost a Diffie-Hellman) above which this site is
	// under load and asks initiators for cookies.
	LoadRate float64
	// LoadBacklog is the handshake queue length at or above which this
	// site is under load whatever the rate.
	LoadBacklog int
	// UnderLoadFor is how long the site stays under load after the last
	// sign of it.
	UnderLoadFor time.Duration
	// PerSource and Burst are the token bucket of each source address:
	// handshake work and cookie replies per second, and how many at once.
	PerSource float64
	Burst     float64
	// MaxSources bounds the table of source addresses. Sources that find
	// it full share one bucket of Overflow per second.
	MaxSources int
	Overflow   float64
	// Cookies bounds the cookie replies per second to sources not
	// trusted (see Guard.Trust), whatever their number: a flood from
	// spoofed addresses cannot make this site send more.
	Cookies float64
	// ShieldRate is the rate of dropped handshake messages (any verdict
	// but Admit) above which Shielded is true: the I/O shell then has the
	// kernel drop handshakes that do not come from a known site at its
	// known address, but for a sample, before they cost this process
	// anything (see Sampled).
	ShieldRate float64
}

// Defaults of GuardConfig. The rates follow wireguard-go's (20 per second
// and source, burst 5; under load above 1/8 of the queue).
const (
	DefaultLoadRate     = 100
	DefaultLoadBacklog  = 16
	DefaultUnderLoadFor = time.Second
	DefaultPerSource    = 20
	DefaultBurst        = 5
	DefaultMaxSources   = 4096
	DefaultOverflow     = 100
	DefaultCookies      = 200
	DefaultShieldRate   = 1000
)

func (c GuardConfig) withDefaults() GuardConfig {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.LoadRate, DefaultLoadRate)
	def(&c.PerSource, DefaultPerSource)
	def(&c.Burst, DefaultBurst)
	def(&c.Overflow, DefaultOverflow)
	def(&c.Cookies, DefaultCookies)
	def(&c.ShieldRate, DefaultShieldRate)
	if c.LoadBacklog <= 0 {
		c.LoadBacklog = DefaultLoadBacklog
	}
	if c.UnderLoadFor <= 0 {
		c.UnderLoadFor = DefaultUnderLoadFor
	}
	if c.MaxSources <= 0 {
		c.MaxSources = DefaultMaxSources
	}
	return c
}

// Guard screens handshake messages before any public-key operation, as
// WireGuard does (paper §5.4): mac1 first; then, under load, a valid mac2
// or a cookie reply instead of the work; and a token bucket per source
// address on the work that remains. It is pure: time and the handshake
// queue's length are passed in, and what to send is returned. It is safe
// for concurrent use, but meant for the one goroutine that reads the
// underlay.
type Guard struct {
	cfg     GuardConfig
	checker *CookieChecker

	mu       sync.Mutex
	rate     float64 // the measured rate of handshake work, per second
	rateAt   time.Time
	loadTill time.Time
	limit    limiter
	cookieB  bucket // cookie replies to untrusted sources
	counts   [numVerdicts]uint64
	cookies  uint64
	// The measured rate of dropped messages, each weighing sample (the
	// inverse of the share of the flood that reaches the guard), and
	// until when the site is shielded.
	junk       float64
	junkAt     time.Time
	sample     float64
	shieldTill time.Time
}

// NewGuard returns a guard for the node's messages.
func NewGuard(n *Node, cfg GuardConfig) *Guard {
	cfg = cfg.withDefaults()
	return &Guard{cfg: cfg, checker: n.checker, limit: newLimiter(cfg), cookieB: bucket{tokens: cfg.Cookies}, sample: 1}
}

// Sampled tells the guard that only one in every n untrusted handshake
// messages reaches it (the kernel drops the others while shielded), so
// that each one it drops counts n times; n = 1 when not shielded.
func (g *Guard) Sampled(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sample = float64(max(n, 1))
}

// Shielded reports whether, at now, the rate of dropped handshake
// messages calls for the kernel to drop the untrusted ones: it was above
// ShieldRate less than UnderLoadFor ago.
func (g *Guard) Shielded(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return now.Before(g.shieldTill)
}

// Trust gives the source address a a bucket of its own that is never
// forgotten nor shared, and exempts it from the cap on cookie replies: the
// agent trusts the addresses of its configured peers and of the sites it
// has sessions with, so that a flood from many addresses cannot crowd them
// out of the table.
func (g *Guard) Trust(a netip.Addr) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.limit.trusted[a] == nil {
		g.limit.trusted[a] = &bucket{tokens: g.limit.burst}
	}
}

// Screen decides what to do with the handshake message or cookie reply
// pkt received from src at now, backlog being the number of messages
// already waiting for handshake work. A cookie reply to send back to src
// comes with DropMAC2.
func (g *Guard) Screen(now time.Time, src netip.AddrPort, pkt []byte, backlog int) (Verdict, []byte) {
	v, reply := g.screen(now, src, pkt, backlog)
	g.mu.Lock()
	g.counts[v]++
	if reply != nil {
		g.cookies++
	}
	if v != Admit {
		g.junk = decay(g.junk, g.junkAt, now) + g.sample/rateWindow.Seconds()
		g.junkAt = now
		if g.junk > g.cfg.ShieldRate {
			g.shieldTill = now.Add(g.cfg.UnderLoadFor)
		}
	}
	g.mu.Unlock()
	return v, reply
}

// decay returns the rate r measured at 'at' decayed to now.
func decay(r float64, at, now time.Time) float64 {
	if at.IsZero() {
		return r
	}
	if dt := now.Sub(at); dt > 0 {
		r *= math.Exp(-float64(dt) / float64(rateWindow))
	}
	return r
}

func (g *Guard) screen(now time.Time, src netip.AddrPort, pkt []byte, backlog int) (Verdict, []byte) {
	t, _, err := wire.ParseCommon(pkt)
	if err != nil {
		return DropMalformed, nil
	}
	if t == wire.TypeCookieReply {
		if len(pkt) != wire.CookieReplyLen {
			return DropMalformed, nil
		}
		return g.allow(now, src), nil
	}
	if n := wire.HandshakeLen(t); n == 0 || len(pkt) != n {
		return DropMalformed, nil
	}
	if !g.checker.CheckMAC1(pkt) {
		return DropMAC1, nil
	}
	loaded := g.observe(now, backlog)
	if t != wire.TypeHandshakeInit || !loaded {
		return g.allow(now, src), nil
	}
	// Under load, a source's budget is checked before mac2, so that a
	// flood from one address costs one table lookup per message.
	if v := g.allow(now, src); v != Admit {
		return v, nil
	}
	if g.checker.CheckMAC2(now, pkt, src) {
		return Admit, nil
	}
	if !g.cookieAllowed(now, src.Addr()) {
		return DropRateLimited, nil
	}
	reply, err := g.checker.CookieReply(now, pkt, src)
	if err != nil {
		return DropMAC2, nil
	}
	return DropMAC2, reply
}

// rateWindow is the time constant of the measured rate of handshake work.
const rateWindow = time.Second

// observe counts one message of handshake work at now and reports whether
// the site is under load.
func (g *Guard) observe(now time.Time, backlog int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rate = decay(g.rate, g.rateAt, now) + 1/rateWindow.Seconds()
	g.rateAt = now
	if g.rate > g.cfg.LoadRate || backlog >= g.cfg.LoadBacklog {
		g.loadTill = now.Add(g.cfg.UnderLoadFor)
	}
	return now.Before(g.loadTill)
}

// allow takes a token of src's bucket.
func (g *Guard) allow(now time.Time, src netip.AddrPort) Verdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.limit.allow(now, src.Addr()) {
		return Admit
	}
	return DropRateLimited
}

// cookieAllowed applies the cap on cookie replies to untrusted sources.
func (g *Guard) cookieAllowed(now time.Time, a netip.Addr) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit.trusted[a] != nil || g.cookieB.take(now, g.cfg.Cookies, g.cfg.Cookies)
}

// UnderLoad reports whether the site is under load at now.
func (g *Guard) UnderLoad(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return now.Before(g.loadTill)
}

// Counts returns, by verdict name, how many messages got each verdict,
// and the number of cookie replies made.
func (g *Guard) Counts() (map[string]uint64, uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]uint64, numVerdicts)
	for v := range numVerdicts {
		out[v.String()] = g.counts[v]
	}
	return out, g.cookies
}

// limiter is a bounded table of token buckets by source address, plus one
// bucket shared by the sources that find the table full, and the buckets
// of trusted sources, kept apart.
type limiter struct {
	rate, burst float64
	max         int
	trusted     map[netip.Addr]*bucket
	buckets     map[netip.Addr]*bucket
	overflow    bucket
	overRate    float64
	swept       time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(cfg GuardConfig) limiter {
	return limiter{rate: cfg.PerSource, burst: cfg.Burst, max: cfg.MaxSources, overRate: cfg.Overflow,
		trusted: make(map[netip.Addr]*bucket), buckets: make(map[netip.Addr]*bucket), overflow: bucket{tokens: cfg.Overflow}}
}

// sweepEvery is how often buckets that have refilled are forgotten.
const sweepEvery = time.Second

func (l *limiter) allow(now time.Time, a netip.Addr) bool {
	if now.Sub(l.swept) >= sweepEvery {
		l.sweep(now)
	}
	if b := l.trusted[a]; b != nil {
		return b.take(now, l.rate, l.burst)
	}
	b := l.buckets[a]
	if b == nil {
		if len(l.buckets) >= l.max {
			return l.overflow.take(now, l.overRate, l.overRate)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[a] = b
	}
	return b.take(now, l.rate, l.burst)
}

// sweep forgets the buckets that are full again: they hold nothing a new
// bucket would not.
func (l *limiter) sweep(now time.Time) {
	l.swept = now
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for a, b := range l.buckets {
		if now.Sub(b.at) >= full {
			delete(l.buckets, a)
		}
	}
}

// take refills the bucket at rate up to burst and takes one token.
func (b *bucket) take(now time.Time, rate, burst float64) bool {
	if dt := now.Sub(b.at); dt > 0 {
		b.tokens = min(burst, b.tokens+dt.Seconds()*rate)
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
