package site

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/control"
	"github.com/detour-overlay/detour/internal/wire"
)

// kvpools distributes the key router's pools over the control plane with
// no central server. Every site holds the same set of pools, each as one
// versioned record (wire.KVPool), and keeps, for each name, the record
// that comes last in the order (version, origin site ID, bytes): the
// higher version, then the higher origin, then (only for two different
// records with the same version and origin, which a site that lost its
// state could make) the greater encoding. The order is total, so every
// site keeps the same record whatever order records arrive in, and two
// sites that change a pool at once converge on one of the changes (the
// other is overwritten: last writer wins).
//
// A record travels three ways:
//
//   - flooding: a change made here, or a record received that is newer
//     than the one held, is sent to every member not down (but the sender
//     and the origin), as a revocation is;
//   - catching up: a member seen alive for the first time (a newcomer, or
//     one back from down) is sent every record; a record received that is
//     older than the one held is answered with the one held, so a site
//     that restarted with old records is corrected at once;
//   - anti-entropy: every kvDigestInterval each member is sent a digest of
//     the records held (count and hash); a member whose digest differs
//     answers with every record it holds, which repairs a lost datagram.
//
// Records are sealed like all control traffic; on an overlay in the clear
// a record is taken only from the address of the member it names as
// sender.
type kvpools struct {
	pools map[string]kvRecord
	// alive are the members seen alive at the last check.
	alive      map[wire.SiteID]bool
	nextCheck  time.Time
	nextDigest time.Time
	changed    bool
	// Counters.
	received, applied, stale, refused, sent, digests uint64
}

// kvRecord is a pool held, with its encoding (sender field zero) to
// compare and hash.
type kvRecord struct {
	pool wire.KVPool
	enc  []byte
}

// Timing of the distribution.
const (
	// kvCheckInterval is how often the members' states are looked at for
	// newcomers.
	kvCheckInterval = 100 * time.Millisecond
	// kvDigestInterval is how often each member is sent a digest.
	kvDigestInterval = 5 * time.Second
)

// ErrKVPool is wrapped by the errors of SetKVPool about the pool itself.
var ErrKVPool = errors.New("kv pool")

func newKVPools() *kvpools {
	return &kvpools{pools: map[string]kvRecord{}, alive: map[wire.SiteID]bool{}}
}

// record encodes p as held: its message with the sender field zero.
func kvEncode(p *wire.KVPool) (kvRecord, error) {
	enc, err := wire.AppendKVPool(nil, 1, p)
	if err != nil {
		return kvRecord{}, err
	}
	clear(enc[4:8])
	return kvRecord{pool: p.Clone(), enc: enc}, nil
}

// after reports whether r comes after q in the order of records.
func (r kvRecord) after(q kvRecord) bool {
	if r.pool.Version != q.pool.Version || r.pool.Origin != q.pool.Origin {
		return r.pool.Newer(&q.pool)
	}
	return bytes.Compare(r.enc, q.enc) > 0
}

// checkKVPool checks what the wire format does not: distinct servers, at
// least one that may take keys, and at most wire.MaxKVReplicas replicas
// in a shard.
func checkKVPool(p *wire.KVPool) error {
	if p.Replicated() {
		n := make([]int, len(p.Shards))
		for _, s := range p.Servers {
			if int(s.Shard) >= len(n) {
				return fmt.Errorf("%w %s: server %v: shard %d of %d", ErrKVPool, p.Name, s.Addr, s.Shard, len(n))
			}
			if n[s.Shard]++; n[s.Shard] > wire.MaxKVReplicas {
				return fmt.Errorf("%w %s: shard %d has more than %d replicas", ErrKVPool, p.Name, s.Shard, wire.MaxKVReplicas)
			}
		}
	}
	usable := false
	for i, s := range p.Servers {
		if s.Addr.Port() == 0 || s.Addr.Addr() == p.VIP.Addr() {
			return fmt.Errorf("%w %s: server %v: not a server's address", ErrKVPool, p.Name, s.Addr)
		}
		if slices.ContainsFunc(p.Servers[:i], func(o wire.KVServer) bool { return o.Addr == s.Addr }) {
			return fmt.Errorf("%w %s: server %v listed twice", ErrKVPool, p.Name, s.Addr)
		}
		usable = usable || s.Flags&(wire.KVServerDrained|wire.KVServerJoining) == 0
	}
	if !usable {
		return fmt.Errorf("%w %s: no server may take keys", ErrKVPool, p.Name)
	}
	return nil
}

