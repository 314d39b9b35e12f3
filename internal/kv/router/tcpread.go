package router

import "github.com/detour-overlay/detour/internal/kv/replica"

// Reads over TCP (issue 18 with issue 17's terminator). The TCP
// terminator asks the pool where each read goes (ChooseRead: the same
// chooser and soft state the UDP path uses, so both feed one set of
// estimates and `detour kv why` shows both), tells it when it wrote a
// read to a server connection (ReadSent), and when the reply ended
// (ObserveRead) or will never come (GiveUpRead). A read whose reply comes
// over a pooled connection is timed from the write of the request to
// the reply's first and last bytes, which gives the chooser the same
// service-time and throughput samples a reply in datagrams does.

// ReadChoice is where a read over TCP goes.
type ReadChoice struct {
	// Server is the index in Servers of the replica the read goes to (-1
	// when none of its shard's is usable); Explore another replica to
	// which a copy of the read goes so that its estimate stays fresh
	// (-1: none).
	Server, Explore int
	// Size is the value size the choice was made for; Hash is the key's
	// hash, under which ObserveRead learns the value's size.
	Size int
	Hash uint32
}

// ChooseRead picks the replica for a read of key at now: in a shard of
// several replicas the pool's policy decides (spending an exploration
// token when it asks for a copy elsewhere, or sending a copy to a
// replica on trial); in a shard of one, its server if usable or taking
// its readmission trial. It records nothing as sent: the caller calls
// ReadSent for each copy it writes.
func (p *Pool) ChooseRead(key []byte, now int64) ReadChoice {
	rc := ReadChoice{Server: -1, Explore: -1}
	o := p.ownerTrial(key)
	if o < 0 || o >= len(p.Shards) {
		return rc
	}
	sh := p.Shards[o]
	if sh.chooser == nil {
		for _, j := range sh.Replicas {
			if p.serverUsable(j) {
				rc.Server = j
				break
			}
		}
		if rc.Server < 0 && p.onTrial(o) {
			rc.Server = sh.Replicas[0] // the server's readmission trial
		}
		return rc
	}
	rs := p.rep
	rc.Hash = keyHash(key)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	p.syncChooser(sh)
	c := sh.chooser
	size := p.readSize(c, rc.Hash)
	rc.Size = size
	d := p.choose(sh, size, now, true)
	if d.Primary >= 0 {
		rc.Server = sh.Replicas[d.Primary]
	}
	if d.Primary >= 0 && d.Explore >= 0 {
		rc.Explore = sh.Replicas[d.Explore]
	}
	return rc
}

// chooserOf returns the chooser of server j's shard and j's index among
// its replicas, or nil when the shard has one replica.
func (p *Pool) chooserOf(j int) (*replica.Chooser, int) {
	if p.rep == nil || j < 0 || j >= len(p.Servers) {
		return nil, 0
	}
	s := p.Servers[j]
	if s.Shard < 0 || s.Shard >= len(p.Shards) {
		return nil, 0
	}
	return p.Shards[s.Shard].chooser, s.Replica
}

// ReadCopy says why a read was written to a server.
type ReadCopy uint8

// The copies of a read.
const (
	// ReadChosen goes to the replica the chooser picked for the read.
	ReadChosen ReadCopy = iota
	// ReadExplore keeps another replica's estimate fresh; its reply only
	// feeds the chooser.
	ReadExplore
	// ReadHedge goes to the next best replica of a read still
	// unanswered (HedgeRead).
	ReadHedge
)

// ReadSent records a read written to server j: counted as outstanding
// at the server until ObserveRead or GiveUpRead, and, for the chosen
// copy, counted by where the server is.
func (p *Pool) ReadSent(j int, why ReadCopy) {
	c, k := p.chooserOf(j)
	if c == nil {
		return
	}
	switch why {
	case ReadExplore:
		p.Stats.Explorations.Add(1)
	case ReadChosen:
		p.countRead(p.Servers[j])
	}
	p.rep.mu.Lock()
	c.Sent(k)
	p.rep.mu.Unlock()
}

// ObserveRead records the reply of server j to a read ReadSent recorded:
// r.Sent is when the request was written, r.First and r.Last when the
// reply's first and last bytes arrived, r.Bytes its length (r.Dgms the
// reads of the connection it took). A hash from ChooseRead learns the
// value's size for the key.
func (p *Pool) ObserveRead(j int, hash uint32, r replica.Reply, now int64) {
	c, k := p.chooserOf(j)
	if c == nil {
		return
	}
	p.rep.mu.Lock()
	c.Observe(k, r, now)
	if hash != 0 && r.Bytes > 0 {
		p.rep.setSize(hash, r.Bytes)
	}
	p.rep.mu.Unlock()
}

// GiveUpRead forgets a read ReadSent recorded whose reply will not come
// (its connection failed).
func (p *Pool) GiveUpRead(j int) {
	c, k := p.chooserOf(j)
	if c == nil {
		return
	}
	p.rep.mu.Lock()
	c.GiveUp(k)
	p.rep.mu.Unlock()
}

// KeyHash is the hash ReadChoice.Hash and ObserveRead use for a key.
func KeyHash(key []byte) uint32 { return keyHash(key) }

// ReadHedgeAfter returns how long after writing a read of the key with
// hash h to server j it is hedged if nothing of its reply has come by
// then: the replica's p95 fetch time for the value's size
// (replica.Chooser.HedgeAfter). ok is false when the pool does not
// hedge, j's shard has one replica, or j has no samples of that size yet.
func (p *Pool) ReadHedgeAfter(j int, h uint32) (wait int64, ok bool) {
	c, k := p.chooserOf(j)
	if c == nil || !p.Hedge {
		return 0, false
	}
	p.rep.mu.Lock()
	defer p.rep.mu.Unlock()
	return c.HedgeAfter(k, p.readSize(c, h))
}

// HedgeRead returns the server to which a read of the key with hash h,
// first written to server j and still unanswered, is hedged now: the
// best other usable replica of j's shard, when the pool's hedge budget
// has a token left (at most replica.Params.HedgeShare extra reads); -1
// otherwise. The caller writes the copy and calls ReadSent(…, ReadHedge).
func (p *Pool) HedgeRead(j int, h uint32) int {
	if c, _ := p.chooserOf(j); c == nil || !p.Hedge {
		return -1
	}
	sh := p.Shards[p.Servers[j].Shard]
	p.rep.mu.Lock()
	defer p.rep.mu.Unlock()
	p.syncChooser(sh)
	c := sh.chooser
	t := c.Hedge(p.readSize(c, h), p.Servers[j].Replica, -1)
	if t < 0 {
		return -1
	}
	p.Stats.HedgesSent.Add(1)
	return sh.Replicas[t]
}

// readSize returns the value size to predict a read of the key with hash
// h by: the key's last seen, else the pool's typical one. The caller
// holds p.rep.mu.
func (p *Pool) readSize(c *replica.Chooser, h uint32) int {
	if size, ok := p.rep.sizeOf(h); ok {
		return size
	}
	return c.TypicalSize()
}
