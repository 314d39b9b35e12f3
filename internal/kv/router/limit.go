package router

// limiter is a table of token buckets, one per hash of a source address
// (sources that collide share a bucket, which only makes the limit
// stricter for them). Tokens are counted in units of 1/rate seconds so
// that refilling needs no division per packet.
type limiter struct {
	rate    int64 // tokens per second
	burst   int64 // bucket size, in tokens
	buckets [limitBuckets]bucket
}

type bucket struct {
	tokens int64 // scaled by 1e9: one token is 1e9 units
	last   int64
}

const limitBuckets = 1024

func newLimiter(rate int) limiter {
	r := int64(rate)
	return limiter{rate: r, burst: max(r/5, 1)}
}

// allow takes a token from src's bucket at time now (ns).
func (l *limiter) allow(src uint32, now int64) bool {
	b := &l.buckets[(src*0x9e3779b1)>>22&(limitBuckets-1)]
	if b.last == 0 {
		b.tokens, b.last = l.burst*1e9, now
	}
	if d := now - b.last; d > 0 {
		b.tokens = min(b.tokens+d*l.rate, l.burst*1e9)
		b.last = now
	}
	if b.tokens < 1e9 {
		return false
	}
	b.tokens -= 1e9
	return true
}
