package router

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/ring"
)

// Replicated pools (issue 18). A shard of a pool may have several
// replicas. A read goes to the replica the pool's policy picks
// (replica.Chooser: by default the lowest predicted fetch time), possibly
// also to a second one whose estimate is stale (exploration) and, when
// unanswered after the first's p95, to the next best (a hedge). A write
// goes to every usable replica. The client sees one reply: the first
// datagram of a request to arrive decides which replica's reply is
// forwarded, and the others' are dropped at the client's gateway.
//
// To match replies to requests, measure service times and drop the
// duplicates, the pool keeps bounded soft state per request
// (PendingSlots entries, by client address, port and the memcached
// request id) and per key a value size (sizeSlots entries, by a hash of
// the key: learnt from writes and reply sizes). Both live under the
// pool's mutex, which also guards the choosers; the data path takes it
// once per request and once per reply datagram of a replicated shard.
// Pools whose shards all have one replica have none of this state and
// take no lock.

// Bounds of the soft state of replicated pools.
const (
	// PendingSlots is the number of requests a replicated pool tracks.
	PendingSlots = 4096
	// PendingTTL is how long a request is awaited (ns); an entry older
	// than this is given up (counted as expired).
	PendingTTL = int64(2e9)
	// pendingProbe is how many slots a request's hash may take.
	pendingProbe = 4
	// sizeSlots is the size of the table of value sizes by key hash.
	sizeSlots = 1 << 16
	// NearbyRTT: without near_sites, a replica whose path round trip is
	// below this counts as nearby in the metrics (ns).
	NearbyRTT = int64(30e6)
	// maxHedges bounds the reads a Worker holds for hedging at once, and
	// hedgesPerFrame those it sends while handling one frame (the rest
	// wait for the next), so that the frame's own outputs find buffers.
	maxHedges      = 32
	hedgesPerFrame = 8
	// expireBatch is how many entries one call of Expire looks at.
	expireBatch = 512
)

// Shard is one entry of a pool's ring with its replicas.
type Shard struct {
	// Name is the ketama name ("" when it is the first replica's
	// address); Weight its share of the keys.
	Name   string
	Weight uint32
	// Replicas are indexes into Pool.Servers, in configuration order.
	Replicas []int
	// chooser picks among the replicas; nil for a shard of one.
	chooser *replica.Chooser
}

// repState is a replicated pool's soft state (see above).
type repState struct {
	mu      sync.Mutex
	budget  *replica.Budget
	hasNear bool
	pend    []pending
	sizes   []uint32 // key-hash tag (8 bits) << 24 | size (24 bits)
	sweep   int
}

// copyState is one copy of a request: the replica it went to and what
// came back.
type copyState struct {
	rep                  int8 // index among the shard's replicas
	hedge, explore, done bool
	sent, first, last    int64
	bytes, firstBytes    int32
	seen, total          uint16
}

// pending is one request awaiting replies.
type pending struct {
	ip      uint32
	port    uint16
	id      uint16
	used    bool
	write   bool
	winner  int8 // index in copies of the copy forwarded, -1 before any
	n       uint8
	shard   uint16
	size    int32 // size the read was predicted for
	keyHash uint32
	sent    int64
	copies  [replica.MaxReplicas]copyState
}

