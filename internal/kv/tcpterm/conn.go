package tcpterm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/kv/proxy"
	"github.com/detour-overlay/detour/internal/kv/router"
)

// client is one client connection: a reader that feeds the session and
// sends its requests, and a writer that hands the client its replies.
type client struct {
	t    *Terminator
	ctx  context.Context // the terminator's: ends its dials and hedges
	conn net.Conn
	vip  netip.AddrPort
	from netip.Addr

	mu sync.Mutex // guards s
	s  proxy.Session

	wake chan struct{} // replies to write
	room chan struct{} // the session takes input again
	done atomic.Bool

	// pinned is the server connection each server's requests of this
	// client take: requests of one client to one server go over one
	// connection, so memcached runs them in the client's order (a get
	// after a set sees the set). pmu guards it: the reader and the
	// hedges dispatch.
	pmu    sync.Mutex
	pinned map[upKey]*upConn
	// pr routes the session's requests (used by the reader only).
	pr poolRouter
}

// kick wakes the writer.
func (c *client) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// close ends the connection once.
func (c *client) close() {
	if c.done.CompareAndSwap(false, true) {
		c.conn.Close()
		c.kick()
		select {
		case c.room <- struct{}{}:
		default:
		}
	}
}

// read feeds the session the client's bytes until the connection ends.
func (c *client) read(ctx context.Context) {
	defer c.kick()
	buf := make([]byte, 32<<10)
	var arena []byte
	var sends []proxy.Send
	for !c.done.Load() {
		c.mu.Lock()
		for !c.s.WantInput() && !c.done.Load() {
			if c.s.Closing() {
				c.mu.Unlock()
				return // the writer closes once the last replies have left
			}
			c.mu.Unlock()
			select {
			case <-c.room:
			case <-ctx.Done():
				c.close()
				return
			}
			c.mu.Lock()
		}
		var in []byte
		if !c.s.Backlog() {
			c.mu.Unlock()
			_ = c.conn.SetReadDeadline(time.Now().Add(c.t.cfg.ClientIdle))
			n, err := c.conn.Read(buf)
			if err != nil && n == 0 {
				if isTimeout(err) && c.waiting() {
					continue
				}
				if errors.Is(err, io.EOF) {
					// The client closed its side: answer what it sent.
					c.mu.Lock()
					c.s.End()
					c.mu.Unlock()
					return
				}
				c.close()
				return
			}
			in = buf[:n]
			c.mu.Lock()
		}
		p := c.t.pool(c.vip)
		if p == nil {
			c.mu.Unlock()
			c.close()
			return
		}
		before := c.s.Stats
		c.pr.p, c.pr.now = p, c.t.cfg.Now()
		arena, sends = copySends(arena[:0], sends[:0], c.s.Feed(in, &c.pr))
		arena, sends = c.pr.exploreSends(arena, sends)
		c.count(before, c.s.Stats)
		ready := c.s.Pending() > 0 || c.s.Closed()
		c.mu.Unlock()
		c.dispatch(ctx, p, sends)
		if ready {
			c.kick() // replies the session made itself (mn, errors)
		}
	}
}

// isTimeout reports whether err is a deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waiting reports whether requests wait for their replies.
func (c *client) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s.Waiting() > 0
}

// count adds what one Feed did to the terminator's counters.
func (c *client) count(a, b proxy.Stats) {
	st := &c.t.stats
	st.Requests.Add(b.Requests - a.Requests)
	st.Split.Add(b.Split - a.Split)
	st.Errors.Add(b.Errors - a.Errors)
	st.NoServer.Add(b.NoServer - a.NoServer)
}

// copySends copies the requests Feed returned, whose buffers the next
// Feed reuses, into arena.
func copySends(arena []byte, dst, src []proxy.Send) ([]byte, []proxy.Send) {
	n := 0
	for _, s := range src {
		n += len(s.Buf)
	}
	if cap(arena) < n {
		arena = make([]byte, 0, n)
	}
	for _, s := range src {
		off := len(arena)
		arena = append(arena, s.Buf...)
		s.Buf = arena[off:len(arena):len(arena)]
		dst = append(dst, s)
	}
	return arena, dst
}

// write hands the client its replies as they complete, and closes the
// connection after the last one when the session ends.
func (c *client) write() {
	var out []byte
	for {
		<-c.wake
		c.mu.Lock()
		out = append(out[:0], c.s.Output()...)
		closed, want := c.s.Closed(), c.s.WantInput() || c.s.Closing()
		c.mu.Unlock()
		if want {
			select {
			case c.room <- struct{}{}:
			default:
			}
		}
		if len(out) > 0 && !c.done.Load() {
			_ = c.conn.SetWriteDeadline(time.Now().Add(c.t.cfg.ClientIdle))
			if _, err := c.conn.Write(out); err != nil {
				c.close()
			}
		}
		if closed {
			c.close()
		}
		if c.done.Load() {
			return
		}
	}
}

