package tcpterm

import (
	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/proxy"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/router"
)

// poolRouter adapts a pool to proxy.Router for one Feed: a key's shard
// (its ring owner, or the failover) and of the shard its first usable
// replica (a pool without replicas has one server per shard); writes go
// to every usable replica (Replicas); reads go to the replica the pool's
// chooser picks (Read), and the exploring copies it asks for are noted
// for the shell to send (explores).
type poolRouter struct {
	p   *router.Pool
	now int64
	// explores are the exploring copies of this Feed's reads: a get of
	// the key to another replica, whose reply only feeds the chooser.
	explores []explore
	keys     []byte
}

// explore is an exploring copy of a read: its server and its key (in
// poolRouter.keys).
type explore struct {
	server   int
	off, len int
}

func (r *poolRouter) Owner(key []byte) int {
	p := r.p
	o := p.Owner(key)
	if o < 0 || o >= len(p.Shards) {
		return -1
	}
	for _, j := range p.Shards[o].Replicas {
		if p.Servers[j].Usable() && !p.Drained[j] {
			return j
		}
	}
	return -1
}

// Read gives the replica a read of key goes to (proxy.Reader).
func (r *poolRouter) Read(key []byte) int {
	rc := r.p.ChooseRead(key, r.now)
	if rc.Explore >= 0 && textKey(key) {
		r.explores = append(r.explores, explore{server: rc.Explore, off: len(r.keys), len: len(key)})
		r.keys = append(r.keys, key...)
	}
	return rc.Server
}

// textKey reports whether key can be sent in an ASCII get.
func textKey(key []byte) bool {
	if len(key) == 0 || len(key) > memcache.MaxKeyLen {
		return false
	}
	for _, c := range key {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// Replicas gives the other usable replicas of server o's shard, to which
// a write also goes (proxy.Replicated).
func (r *poolRouter) Replicas(o int, dst []int) []int {
	p := r.p
	if !p.Replicated() {
		return dst
	}
	sh := p.Servers[o].Shard
	if sh < 0 || sh >= len(p.Shards) {
		return dst
	}
	for _, j := range p.Shards[sh].Replicas {
		if j != o && p.Servers[j].Usable() && !p.Drained[j] {
			dst = append(dst, j)
		}
	}
	return dst
}

func (r *poolRouter) Any() int {
	for i, s := range r.p.Servers {
		if s.Usable() && !r.p.Drained[i] {
			return i
		}
	}
	return -1
}

// exploreSends appends to sends an ASCII get for each exploring copy
// the last Feed asked for, with arena holding their bytes. Their tokens
// have no session: the reply goes to the chooser only.
func (r *poolRouter) exploreSends(arena []byte, sends []proxy.Send) ([]byte, []proxy.Send) {
	for _, e := range r.explores {
		off := len(arena)
		arena = append(arena, "get "...)
		arena = append(arena, r.keys[e.off:e.off+e.len]...)
		arena = append(arena, "\r\n"...)
		sends = append(sends, proxy.Send{Server: e.server, Read: true, Buf: arena[off:len(arena):len(arena)]})
	}
	r.explores, r.keys = r.explores[:0], r.keys[:0]
	return arena, sends
}

// reqMeta is what a server connection knows of a request it wrote, in
// the order of its proxy.Upstream's queue: for a read of a replicated
// pool, what the chooser needs when its reply has come.
type reqMeta struct {
	pool    *router.Pool // nil: not a read of a replicated pool
	server  int
	hash    uint32
	sent    int64
	first   int64 // when the reply's first bytes arrived (0 before)
	firstN  int   // its bytes that arrived then
	bytes   int
	segs    int // reads of the connection the reply took
	started bool
}

// readMeta returns the record of a request sent to server j of p at now,
// telling the pool of a read (an exploring copy when it has no session,
// a hedge when it is a second copy).
func readMeta(p *router.Pool, snd proxy.Send, now int64) reqMeta {
	if !snd.Read || !p.Replicated() {
		return reqMeta{}
	}
	why := router.ReadChosen
	switch {
	case snd.Token.S == nil:
		why = router.ReadExplore
	case snd.Token.Part > 0:
		why = router.ReadHedge
	}
	p.ReadSent(snd.Server, why)
	return reqMeta{pool: p, server: snd.Server, hash: sendHash(snd.Buf), sent: now}
}

// sendHash is the key hash of a request of one key (0 otherwise).
func sendHash(buf []byte) uint32 {
	var q memcache.Request
	if memcache.Parse(buf, &q) != nil || q.NumKeys != 1 {
		return 0
	}
	k := q.Key()
	if q.Base64Key {
		var kb [memcache.MaxKeyLen]byte
		var err error
		if k, err = memcache.DecodeKey(kb[:], k); err != nil {
			return 0
		}
	}
	return router.KeyHash(k)
}

// replyTimer times the replies of one server connection (not safe for
// concurrent use; the connection's lock guards it).
type replyTimer struct {
	q     []reqMeta // q[first:] wait, in the order written
	first int
}

func (rt *replyTimer) push(m reqMeta) { rt.q = append(rt.q, m) }

func (rt *replyTimer) head() *reqMeta {
	if rt.first == len(rt.q) {
		return nil
	}
	return &rt.q[rt.first]
}

// read notes that n bytes arrived at now, before the Upstream frames
// them: they start or continue the reply of the request at the head.
func (rt *replyTimer) read(now int64) {
	if h := rt.head(); h != nil {
		rt.begin(h, now)
	}
}

// begin notes that h's reply is arriving at now.
func (rt *replyTimer) begin(h *reqMeta, now int64) {
	if !h.started {
		h.started, h.first = true, now
	}
	h.segs++
}

// piece takes a piece of the head's reply, framed at now; done ends it:
// the chooser gets the reply, and the next request's reply, if more of
// this read follows, begins now.
func (rt *replyTimer) piece(d proxy.Delivery, now int64) {
	h := rt.head()
	if h == nil {
		return
	}
	if !h.started {
		rt.begin(h, now) // the reply behind one that ended in this read
	}
	h.bytes += len(d.Piece)
	if h.segs == 1 {
		h.firstN += len(d.Piece)
	}
	if !d.Done {
		return
	}
	if h.pool != nil {
		h.pool.ObserveRead(h.server, h.hash, replica.Reply{Sent: h.sent, First: h.first, Last: now,
			Bytes: h.bytes, FirstBytes: min(h.firstN, h.bytes), Dgms: h.segs}, now)
	}
	rt.q[rt.first] = reqMeta{}
	rt.first++
	if rt.first == len(rt.q) {
		rt.q, rt.first = rt.q[:0], 0
	} else if rt.first >= 64 && rt.first >= len(rt.q)/2 {
		n := copy(rt.q, rt.q[rt.first:])
		rt.q, rt.first = rt.q[:n], 0
	}
}

// settle ends a read of the connection: the head's reply, if it began
// in this read, had its first bytes then (those framed and those still
// buffered); a head whose reply has not begun is left alone.
func (rt *replyTimer) settle(buffered int, now int64) {
	h := rt.head()
	if h == nil || buffered == 0 {
		return
	}
	if !h.started {
		rt.begin(h, now)
	}
	if h.segs == 1 {
		h.firstN += buffered
	}
}

// abandon tells the pools that the replies still awaited will not come.
func (rt *replyTimer) abandon() {
	for _, m := range rt.q[rt.first:] {
		if m.pool != nil {
			m.pool.GiveUpRead(m.server)
		}
	}
	rt.q, rt.first = nil, 0
}
