package narrow

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"time"
)

// The request/response stream stands for the coordination traffic that
// shares the sites' paths with a bulk transfer (ZooKeeper's heartbeats and
// small writes): a client sends a request of rrSize bytes every interval
// on one TCP connection and waits for the reply of the same size, which
// the server sends back at once. The round trip of each request is a
// sample. A reply later than the interval delays the next request (one is
// outstanding at a time), as a synchronous client would.

// rrSize is the size of a request and of its reply.
const rrSize = 64

// ServeEcho answers every rrSize-byte request on connections accepted by
// l with the same bytes, until l is closed.
func ServeEcho(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
			buf := make([]byte, rrSize)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

// Sample is one request's round trip and when it was sent.
type Sample struct {
	At  time.Time
	RTT time.Duration
}

// Stream sends a request on c every interval until ctx ends and returns
// the round trip of each, in order. A request without a reply within
// timeout ends the stream with an error (and the samples so far).
func Stream(ctx context.Context, c net.Conn, interval, timeout time.Duration) ([]Sample, error) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	req, rep := make([]byte, rrSize), make([]byte, rrSize)
	var rtts []Sample
	next := time.Now()
	for seq := uint64(0); ; seq++ {
		if wait := time.Until(next); wait > 0 {
			select {
			case <-ctx.Done():
				return rtts, nil
			case <-time.After(wait):
			}
		} else if ctx.Err() != nil {
			return rtts, nil
		}
		binary.BigEndian.PutUint64(req, seq)
		start := time.Now()
		c.SetDeadline(start.Add(timeout))
		if _, err := c.Write(req); err != nil {
			return rtts, err
		}
		if _, err := io.ReadFull(c, rep); err != nil {
			return rtts, err
		}
		if binary.BigEndian.Uint64(rep) != seq {
			return rtts, errors.New("narrow: a reply to another request")
		}
		rtts = append(rtts, Sample{At: start, RTT: time.Since(start)})
		if next = next.Add(interval); next.Before(time.Now()) {
			next = time.Now()
		}
	}
}

// Percentile returns the p-th percentile (0..100) of the round trips of
// samples by the nearest-rank method, or 0 for none.
func Percentile(samples []Sample, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := make([]time.Duration, len(samples))
	for i, x := range samples {
		s[i] = x.RTT
	}
	slices.Sort(s)
	k := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}
