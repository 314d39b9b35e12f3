package transport

import (
	"net/netip"
	"sync"
	"time"
)

// FakeNetwork is an in-memory datagram network for tests. Datagrams are
// delivered at once, in order, unless Drop says otherwise; a full receive
// queue drops, as a real socket buffer would.
type FakeNetwork struct {
	mu    sync.Mutex
	conns map[netip.AddrPort]*FakeConn
	// Drop, when set, is asked for every datagram; returning true loses it.
	Drop func(from, to netip.AddrPort, payload []byte) bool
	// Clock, when set, gives each datagram its receive time
	// (Message.At) as it is delivered; without it At stays zero.
	Clock func() time.Time
}

// NewFakeNetwork returns an empty network.
func NewFakeNetwork() *FakeNetwork {
	return &FakeNetwork{conns: map[netip.AddrPort]*FakeConn{}}
}

type datagram struct {
	from netip.AddrPort
	data []byte
	at   time.Time
}

// FakeConn is one endpoint of a FakeNetwork.
type FakeConn struct {
	net   *FakeNetwork
	local netip.AddrPort
	in    chan datagram
	done  chan struct{}
	once  sync.Once
}

// Listen binds a new endpoint at addr.
func (n *FakeNetwork) Listen(addr netip.AddrPort) *FakeConn {
	c := &FakeConn{net: n, local: addr, in: make(chan datagram, 4096), done: make(chan struct{})}
	n.mu.Lock()
	n.conns[addr] = c
	n.mu.Unlock()
	return c
}

func (n *FakeNetwork) deliver(from, to netip.AddrPort, payload []byte) {
	n.mu.Lock()
	dst := n.conns[to]
	drop, clock := n.Drop, n.Clock
	n.mu.Unlock()
	if dst == nil || (drop != nil && drop(from, to, payload)) {
		return
	}
	d := datagram{from: from, data: append([]byte(nil), payload...)}
	if clock != nil {
		d.at = clock()
	}
	select {
	case dst.in <- d:
	default:
	}
}

// ReadBatch implements Conn.
func (c *FakeConn) ReadBatch(msgs []Message) (int, error) {
	var d datagram
	select {
	case d = <-c.in:
	case <-c.done:
		return 0, ErrClosed
	}
	n := 0
	for {
		msgs[n].N = copy(msgs[n].Buf, d.data)
		msgs[n].Addr, msgs[n].At = d.from, d.at
		n++
		if n == len(msgs) {
			return n, nil
		}
		select {
		case d = <-c.in:
		default:
			return n, nil
		}
	}
}

// WriteBatch implements Conn.
func (c *FakeConn) WriteBatch(msgs []Message) (int, error) {
	select {
	case <-c.done:
		return 0, ErrClosed
	default:
	}
	for i := range msgs {
		c.net.deliver(c.local, msgs[i].Addr, msgs[i].Buf[:msgs[i].N])
	}
	return len(msgs), nil
}

// LocalAddr implements Conn.
func (c *FakeConn) LocalAddr() netip.AddrPort { return c.local }

// Close implements Conn; the endpoint leaves the network.
func (c *FakeConn) Close() error {
	c.once.Do(func() {
		close(c.done)
		c.net.mu.Lock()
		delete(c.net.conns, c.local)
		c.net.mu.Unlock()
	})
	return nil
}