// buildShards makes the pool's shards from ps and returns the ring's
// entries; with old (the pool this one replaces) a replicated pool keeps
// its soft state and estimates.
func (p *Pool) buildShards(ps PoolSpec, old *Pool) ([]ring.Server, error) {
	var rs []ring.Server
	if len(ps.Shards) == 0 {
		for i, s := range ps.Servers {
			p.Shards = append(p.Shards, &Shard{Weight: s.Weight, Replicas: []int{i}})
			rs = append(rs, ring.Server{Host: s.Addr.Addr().String(), Port: s.Addr.Port(), Weight: s.Weight})
			p.Servers[i].setPlace(i, 0)
		}
		return rs, nil
	}
	for _, sh := range ps.Shards {
		p.Shards = append(p.Shards, &Shard{Name: sh.Name, Weight: sh.Weight})
	}
	for j, s := range ps.Servers {
		if s.Shard < 0 || s.Shard >= len(p.Shards) {
			return nil, fmt.Errorf("router: pool %s: server %v of shard %d, which does not exist", ps.Name, s.Addr, s.Shard)
		}
		sh := p.Shards[s.Shard]
		p.Servers[j].setPlace(s.Shard, len(sh.Replicas))
		sh.Replicas = append(sh.Replicas, j)
	}
	replicated := false
	for k, sh := range p.Shards {
		switch n := len(sh.Replicas); {
		case n == 0:
			return nil, fmt.Errorf("router: pool %s: shard %d has no replica", ps.Name, k)
		case n > replica.MaxReplicas:
			return nil, fmt.Errorf("router: pool %s: shard %d has %d replicas, at most %d", ps.Name, k, n, replica.MaxReplicas)
		case n > 1:
			replicated = true
		}
		first := p.Servers[sh.Replicas[0]]
		rs = append(rs, ring.Server{Host: first.Addr.Addr().String(), Port: first.Addr.Port(), Weight: sh.Weight, Name: sh.Name})
	}
	if !replicated {
		return rs, nil
	}
	if old != nil && old.rep != nil && len(old.Shards) == len(p.Shards) {
		p.rep = old.rep
		for k, sh := range p.Shards {
			sh.chooser = old.Shards[k].chooser
		}
		return rs, nil
	}
	params := replica.DefaultParams()
	p.rep = &repState{budget: replica.NewBudget(params), hasNear: len(ps.NearSites) > 0,
		pend: make([]pending, PendingSlots), sizes: make([]uint32, sizeSlots)}
	paths := map[uint32]*replica.Path{} // one per site: replicas there share the path
	for _, sh := range p.Shards {
		if len(sh.Replicas) < 2 {
			continue
		}
		sh.chooser = replica.New(ps.Policy, params, len(sh.Replicas), p.rep.budget)
		for k, j := range sh.Replicas {
			s := p.Servers[j]
			r := &sh.chooser.Replicas[k]
			r.Local, r.Near = s.Local, s.near
			if paths[uint32(s.Site)] == nil {
				paths[uint32(s.Site)] = &replica.Path{}
			}
			r.Path = paths[uint32(s.Site)]
		}
	}
	return rs, nil
}

// setPlace records the server's shard and its index among the shard's
// replicas. A *Server kept across a rebuild of its table is written only
// when its place changed (a pool without replicas, whose data path never
// reads it), so the data path of the table in force reads no field being
// written.
func (s *Server) setPlace(shard, rep int) {
	if s.Shard != shard || s.Replica != rep {
		s.Shard, s.Replica = shard, rep
	}
}

// Replicated reports whether some shard of the pool has several replicas.
func (p *Pool) Replicated() bool { return p.rep != nil }

// SetPathRTT records the round trip of the path the overlay uses to the
// server's site (ns), for the prediction of its fetch time.
func (s *Server) SetPathRTT(ns int64) { s.rtt.Store(ns) }

// PathRTT returns the path round trip last set (0 for this site's).
func (s *Server) PathRTT() int64 {
	if s.Local {
		return 0
	}
	return s.rtt.Load()
}

// syncChooser copies the replicas' health and path round trips into the
// shard's chooser; a replica of this site whose MAC is not known yet is
// not usable (a read sent there would be dropped), and the agent is asked
// to learn it. The caller holds the pool's lock.
func (p *Pool) syncChooser(sh *Shard) {
	for k, j := range sh.Replicas {
		r := &sh.chooser.Replicas[k]
		s := p.Servers[j]
		r.Usable = p.serverUsable(j)
		if r.Usable && s.Local && s.mac.Load() == 0 {
			r.Usable = false
			s.needARP.Store(true)
		}
		r.Trial = !r.Usable && p.trialArmed(j)
		r.RTT = s.PathRTT()
	}
}