// failTokens answers the slots of tokens with SERVER_ERROR (an
// exploring copy's token has no slot).
func failTokens(toks []proxy.Token) {
	for _, tok := range toks {
		if tok.S == nil {
			continue
		}
		c := tok.S.Tag.(*client)
		c.mu.Lock()
		tok.S.Fail(tok)
		c.mu.Unlock()
		c.kick()
	}
}

// upKey names the pooled connections from a virtual address to a server
// in one protocol family.
type upKey struct {
	vip    netip.Addr
	server netip.AddrPort
	binary bool
}

// upConn is one pooled connection to a server.
type upConn struct {
	t    *Terminator
	key  upKey
	conn net.Conn
	// srv is the server's state in the router's table, which records
	// requests and replies for passive failure detection.
	srv *router.Server

	wmu  sync.Mutex // writers, in the order their requests were queued
	mu   sync.Mutex // u and rt
	u    proxy.Upstream
	rt   replyTimer // times the replies to reads of replicated pools
	dead bool
	wbuf []byte
	last atomic.Int64 // when it was last used (unix ns)
}

// ReplyTimeout fails a server connection that owes replies and has sent
// nothing for this long.
const ReplyTimeout = 5 * time.Second

// dispatch sends the client's requests, in order, over its connections
// to their servers; a request whose server cannot be reached is answered
// with SERVER_ERROR.
func (c *client) dispatch(ctx context.Context, p *router.Pool, sends []proxy.Send) {
	t := c.t
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for len(sends) > 0 {
		srv := p.Servers[sends[0].Server]
		key := upKey{vip: p.VIP.Addr(), server: srv.Addr, binary: sends[0].Binary}
		n := 1
		for n < len(sends) && sends[n].Server == sends[0].Server && sends[n].Binary == sends[0].Binary {
			n++
		}
		group := sends[:n]
		sends = sends[n:]
		sent := false
		for try := 0; try < 2 && !sent; try++ {
			uc := c.pinned[key]
			if uc == nil {
				var err error
				if uc, err = t.upstream(ctx, key, srv); err != nil {
					srv.TCPRequest(t.cfg.Now()) // unanswered: passive detection counts it
					break
				}
				if c.pinned == nil {
					c.pinned = map[upKey]*upConn{}
				}
				c.pinned[key] = uc
			}
			if sent = uc.send(p, group); !sent {
				delete(c.pinned, key) // it died: the next one takes over
			}
		}
		if !sent {
			toks := make([]proxy.Token, len(group))
			for i, s := range group {
				toks[i] = s.Token
			}
			t.stats.Failed.Add(uint64(len(toks)))
			failTokens(toks)
		}
	}
}

// armHedge arms, for a read of a pool that hedges (the key's hash h), a
// timer at the chosen replica's p95 fetch time: a read of which nothing
// has come by then is copied to the next best replica (hedge). Only the
// chosen copy of a client's read is hedged.
func armHedge(p *router.Pool, snd proxy.Send, h uint32) {
	if snd.Token.S == nil || snd.Token.Part != 0 || h == 0 {
		return
	}
	wait, ok := p.ReadHedgeAfter(snd.Server, h)
	if !ok {
		return
	}
	snd.Buf = bytes.Clone(snd.Buf) // the reader reuses its arena
	cl := snd.Token.S.Tag.(*client)
	time.AfterFunc(time.Duration(wait), func() { cl.hedge(p, snd, h) })
}

// hedge sends a copy of a read of which nothing has come yet to the next
// best replica, when the pool's hedge budget allows; the first copy to
// answer is the client's (proxy.Session.Hedge).
func (c *client) hedge(p *router.Pool, snd proxy.Send, h uint32) {
	if c.done.Load() {
		return
	}
	c.mu.Lock()
	if !c.s.Unanswered(snd.Token) {
		c.mu.Unlock()
		return
	}
	j := p.HedgeRead(snd.Server, h)
	if j < 0 {
		c.mu.Unlock()
		return
	}
	snd.Server, snd.Token = j, c.s.Hedge(snd.Token)
	c.mu.Unlock()
	c.dispatch(c.ctx, p, []proxy.Send{snd})
}

