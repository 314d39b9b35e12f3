// Package transport gives the data path its underlay side: a UDP socket that
// reads and writes datagrams in batches (recvmmsg/sendmmsg on Linux) without
// allocating, and an in-memory fake network with the same interface for
// in-process tests.
package transport

import (
	"errors"
	"net/netip"
	"time"
)

// Message is one datagram in a batch. For reads, Buf is the buffer to fill
// and N and Addr are set on return; for writes, Buf[:N] is sent to Addr.
type Message struct {
	Buf  []byte
	N    int
	Addr netip.AddrPort
	// At is when the kernel received the datagram (wall clock), set by
	// ReadBatch when the socket reports it; zero otherwise.
	At time.Time
}

// Conn is a batched datagram socket. One goroutine may read while another
// writes; concurrent readers (or writers) need their own synchronisation.
type Conn interface {
	// ReadBatch blocks until at least one datagram arrives and fills up to
	// len(msgs) messages; it returns how many.
	ReadBatch(msgs []Message) (int, error)
	// WriteBatch sends the messages and returns how many were sent.
	WriteBatch(msgs []Message) (int, error)
	// LocalAddr is the bound address.
	LocalAddr() netip.AddrPort
	// Close releases the socket; blocked reads return ErrClosed.
	Close() error
}

// ErrClosed is returned after Close.
var ErrClosed = errors.New("transport: closed")

// MaxBatch is the largest batch a Conn handles in one system call.
const MaxBatch = 64