// trialArmed reports whether server j is down with a readmission trial
// armed (Server.ArmTrial), its site reachable and not drained.
func (p *Pool) trialArmed(j int) bool {
	s := p.Servers[j]
	return !p.Drained[j] && s.down.Load() && !s.siteDown.Load() && s.trial.Load() == trialArmed
}

// choose runs shard sh's chooser for a read of size bytes at now, with
// no second copy unless second, and marks the trial of a replica it
// sends the read to while down as taken (Replica.Trial). The caller
// holds p.rep.mu.
func (p *Pool) choose(sh *Shard, size int, now int64, second bool) replica.Decision {
	c := sh.chooser
	d := c.Choose(size, now)
	if !second {
		d.Explore = -1
	}
	for _, k := range [2]int{d.Primary, d.Explore} {
		if k >= 0 && !c.Replicas[k].Usable {
			p.Servers[sh.Replicas[k]].trial.CompareAndSwap(trialArmed, trialTaken)
		}
	}
	return d
}

// countRead counts a read sent to server s by where it is.
func (p *Pool) countRead(s *Server) {
	switch {
	case s.Local:
		p.Stats.ReadsLocal.Add(1)
	case s.near || (p.rep != nil && !p.rep.hasNear && s.PathRTT() > 0 && s.PathRTT() < NearbyRTT):
		p.Stats.ReadsNearby.Add(1)
	default:
		p.Stats.ReadsRemote.Add(1)
	}
}

