package zoo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/detour-overlay/detour/internal/lab/experiment/store"
)

// Client is one ZooKeeper session with one server.
type Client struct {
	conn   *zk.Conn
	server string
	path   string
	data   []byte
}

// SessionTimeout is the session timeout the client asks for; long enough
// for WAN round trips of a few hundred milliseconds and a route change.
const SessionTimeout = 10 * time.Second

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// Connect opens a session with the server named name at addr (its client
// port is ClientPort) through dial, waits until the session is established
// and creates the znode path with size bytes of random data if it does not
// exist. Session setup is itself a quorum write: it is not timed.
func Connect(ctx context.Context, name, addr string, dial store.Dialer, path string, size int) (*Client, error) {
	if dial == nil {
		dial = net.DialTimeout
	}
	hp := net.JoinHostPort(addr, strconv.Itoa(ClientPort))
	conn, events, err := zk.Connect([]string{hp}, SessionTimeout,
		zk.WithLogger(quietLogger{}), zk.WithDialer(zk.Dialer(dial)))
	if err != nil {
		return nil, fmt.Errorf("zoo: connect %s: %w", name, err)
	}
	if err := waitSession(ctx, events); err != nil {
		conn.Close()
		return nil, fmt.Errorf("zoo: session with %s: %w", name, err)
	}
	c := &Client{conn: conn, server: name, path: path, data: make([]byte, size)}
	_, _ = rand.Read(c.data)
	if err := c.ensure(); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func waitSession(ctx context.Context, events <-chan zk.Event) error {
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ensure creates the client's znode (and its parent) when missing.
func (c *Client) ensure() error {
	if parent := parentOf(c.path); parent != "/" {
		if _, err := c.conn.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zoo: create %s: %w", parent, err)
		}
	}
	_, err := c.conn.Create(c.path, c.data, 0, zk.WorldACL(zk.PermAll))
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("zoo: create %s: %w", c.path, err)
	}
	return nil
}

func parentOf(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
}

// Close ends the session.
func (c *Client) Close() { c.conn.Close() }

// Do runs one synchronous operation and times it.
func (c *Client) Do(op store.Op) store.Sample {
	s := store.Sample{Server: c.server, Op: op, Start: time.Now()}
	var err error
	switch op {
	case store.Read:
		var b []byte
		b, _, err = c.conn.Get(c.path)
		if err == nil && len(b) != len(c.data) {
			err = fmt.Errorf("read %d bytes, want %d", len(b), len(c.data))
		}
	case store.Write:
		_, err = c.conn.Set(c.path, c.data, -1)
	default:
		err = fmt.Errorf("unknown operation %q", op)
	}
	s.Latency = time.Since(s.Start)
	if err != nil {
		s.Err = err.Error()
	}
	return s
}