// KVPools returns the pools the site holds, in name order.
func (c *Core) KVPools() []wire.KVPool {
	out := make([]wire.KVPool, 0, len(c.kv.pools))
	for _, name := range slices.Sorted(maps.Keys(c.kv.pools)) {
		out = append(out, c.kv.pools[name].pool.Clone())
	}
	return out
}

// LoadKVPools gives the core the pools it starts with (the state file's
// and the configuration's, see the agent), replacing any held. They are
// not flooded: members get them as they are seen alive, and any member
// holding a newer one answers with it.
func (c *Core) LoadKVPools(pools []wire.KVPool) error {
	held := map[string]kvRecord{}
	for i := range pools {
		p := &pools[i]
		if err := checkKVPool(p); err != nil {
			return err
		}
		r, err := kvEncode(p)
		if err != nil {
			return fmt.Errorf("%w %s: %v", ErrKVPool, p.Name, err)
		}
		held[p.Name] = r
	}
	c.kv.pools = held
	return nil
}

// SetKVPool makes a change at this site: p (new, or a changed version of
// a pool held) becomes the pool of its name with this site as origin and
// a version above the one held, and is flooded to every member. It
// returns p as stamped, or why it cannot be sent (ErrKVPool: servers
// repeated or none usable; wire.ErrKVPoolTooLarge: too many servers for
// one datagram).
func (c *Core) SetKVPool(now time.Time, p wire.KVPool) (wire.KVPool, error) {
	now = c.observe(now)
	p = p.Clone()
	p.Origin = c.node.ID()
	if cur, ok := c.kv.pools[p.Name]; ok {
		p.Version = max(p.Version, cur.pool.Version+1)
	}
	p.Version = max(p.Version, 1)
	if err := checkKVPool(&p); err != nil {
		return p, err
	}
	r, err := kvEncode(&p)
	if errors.Is(err, wire.ErrKVPoolTooLarge) {
		return p, fmt.Errorf("%w %s: %d servers take %d bytes, more than the %d a control datagram carries: %w",
			ErrKVPool, p.Name, len(p.Servers), wire.KVPoolLen(&p), wire.MaxKVPoolLen, err)
	}
	if err != nil {
		return p, fmt.Errorf("%w %s: %v", ErrKVPool, p.Name, err)
	}
	c.kv.pools[p.Name] = r
	c.kv.changed = true
	c.kv.applied++
	c.kvFlood(now, r, 0)
	return r.pool.Clone(), nil
}

// onKVPool handles a pool record sent by member from.
func (c *Core) onKVPool(now time.Time, from wire.SiteID, msg []byte) {
	c.kv.received++
	var p wire.KVPool
	sender, err := wire.ParseKVPool(msg, &p)
	if err != nil || sender != from || checkKVPool(&p) != nil {
		c.kv.refused++
		return
	}
	r, err := kvEncode(&p)
	if err != nil {
		c.kv.refused++
		return
	}
	cur, ok := c.kv.pools[p.Name]
	switch {
	case !ok || r.after(cur):
		c.kv.pools[p.Name] = r
		c.kv.changed = true
		c.kv.applied++
		c.kvFlood(now, r, from)
	case cur.after(r):
		// The sender holds an older record: give it the one held.
		c.kv.stale++
		c.kvSend(now, from, cur)
	}
}

// onKVDigest answers a member's digest that differs from this site's
// with every record held.
func (c *Core) onKVDigest(now time.Time, from wire.SiteID, msg []byte) {
	sender, n, d, err := wire.ParseKVDigest(msg)
	if err != nil || sender != from {
		c.kv.refused++
		return
	}
	if mn, md := c.kvDigest(); mn != n || md != d {
		c.kvSendAll(now, from)
	}
}

// kvDigest returns the count of records held and their hash.
func (c *Core) kvDigest() (uint32, uint64) {
	h := fnv.New64a()
	for _, name := range slices.Sorted(maps.Keys(c.kv.pools)) {
		h.Write(c.kv.pools[name].enc)
	}
	return uint32(len(c.kv.pools)), h.Sum64()
}