// keyHash is FNV-1a of a key.
func keyHash(k []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range k {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}

// sizeOf returns the value size last seen for a key hash, or ok false.
func (rs *repState) sizeOf(h uint32) (int, bool) {
	v := rs.sizes[h&(sizeSlots-1)]
	if v == 0 || v>>24 != h>>24|1 {
		return 0, false
	}
	return int(v & 0xffffff), true
}

// setSize records a value size for a key hash.
func (rs *repState) setSize(h uint32, n int) {
	rs.sizes[h&(sizeSlots-1)] = (h>>24|1)<<24 | uint32(min(n, 0xffffff))
}

// pendIndex hashes a request's key.
func pendIndex(ip uint32, port, id uint16) int {
	h := (uint64(ip)<<32 | uint64(port)<<16 | uint64(id)) * 0x9e3779b97f4a7c15
	return int(h >> 40 & (PendingSlots - 1))
}

// find returns the entry of a request, or nil.
func (rs *repState) find(ip uint32, port, id uint16) *pending {
	start := pendIndex(ip, port, id)
	for i := 0; i < pendingProbe; i++ {
		e := &rs.pend[(start+i)&(PendingSlots-1)]
		if e.used && e.ip == ip && e.port == port && e.id == id {
			return e
		}
	}
	return nil
}

// insert returns a fresh entry for a request: its old entry (the client
// reused the id), a free or expired slot, or the oldest of the slots its
// hash may take, evicted.
func (rs *repState) insert(p *Pool, ip uint32, port, id uint16, now int64) *pending {
	start := pendIndex(ip, port, id)
	var victim *pending
	for i := 0; i < pendingProbe; i++ {
		e := &rs.pend[(start+i)&(PendingSlots-1)]
		if !e.used || (e.ip == ip && e.port == port && e.id == id) {
			victim = e
			break
		}
		if now-e.sent > PendingTTL {
			victim = e
			break
		}
		if victim == nil || e.sent < victim.sent {
			victim = e
		}
	}
	if victim.used {
		if rs.release(p, victim) {
			if now-victim.sent > PendingTTL {
				p.Stats.PendingExpired.Add(1)
			} else {
				p.Stats.PendingEvicted.Add(1)
			}
		}
	}
	*victim = pending{ip: ip, port: port, id: id, used: true, winner: -1, sent: now}
	return victim
}

// release frees an entry, giving up its unanswered reads; it reports
// whether some copy was still awaited.
func (rs *repState) release(p *Pool, e *pending) bool {
	awaited := false
	for k := range e.copies[:e.n] {
		c := &e.copies[k]
		if c.done {
			continue
		}
		awaited = true
		if sh := p.Shards[e.shard]; !e.write && sh.chooser != nil {
			sh.chooser.GiveUp(int(c.rep))
		}
	}
	e.used = false
	return awaited
}

// addCopy records a copy of e sent to replica rep.
func (e *pending) addCopy(rep int, now int64, hedge, explore bool) {
	if int(e.n) >= len(e.copies) {
		return
	}
	e.copies[e.n] = copyState{rep: int8(rep), sent: now, hedge: hedge, explore: explore}
	e.n++
}

// Expire gives up the requests awaited longer than PendingTTL, looking
// at expireBatch entries per call (the agent calls it every 25 ms), so
// that replies that never came stop counting as outstanding.
func (p *Pool) Expire(now int64) {
	rs := p.rep
	if rs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i := 0; i < expireBatch; i++ {
		e := &rs.pend[rs.sweep]
		rs.sweep = (rs.sweep + 1) & (PendingSlots - 1)
		if e.used && now-e.sent > PendingTTL && rs.release(p, e) {
			p.Stats.PendingExpired.Add(1)
		}
	}
}

// reqInfo is what routeShard needs of the request.
type reqInfo struct {
	write, quiet, track bool
	id                  uint16
	key                 []byte
	valueLen            int
}

// routeShard sends a request for shard o of a replicated pool: a read to
// the replica the policy picks (and maybe one more, to refresh its
// estimate), a write to every usable replica. The request frame b,
// parsed in f, is rewritten in place for the last copy when inPlace.
func (w *Worker) routeShard(t *Table, p *Pool, f *frame.Frame, b []byte, inPlace bool, o int, ri reqInfo, now int64) {
	sh := p.Shards[o]
	rs := p.rep
	ip := f.IPv4(b)
	src := be32b(ip.Src())
	sport := binary.BigEndian.Uint16(b[f.L4:])
	track := ri.track && !ri.quiet
	var targets [replica.MaxReplicas]int
	n := 0
	rs.mu.Lock()
	p.syncChooser(sh)
	c := sh.chooser
	var e *pending
	if track {
		e = rs.insert(p, src, sport, ri.id, now)
		e.shard, e.write = uint16(o), ri.write
	}
	h := keyHash(ri.key)
	if ri.write {
		if ri.key != nil && ri.valueLen > 0 {
			rs.setSize(h, ri.valueLen)
		}
		for k, j := range sh.Replicas {
			if p.serverUsable(j) {
				targets[n] = k
				n++
				if e != nil {
					e.addCopy(k, now, false, false)
				}
			}
		}
		p.Stats.WritesReplicas.Add(uint64(n))
	} else {
		size, ok := rs.sizeOf(h)
		if !ok || ri.key == nil {
			size = c.TypicalSize()
		}
		d := p.choose(sh, size, now, track)
		if d.Primary >= 0 {
			targets[n] = d.Primary
			n++
			if e != nil {
				c.Sent(d.Primary)
				e.keyHash, e.size = h, int32(size)
				e.addCopy(d.Primary, now, false, false)
			}
			if d.Explore >= 0 {
				targets[n] = d.Explore
				n++
				c.Sent(d.Explore)
				e.addCopy(d.Explore, now, false, true)
				p.Stats.Explorations.Add(1)
			}
			if e != nil && p.Hedge {
				if wait, ok := c.HedgeAfter(d.Primary, size); ok {
					w.queueHedge(p, src, sport, ri.id, now+wait, b)
				}
			}
		}
	}
	if e != nil && e.n == 0 {
		e.used = false
	}
	rs.mu.Unlock()
	if n == 0 {
		p.Stats.DropNoServer.Add(1)
		return
	}
	// Copies first, from the frame as it came; the first target (a
	// read's primary) is sent last, as the frame itself when inPlace.
	for i := n - 1; i >= 0; i-- {
		j := sh.Replicas[targets[i]]
		if !ri.write && i == 0 {
			p.countRead(p.Servers[j])
		}
		if i == 0 && inPlace {
			w.send(t, p, f, b, true, j, ri.quiet, now)
			continue
		}
		nb := w.take(len(b))
		if nb == nil {
			p.Stats.DropOther.Add(1)
			continue
		}
		copy(nb, b)
		w.send(t, p, f, nb, false, j, ri.quiet, now)
	}
}

// reply records a datagram of server s's reply to client cip:cport of a
// replicated pool and reports whether to forward it to the client: the
// first replica to answer a request is forwarded, the others' datagrams
// are dropped. matched is false when no entry of the pool awaits the
// datagram (fwd is then true).
func (p *Pool) reply(s *Server, cip uint32, cport uint16, payload []byte, now int64) (fwd, matched bool) {
	rs := p.rep
	if rs == nil || len(payload) < memcache.FrameHeaderLen || p.Shards[s.Shard].chooser == nil {
		return true, false
	}
	id := binary.BigEndian.Uint16(payload[0:])
	total := binary.BigEndian.Uint16(payload[4:])
	n := int32(len(payload) - memcache.FrameHeaderLen)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	e := rs.find(cip, cport, id)
	if e == nil || int(e.shard) != s.Shard {
		return true, false
	}
	k := -1
	for i := range e.copies[:e.n] {
		if int(e.copies[i].rep) == s.Replica {
			k = i
			break
		}
	}
	if k < 0 {
		// A replica this request did not go to: a late reply to an
		// earlier request of the client under the same id, which the
		// client must not take for this one's.
		p.Stats.DupReplies.Add(1)
		return false, true
	}
	c := &e.copies[k]
	if c.seen == 0 {
		c.first, c.firstBytes = now, n
	}
	c.last, c.total = now, total
	c.seen++
	c.bytes += n
	if !c.done && c.seen >= max(c.total, 1) {
		c.done = true
		if !e.write {
			ch := p.Shards[e.shard].chooser
			ch.Observe(int(c.rep), replica.Reply{Sent: c.sent, First: c.first, Last: c.last,
				Bytes: int(c.bytes), FirstBytes: int(c.firstBytes), Dgms: int(c.seen)}, now)
			if e.keyHash != 0 {
				rs.setSize(e.keyHash, int(c.bytes))
			}
		}
	}
	switch {
	case e.winner < 0:
		e.winner, fwd = int8(k), true
		if c.hedge {
			p.Stats.HedgesWon.Add(1)
		}
	case int(e.winner) == k:
		fwd = true
	default:
		p.Stats.DupReplies.Add(1)
	}
	done := true
	for i := range e.copies[:e.n] {
		done = done && e.copies[i].done
	}
	if done {
		e.used = false
	}
	return fwd, true
}

// hedgeSlot is a read held by a Worker in case it must be hedged: the
// request frame as the client sent it.
type hedgeSlot struct {
	pool *Pool
	ip   uint32
	port uint16
	id   uint16
	due  int64
	buf  []byte
	n    int
	used bool
}

// queueHedge holds a copy of the read frame b to hedge at due unless it
// is answered by then; with every slot taken the read is not hedged.
func (w *Worker) queueHedge(p *Pool, ip uint32, port, id uint16, due int64, b []byte) {
	for i := range w.hedges {
		h := &w.hedges[i]
		if h.used {
			continue
		}
		if cap(h.buf) < len(b) {
			h.buf = make([]byte, max(len(b), outSize)) // once per slot and size
		}
		h.n = copy(h.buf[:len(b)], b)
		h.pool, h.ip, h.port, h.id, h.due, h.used = p, ip, port, id, due, true
		w.nHedges++
		if w.nHedges == 1 || due < w.hedgeDue {
			w.hedgeDue = due
		}
		return
	}
}

// fireHedges sends the hedges that are due: each read still unanswered
// goes to the next best replica, when the pool's hedge budget allows.
// It runs whenever the Worker handles a frame of a pool, so a hedge is as
// late as the next such frame (see docs/replicas.md).
func (w *Worker) fireHedges(t *Table, now int64) {
	if w.nHedges == 0 || now < w.hedgeDue {
		return
	}
	next, fired := int64(0), 0
	for i := range w.hedges {
		h := &w.hedges[i]
		if !h.used {
			continue
		}
		if now < h.due || fired == hedgesPerFrame {
			if next == 0 || h.due < next {
				next = h.due
			}
			continue
		}
		fired++
		h.used = false
		w.nHedges--
		w.hedge(t, h, now)
	}
	w.hedgeDue = next
}

// hedge sends the read of h to the next best replica if it is still
// unanswered.
func (w *Worker) hedge(t *Table, h *hedgeSlot, now int64) {
	p := h.pool
	rs := p.rep
	rs.mu.Lock()
	e := rs.find(h.ip, h.port, h.id)
	if e == nil || e.write || e.winner >= 0 || e.n == 0 || int(e.n) >= len(e.copies) {
		rs.mu.Unlock()
		return
	}
	sh := p.Shards[e.shard]
	p.syncChooser(sh)
	explored := -1
	if e.n > 1 {
		explored = int(e.copies[1].rep)
	}
	target := sh.chooser.Hedge(int(e.size), int(e.copies[0].rep), explored)
	if target >= 0 {
		sh.chooser.Sent(target)
		e.addCopy(target, now, true, false)
	}
	rs.mu.Unlock()
	if target < 0 {
		return
	}
	nb := w.take(h.n)
	if nb == nil {
		return
	}
	copy(nb, h.buf[:h.n])
	if frame.Parse(nb, &w.h) != nil {
		return
	}
	p.Stats.HedgesSent.Add(1)
	w.send(t, p, &w.h, nb, false, sh.Replicas[target], false, now)
}

// ReplicaWhy is one replica's part in a read's choice.
type ReplicaWhy struct {
	Server      *Server
	Usable      bool
	Prediction  replica.Prediction
	Outstanding int
	// Class is the service-time estimate in the read's size class.
	Class  replica.ClassStats
	Chosen bool
}

// Why explains where a read of key would go now.
type Why struct {
	// Shard is the key's shard now (its owner, or the failover when all
	// its replicas are down) and Owner its ring owner.
	Shard, Owner int
	// Size is the value size predicted for (SizeKnown: seen for this
	// key; otherwise the pool's typical reply).
	Size      int
	SizeKnown bool
	Policy    replica.Policy
	Replicas  []ReplicaWhy
	// Reads, Explored and Hedges are the pool's budget counters.
	Reads, Explored, Hedges uint64
}

// Why explains where a read of key would go now, without sending
// anything or spending any budget.
func (p *Pool) Why(key []byte, now int64) Why {
	w := Why{Owner: p.ring.Owner(key), Shard: -1, Policy: p.Policy}
	o := p.ring.Owner(key)
	if !p.usable(o) {
		o = p.ring.Next(key, p.skip)
	}
	w.Shard = o
	if o < 0 {
		return w
	}
	sh := p.Shards[o]
	if sh.chooser == nil {
		for _, j := range sh.Replicas {
			w.Replicas = append(w.Replicas, ReplicaWhy{Server: p.Servers[j], Usable: p.serverUsable(j), Chosen: p.serverUsable(j)})
		}
		return w
	}
	rs := p.rep
	rs.mu.Lock()
	defer rs.mu.Unlock()
	p.syncChooser(sh)
	c := sh.chooser
	w.Size, w.SizeKnown = rs.sizeOf(keyHash(key))
	if !w.SizeKnown {
		w.Size = c.TypicalSize()
	}
	pick := c.Pick(w.Size)
	for k, j := range sh.Replicas {
		w.Replicas = append(w.Replicas, ReplicaWhy{Server: p.Servers[j], Usable: c.Replicas[k].Usable,
			Prediction: c.Predict(k, w.Size), Outstanding: c.Replicas[k].Outstanding(),
			Class: c.Stats(k, replica.Class(w.Size), now), Chosen: k == pick})
	}
	w.Reads, w.Explored, w.Hedges = rs.budget.Reads, rs.budget.Explored, rs.budget.Hedges
	return w
}
