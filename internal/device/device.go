// Package device gives the data path its Ethernet side: a Linux TAP device
// that the site's bridge delivers frames to, and a fake with the same
// interface for in-process tests.
package device

import (
	"errors"
)

// Device reads and writes whole Ethernet frames (no packet information
// header). Implementations are safe for one reader and one writer running
// concurrently.
type Device interface {
	// Read reads one frame into b and returns its length.
	Read(b []byte) (int, error)
	// ReadBatch blocks until at least one frame is available, then reads
	// up to len(bufs) frames that are ready without blocking again; it sets
	// sizes[i] to the length of frame i and returns the number of frames.
	ReadBatch(bufs [][]byte, sizes []int) (int, error)
	// Write writes one frame.
	Write(frame []byte) (int, error)
	// Name is the interface name.
	Name() string
	// MTU is the device's MTU (the largest IP packet, without the Ethernet
	// header).
	MTU() int
	// Close releases the device; a blocked Read returns ErrClosed.
	Close() error
}

// ErrClosed is returned by Read and Write after Close.
var ErrClosed = errors.New("device: closed")

// Waker is a Device whose reader can be woken: after Wake, a ReadBatch
// that blocks, or the next one, returns ErrWoken at once (frames already
// waiting may be read first). Wakes that come together may be merged into
// one ErrWoken.
type Waker interface {
	Wake() error
}

// ErrWoken is returned by ReadBatch after Wake.
var ErrWoken = errors.New("device: woken")
