package agent

import "time"

// Clock is the agent's clock for the control plane. It reads the
// monotonic clock, so it never steps when the wall clock is adjusted, and
// adds a fixed offset that tests use to show that routing needs no
// synchronised clocks.
type Clock struct {
	start  time.Time
	base   time.Time
	offset time.Duration
}

// NewClock returns a clock shifted by offset.
func NewClock(offset time.Duration) *Clock {
	now := time.Now()
	return &Clock{start: now, base: now.Round(0), offset: offset}
}

// Now returns the current time on this clock: the wall time at start plus
// the monotonic time elapsed since, plus the offset.
func (c *Clock) Now() time.Time { return c.base.Add(time.Since(c.start) + c.offset) }

// Mono returns monotonic nanoseconds since the clock started.
func (c *Clock) Mono() int64 { return int64(time.Since(c.start)) }
