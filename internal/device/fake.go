package device

import (
	"sync"
)

// Fake is an in-memory Device for tests. Frames given to Inject are
// returned by Read; frames passed to Write are collected and can be taken
// with Written or waited for with Out.
type Fake struct {
	name string
	mtu  int
	in   chan []byte
	out  chan []byte
	wake chan struct{}

	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

// NewFake returns a fake device with room for queue frames in each
// direction.
func NewFake(name string, mtu, queue int) *Fake {
	return &Fake{name: name, mtu: mtu, in: make(chan []byte, queue), out: make(chan []byte, queue), wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Inject queues a frame as if a local host had sent it.
func (f *Fake) Inject(frame []byte) {
	select {
	case f.in <- append([]byte(nil), frame...):
	case <-f.done:
	}
}

// Out is the channel of frames the data path wrote to the device.
func (f *Fake) Out() <-chan []byte { return f.out }

// Read implements Device.
func (f *Fake) Read(b []byte) (int, error) {
	select {
	case fr := <-f.in:
		return copy(b, fr), nil
	case <-f.done:
		return 0, ErrClosed
	}
}

// Wake implements Waker.
func (f *Fake) Wake() error {
	select {
	case f.wake <- struct{}{}:
	default: // a wake is pending already
	}
	return nil
}

// ReadBatch implements Device (and Waker's ErrWoken).
func (f *Fake) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	var n int
	select {
	case fr := <-f.in:
		n = copy(bufs[0], fr)
	case <-f.wake:
		return 0, ErrWoken
	case <-f.done:
		return 0, ErrClosed
	}
	sizes[0] = n
	i := 1
	for ; i < len(bufs); i++ {
		select {
		case fr := <-f.in:
			sizes[i] = copy(bufs[i], fr)
		default:
			return i, nil
		}
	}
	return i, nil
}

// Write implements Device. A full output queue drops the frame, as a real
// device with a full queue would.
func (f *Fake) Write(frame []byte) (int, error) {
	select {
	case <-f.done:
		return 0, ErrClosed
	default:
	}
	select {
	case f.out <- append([]byte(nil), frame...):
	default:
	}
	return len(frame), nil
}

// Name implements Device.
func (f *Fake) Name() string { return f.name }

// MTU implements Device.
func (f *Fake) MTU() int { return f.mtu }

// Close implements Device.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.done)
	}
	return nil
}