// kvTick sends every record to members newly alive and, every
// kvDigestInterval, the digest to every member alive.
func (c *Core) kvTick(now time.Time) {
	if now.Before(c.kv.nextCheck) {
		return
	}
	c.kv.nextCheck = now.Add(kvCheckInterval)
	digest := !now.Before(c.kv.nextDigest)
	if digest {
		c.kv.nextDigest = now.Add(kvDigestInterval)
	}
	alive := map[wire.SiteID]bool{}
	var n uint32
	var d uint64
	ids := c.node.AliveMembers()
	slices.Sort(ids)
	for _, id := range ids {
		alive[id] = true
		if !c.kv.alive[id] {
			c.kvSendAll(now, id)
		}
		if digest {
			if n == 0 && d == 0 {
				n, d = c.kvDigest()
			}
			c.kv.digests++
			c.kvSendMsg(now, id, wire.AppendKVDigest(nil, c.node.ID(), n, d))
		}
	}
	c.kv.alive = alive
}

// kvFlood sends r to every member not down, but from and r's origin.
func (c *Core) kvFlood(now time.Time, r kvRecord, from wire.SiteID) {
	for _, m := range c.node.Members() {
		if m.Self || m.ID == from || m.ID == r.pool.Origin || m.State == control.StateDown.String() || m.State == control.StateLeft.String() {
			continue
		}
		c.kvSend(now, m.ID, r)
	}
}

// kvSendAll sends every record held to one member.
func (c *Core) kvSendAll(now time.Time, to wire.SiteID) {
	for _, name := range slices.Sorted(maps.Keys(c.kv.pools)) {
		c.kvSend(now, to, c.kv.pools[name])
	}
}

// kvSend sends one record to a member, this site as sender.
func (c *Core) kvSend(now time.Time, to wire.SiteID, r kvRecord) {
	msg := bytes.Clone(r.enc)
	id := c.node.ID()
	msg[4], msg[5], msg[6], msg[7] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
	c.kv.sent++
	c.kvSendMsg(now, to, msg)
}

// kvSendMsg sends a control message to a member: sealed, or as it is on
// an overlay in the clear.
func (c *Core) kvSendMsg(now time.Time, to wire.SiteID, msg []byte) {
	addr, ok := c.node.MemberAddr(to)
	if !ok || !addr.IsValid() {
		return
	}
	d := []Datagram{{To: addr, Payload: msg}}
	if c.sec != nil {
		c.sec.seal(now, d, c.memberAddrs, c.sendNow)
		return
	}
	c.send = append(c.send, d...)
}

// isKVMessage reports whether a control message is one of the pool
// distribution's.
func isKVMessage(pkt []byte) bool {
	if len(pkt) < wire.CommonHeaderLen {
		return false
	}
	t := wire.Type(pkt[2])
	return t == wire.TypeKVPool || t == wire.TypeKVDigest
}

// onKVMessage handles a pool record or digest from member from.
func (c *Core) onKVMessage(now time.Time, from wire.SiteID, pkt []byte) {
	if wire.Type(pkt[2]) == wire.TypeKVPool {
		c.onKVPool(now, from, pkt)
	} else {
		c.onKVDigest(now, from, pkt)
	}
}

// onKVClear handles a pool message on an overlay in the clear: it is
// taken only from the address of the member it names as sender.
func (c *Core) onKVClear(now time.Time, from netip.AddrPort, pkt []byte) {
	if len(pkt) < wire.CommonHeaderLen+4 {
		c.kv.refused++
		return
	}
	sender := wire.SiteID(uint32(pkt[4])<<24 | uint32(pkt[5])<<16 | uint32(pkt[6])<<8 | uint32(pkt[7]))
	if addr, ok := c.node.MemberAddr(sender); !ok || !addr.IsValid() || addr != from {
		c.kv.refused++
		return
	}
	c.onKVMessage(now, sender, pkt)
}

// counters adds the distribution's counters to out.
func (k *kvpools) counters(out map[string]uint64) {
	out["kv_pools_held"] = uint64(len(k.pools))
	out["kv_pool_records_received"] = k.received
	out["kv_pool_records_applied"] = k.applied
	out["kv_pool_records_stale"] = k.stale
	out["kv_pool_records_refused"] = k.refused
	out["kv_pool_records_sent"] = k.sent
	out["kv_pool_digests_sent"] = k.digests
}