// upstream returns a pooled connection for key: the least busy one, or a
// new one while there are fewer than ConnsPerServer and all are busy.
func (t *Terminator) upstream(ctx context.Context, key upKey, srv *router.Server) (*upConn, error) {
	t.mu.Lock()
	var best *upConn
	bestWait := 0
	for _, c := range t.ups[key] {
		if w := c.waiting(); best == nil || w < bestWait {
			best, bestWait = c, w
		}
	}
	full := len(t.ups[key]) >= t.cfg.ConnsPerServer
	t.mu.Unlock()
	if best != nil && (bestWait == 0 || full) {
		return best, nil
	}
	dctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	conn, err := t.ns.dial(dctx, key.vip, key.server)
	cancel()
	if err != nil {
		t.stats.DialFailures.Add(1)
		t.cfg.Log.Debug("kv tcp: dial", "server", key.server, "err", err)
		if best != nil {
			return best, nil
		}
		return nil, err
	}
	t.stats.Dials.Add(1)
	t.stats.ServerConns.Add(1)
	c := &upConn{t: t, key: key, conn: conn, srv: srv}
	c.u.Binary = key.binary
	c.last.Store(time.Now().UnixNano())
	t.mu.Lock()
	t.ups[key] = append(t.ups[key], c)
	t.mu.Unlock()
	go c.read()
	return c, nil
}

// waiting returns the number of requests waiting on the connection.
func (c *upConn) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.u.Waiting()
}

// send queues and writes requests of pool p; false when the connection
// is dead (nothing was queued).
func (c *upConn) send(p *router.Pool, sends []proxy.Send) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return false
	}
	c.wbuf = c.wbuf[:0]
	now := c.t.cfg.Now()
	for _, s := range sends {
		c.wbuf = c.u.Append(c.wbuf, s)
		m := readMeta(p, s, now)
		c.rt.push(m)
		c.srv.TCPRequest(now)
		if m.pool != nil && p.Hedge {
			armHedge(p, s, m.hash)
		}
	}
	c.mu.Unlock()
	c.last.Store(time.Now().UnixNano())
	_ = c.conn.SetWriteDeadline(time.Now().Add(ReplyTimeout))
	if _, err := c.conn.Write(c.wbuf); err != nil {
		c.fail()
	}
	return true
}

// read hands the server's replies to their sessions until the connection
// ends or breaks.
func (c *upConn) read() {
	buf := make([]byte, 64<<10)
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(ReplyTimeout))
		n, err := c.conn.Read(buf)
		if n > 0 {
			c.mu.Lock()
			now := c.t.cfg.Now()
			c.srv.TCPProgress(now)
			c.rt.read(now)
			dels, ferr := c.u.Feed(buf[:n])
			for _, d := range dels {
				if d.Done {
					c.srv.TCPReply(now)
				}
				c.rt.piece(d, now)
				if d.Token.S == nil {
					continue // an exploring copy: its reply only fed the chooser
				}
				cl := d.Token.S.Tag.(*client)
				cl.mu.Lock()
				d.Token.S.Reply(d.Token, d.Piece, d.Kind, d.Done)
				cl.mu.Unlock()
				cl.kick()
			}
			c.rt.settle(c.u.Buffered(), now)
			c.mu.Unlock()
			if ferr != nil {
				c.t.stats.BadReplies.Add(1)
				c.fail()
				return
			}
		}
		if err != nil {
			if isTimeout(err) && c.waiting() == 0 {
				continue
			}
			c.fail()
			return
		}
	}
}

// fail closes the connection, forgets it, and fails the requests that
// waited on it.
func (c *upConn) fail() {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	toks := c.u.Abandon()
	c.rt.abandon()
	c.mu.Unlock()
	c.conn.Close()
	t := c.t
	t.mu.Lock()
	cs := t.ups[c.key]
	for i, o := range cs {
		if o == c {
			t.ups[c.key] = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(t.ups[c.key]) == 0 {
		delete(t.ups, c.key)
	}
	t.mu.Unlock()
	t.stats.ServerConns.Add(-1)
	t.stats.Failed.Add(uint64(len(toks)))
	failTokens(toks)
}

// reapServers closes server connections unused for ServerIdle.
func (t *Terminator) reapServers(now time.Time) {
	var idle []*upConn
	t.mu.Lock()
	for _, cs := range t.ups {
		for _, c := range cs {
			if now.UnixNano()-c.last.Load() > int64(t.cfg.ServerIdle) && c.waiting() == 0 {
				idle = append(idle, c)
			}
		}
	}
	t.mu.Unlock()
	for _, c := range idle {
		c.fail()
	}
}
