package router

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/ring"
	"github.com/detour-overlay/detour/internal/wire"
)

// Spec describes the pools of one virtual network at one site.
type Spec struct {
	// Self is this site's ID; servers at Self are local.
	Self wire.SiteID
	// Subnet is the network's IPv4 subnet: only its hosts are served.
	Subnet netip.Prefix
	// RateLimit is the requests per second one source may send (0 for
	// DefaultRateLimit).
	RateLimit int
	Pools     []PoolSpec
}

// PoolSpec is one pool.
type PoolSpec struct {
	Name string
	VIP  netip.AddrPort
	Hash ring.Hash
	// Version counts the pool's definitions: 1 as configured, one more
	// for each change made at run time (see Apply).
	Version uint64
	// Servers are every server of the pool. Without Shards each is a
	// shard of its own (the ring's entries in this order); with Shards,
	// each is a replica of Shards[Shard].
	Servers []ServerSpec
	// Shards, when set, are the ring's entries, each held by the servers
	// naming it (issue 18; see replicas.go).
	Shards []ShardSpec
	// Policy is how a read picks a shard's replica, NearSites the sites
	// of the declared near zone, and Hedge whether reads are hedged.
	Policy    replica.Policy
	NearSites []wire.SiteID
	Hedge     bool
}

// ShardSpec is one shard of a replicated pool.
type ShardSpec struct {
	// Name is the ketama name ("": its first replica's host[:port]).
	Name   string
	Weight uint32
}

// ServerSpec is one server of a pool.
type ServerSpec struct {
	Addr     netip.AddrPort
	Weight   uint32
	Site     wire.SiteID
	SiteName string
	// Drained keeps the server in the ring but sends it no keys: its keys
	// go to their failover until it is undrained.
	Drained bool
	// Shard is the index in PoolSpec.Shards of the shard the server is a
	// replica of (with Shards only), and Tier its storage, free text.
	Shard int
	Tier  string
}

// DefaultRateLimit is the requests per second a source may send when the
// Spec names no limit.
const DefaultRateLimit = 200000

// Table holds the pools of one network. It is built once and read by the
// data path without locks; the agent changes only servers' health and
// MACs, through atomics.
type Table struct {
	self      wire.SiteID
	subnet    netip.Prefix
	subnetLo  uint32
	subnetMsk uint32
	rate      int
	spec      Spec // as built, for changes at run time (see Replace)
	pools     []*Pool
	marks     []atomic.Uint32 // client marks, see the package comment
	tcp       *tcpState       // TCP to the virtual addresses (tcp.go), shared with successors
}

// Pool is one pool of a Table.
type Pool struct {
	Name    string
	VIP     netip.AddrPort
	Hash    ring.Hash
	Version uint64
	index   int
	vip     [4]byte
	vip32   uint32
	port    uint16
	mac     [6]byte
	ring    *ring.Ring
	// Servers are in configuration order. A server that stays across a
	// change at run time keeps its *Server (its health, MAC and
	// counters).
	Servers []*Server
	// Drained[i] is true when Servers[i] takes no keys (see ServerSpec).
	Drained []bool
	// Shards are the ring's entries (its indexes), each with its
	// replicas; a pool without shards in its spec has one per server,
	// Shards[i] holding Servers[i] alone.
	Shards []*Shard
	// Policy is how reads pick a replica; Hedge whether they are hedged.
	Policy replica.Policy
	Hedge  bool
	// rep is the replicated pools' soft state, nil when every shard has
	// one replica.
	rep   *repState
	spec  PoolSpec
	owner func(key []byte) int // the ring's owner with failover, bound once
	// ownerTrial is owner, except that a down server with an armed trial
	// (Server.ArmTrial) takes the request.
	ownerTrial func(key []byte) int
	skip       func(i int) bool
	// Stats are the pool's counters, shared by the pool's successors
	// across changes at run time.
	Stats *PoolStats
}

// PoolStats are a pool's counters.
type PoolStats struct {
	Requests       atomic.Uint64 // requests routed (split parts count once each)
	Replies        atomic.Uint64 // replies rewritten back to the virtual address
	Errors         atomic.Uint64 // malformed requests answered with memcached's error
	Split          atomic.Uint64 // requests split over several servers
	ARPReplies     atomic.Uint64 // ARP requests for the virtual address answered
	DropForeign    atomic.Uint64 // requests from outside the network's subnet
	DropRate       atomic.Uint64 // requests over the per-source rate limit
	DropMalformed  atomic.Uint64 // malformed requests memcached ignores (dropped silently)
	DropNoServer   atomic.Uint64 // requests whose owner and every failover are down
	DropNoMAC      atomic.Uint64 // requests for a local server whose MAC is not yet known
	DropFlows      atomic.Uint64 // local requests that found no free flow slot
	DropOther      atomic.Uint64 // other frames to the virtual address (TCP, unknown ports, stale slots)
	FailedOver     atomic.Uint64 // requests sent to a failover because the owner was down
	HealthReplies  atomic.Uint64 // health-check replies seen
	LearnedServers atomic.Uint64 // server MACs learned

	// Replicated pools (issue 18): where reads went, the extra requests
	// and the soft state's fate.
	ReadsLocal     atomic.Uint64 // reads sent to a replica at this site
	ReadsNearby    atomic.Uint64 // ... at a near site (near_sites, or path RTT below NearbyRTT without them)
	ReadsRemote    atomic.Uint64 // ... elsewhere
	Explorations   atomic.Uint64 // reads also sent to another replica to refresh its estimate
	HedgesSent     atomic.Uint64 // reads sent to a second replica after the first's p95
	HedgesWon      atomic.Uint64 // hedges whose reply reached the client first
	WritesReplicas atomic.Uint64 // write copies sent (one per replica)
	DupReplies     atomic.Uint64 // replies dropped: another replica answered first
	PendingEvicted atomic.Uint64 // request soft state evicted while still awaited
	PendingExpired atomic.Uint64 // request soft state given up after PendingTTL
}

// Server is one server of a pool.
type Server struct {
	Addr     netip.AddrPort
	Site     wire.SiteID
	SiteName string
	Local    bool
	// Tier is the replica's storage (free text); Shard the index of its
	// shard in Pool.Shards and Replica its index among the shard's
	// replicas.
	Tier           string
	Shard, Replica int
	near           bool
	rtt            atomic.Int64 // path round trip (ns), set by the agent
	ip             [4]byte
	ip32           uint32
	port           uint16

	mac      atomic.Uint64 // 0: unknown
	down     atomic.Bool   // set by the agent's health checks
	siteDown atomic.Bool   // set by the agent when the overlay loses the site
	needARP  atomic.Bool   // a request found no MAC: the agent should ask
	trial    atomic.Int32  // trialNone, trialArmed or trialTaken (ArmTrial)

	lastReply    atomic.Int64  // when a reply from it was last seen (ns)
	healthReply  atomic.Int64  // when a reply to a health check was last seen (ns)
	pendingSince atomic.Int64  // first request sent since the last reply, 0 if none
	unanswered   atomic.Uint32 // requests sent since the last reply
	pace         atomic.Int64  // how long its oldest request usually waits (ns, Pace)
	forgotten    atomic.Int64  // pendingSince when ClearPending forgot it, until the next reply
	Requests     atomic.Uint64
	Replies      atomic.Uint64
	// FailedOver counts requests for the server's keys that went to
	// another server because it was down or drained.
	FailedOver atomic.Uint64
}

// Errors of New.
var (
	ErrSubnet = errors.New("router: the network needs an IPv4 subnet")
	ErrVIP    = errors.New("router: a virtual address must be IPv4 in the subnet")
)

// New builds the table of spec.
func New(spec Spec) (*Table, error) { return build(spec, nil) }

// build builds the table of spec; with prev, servers and pools that
// prev has keep their state (see Replace).
func build(spec Spec, prev *Table) (*Table, error) {
	if !spec.Subnet.IsValid() || !spec.Subnet.Addr().Is4() {
		return nil, ErrSubnet
	}
	t := &Table{self: spec.Self, subnet: spec.Subnet.Masked(), rate: spec.RateLimit, spec: cloneSpec(spec)}
	if t.rate <= 0 {
		t.rate = DefaultRateLimit
	}
	if prev != nil {
		t.marks, t.tcp = prev.marks, prev.tcp
	} else {
		t.marks, t.tcp = make([]atomic.Uint32, markSlots), &tcpState{}
	}
	t.subnetLo = be32(t.subnet.Addr().As4())
	t.subnetMsk = ^uint32(0) << (32 - t.subnet.Bits())
	for i, ps := range spec.Pools {
		var old *Pool
		if prev != nil {
			old = prev.Pool(ps.Name)
		}
		p, err := newPool(t, ps, old)
		if err != nil {
			return nil, err
		}
		p.index = i
		t.pools = append(t.pools, p)
	}
	return t, nil
}

// newPool builds pool ps of t; with old, the servers old has at the
// same address and site, and old's counters, carry over.
func newPool(t *Table, ps PoolSpec, old *Pool) (*Pool, error) {
	if !ps.VIP.Addr().Is4() || !t.subnet.Contains(ps.VIP.Addr()) {
		return nil, fmt.Errorf("%w: pool %s: %v", ErrVIP, ps.Name, ps.VIP)
	}
	if ps.Version == 0 {
		ps.Version = 1
	}
	p := &Pool{Name: ps.Name, VIP: ps.VIP, Hash: ps.Hash, Version: ps.Version, vip: ps.VIP.Addr().As4(), port: ps.VIP.Port(),
		spec: clonePool(ps), Stats: &PoolStats{}}
	if old != nil {
		p.Stats = old.Stats
	}
	p.vip32 = be32(p.vip)
	p.mac = VirtualMAC(ps.VIP.Addr())
	p.Policy, p.Hedge = ps.Policy, ps.Hedge
	for _, s := range ps.Servers {
		if !s.Addr.Addr().Is4() {
			return nil, fmt.Errorf("router: pool %s: server %v is not IPv4", ps.Name, s.Addr)
		}
		var srv *Server
		if old != nil {
			if o := old.ServerAt(s.Addr); o != nil && o.Site == s.Site {
				srv = o
			}
		}
		if srv == nil {
			srv = &Server{Addr: s.Addr, Site: s.Site, SiteName: s.SiteName, Local: s.Site == t.self,
				ip: s.Addr.Addr().As4(), port: s.Addr.Port()}
			srv.ip32 = be32(srv.ip)
		}
		srv.Tier = s.Tier
		srv.near = slices.Contains(ps.NearSites, s.Site)
		p.Servers = append(p.Servers, srv)
		p.Drained = append(p.Drained, s.Drained)
	}
	rs, err := p.buildShards(ps, old)
	if err != nil {
		return nil, err
	}
	r, err := ring.New(ps.Hash, rs)
	if err != nil {
		return nil, fmt.Errorf("router: pool %s: %w", ps.Name, err)
	}
	p.ring = r
	p.skip = func(i int) bool { return !p.usable(i) }
	p.owner = func(key []byte) int { return p.ownerOf(key, false) }
	p.ownerTrial = func(key []byte) int { return p.ownerOf(key, true) }
	return p, nil
}

// ownerOf returns the shard key goes to: its ring owner if usable, else
// the failover. With trial, a ring owner of one server that is down with
// a trial armed takes this one request instead.
func (p *Pool) ownerOf(key []byte, trial bool) int {
	o := p.ring.Owner(key)
	if p.usable(o) || trial && p.takeTrial(o) {
		return o
	}
	p.Stats.FailedOver.Add(1)
	p.Servers[p.Shards[o].Replicas[0]].FailedOver.Add(1)
	return p.ring.Next(key, p.skip)
}

// Trial states of a server (Server.ArmTrial).
const (
	trialNone int32 = iota
	trialArmed
	trialTaken
)

// trialServer returns the server of shard o when trials apply to it: a
// shard of one server, not drained (replicated shards choose among their
// replicas instead); else nil.
func (p *Pool) trialServer(o int) *Server {
	sh := p.Shards[o]
	if sh.chooser != nil || len(sh.Replicas) != 1 || p.Drained[sh.Replicas[0]] {
		return nil
	}
	return p.Servers[sh.Replicas[0]]
}

// takeTrial reports whether shard o's server is down with a trial armed,
// and if so marks the trial taken: the caller sends it the request. For
// a replicated shard it reports whether one of its replicas is armed;
// its chooser gives that replica the request (Pool.choose).
func (p *Pool) takeTrial(o int) bool {
	if p.Shards[o].chooser != nil {
		return p.replicaArmed(o)
	}
	s := p.trialServer(o)
	return s != nil && s.down.Load() && !s.siteDown.Load() && s.trial.CompareAndSwap(trialArmed, trialTaken)
}

// replicaArmed reports whether a replica of shard o has a trial armed.
func (p *Pool) replicaArmed(o int) bool {
	return slices.ContainsFunc(p.Shards[o].Replicas, p.trialArmed)
}

// onTrial reports whether shard o's server has taken its trial request
// or, for a replicated shard, whether a replica has one armed (its
// chooser then gives it the request).
func (p *Pool) onTrial(o int) bool {
	if p.Shards[o].chooser != nil {
		return p.replicaArmed(o)
	}
	s := p.trialServer(o)
	return s != nil && s.TrialTaken()
}

// usable reports whether shard i may take requests: one of its replicas
// is healthy, its site reachable, and not drained.
func (p *Pool) usable(i int) bool {
	for _, j := range p.Shards[i].Replicas {
		if p.serverUsable(j) {
			return true
		}
	}
	return false
}

// serverUsable reports whether server j may take requests.
func (p *Pool) serverUsable(j int) bool { return !p.Drained[j] && p.Servers[j].Usable() }

// VirtualMAC is the MAC address a pool's virtual address answers ARP
// with: locally administered and unicast, 02:6b followed by the address,
// so every gateway derives the same one.
func VirtualMAC(vip netip.Addr) [6]byte {
	a := vip.As4()
	return [6]byte{0x02, 0x6b, a[0], a[1], a[2], a[3]}
}

// Pools returns the table's pools.
func (t *Table) Pools() []*Pool { return t.pools }

// Self returns the site the table was built for.
func (t *Table) Self() wire.SiteID { return t.self }

// inSubnet reports whether the IPv4 address a is in the network's subnet.
func (t *Table) inSubnet(a uint32) bool { return a&t.subnetMsk == t.subnetLo }

// poolByVIP returns the pool whose virtual address is ip and port.
func (t *Table) poolByVIP(ip uint32, port uint16) *Pool {
	for _, p := range t.pools {
		if p.vip32 == ip && p.port == port {
			return p
		}
	}
	return nil
}

// Pool returns the pool named name, or nil.
func (t *Table) Pool(name string) *Pool {
	for _, p := range t.pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// anyPoolByIP returns the first pool whose virtual address is ip.
func (t *Table) anyPoolByIP(ip uint32) *Pool {
	for _, p := range t.pools {
		if p.vip32 == ip {
			return p
		}
	}
	return nil
}

// MAC returns the pool's virtual MAC.
func (p *Pool) MAC() [6]byte { return p.mac }

// Owner returns the shard a key goes to now (for a pool without shards
// in its spec, the server): its ring owner, or the failover when every
// replica of the owner is down; -1 when every shard is down.
func (p *Pool) Owner(key []byte) int { return p.owner(key) }

// RingOwner returns the key's owner on the ring (a shard, or for a pool
// without shards in its spec the server), whatever its health.
func (p *Pool) RingOwner(key []byte) int { return p.ring.Owner(key) }

// server returns the server at ip:port.
func (p *Pool) server(ip uint32, port uint16) *Server {
	for _, s := range p.Servers {
		if s.ip32 == ip && s.port == port {
			return s
		}
	}
	return nil
}

// localByIP returns a local server with address ip.
func (p *Pool) localByIP(ip uint32) *Server {
	for _, s := range p.Servers {
		if s.Local && s.ip32 == ip {
			return s
		}
	}
	return nil
}

// Usable reports whether requests may go to the server.
func (s *Server) Usable() bool { return !s.down.Load() && !s.siteDown.Load() }

// SetDown records the result of the agent's health checks.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// Down reports the health checks' verdict.
func (s *Server) Down() bool { return s.down.Load() }

// ArmTrial lets the next single-key UDP request for the keys of a server
// that is down go to it, one request, while every other keeps going to
// the failover. The agent readmits a remote server (which it cannot
// health-check) when that request is answered, instead of sending it all
// its keys' requests again to find out.
func (s *Server) ArmTrial() { s.trial.Store(trialArmed) }

// TrialTaken reports whether the armed trial request has gone to the
// server.
func (s *Server) TrialTaken() bool { return s.trial.Load() == trialTaken }

// EndTrial ends a trial, armed or taken.
func (s *Server) EndTrial() { s.trial.Store(trialNone) }

// SetSiteDown records whether the overlay has lost the server's site.
func (s *Server) SetSiteDown(down bool) { s.siteDown.Store(down) }

// SetMAC records the server's MAC, learned by the agent.
func (s *Server) SetMAC(mac [6]byte) { s.mac.Store(macTo64(mac)) }

// MAC returns the server's MAC and whether it is known.
func (s *Server) MAC() ([6]byte, bool) {
	v := s.mac.Load()
	return macFrom64(v), v != 0
}

// TakeNeedARP reports, and clears, whether a request found the server's
// MAC unknown since the last call.
func (s *Server) TakeNeedARP() bool { return s.needARP.Swap(false) }

// LastReply returns when a reply from the server was last seen (0: never).
func (s *Server) LastReply() int64 { return s.lastReply.Load() }

// HealthReplyAt returns when the server's last reply to a health check
// was seen (0: never); with the time the check left, the agent measures
// the round trip from the gateway.
func (s *Server) HealthReplyAt() int64 { return s.healthReply.Load() }

// PendingSince returns when the first request sent since the server's
// last reply left, or 0 when every request has been answered since.
func (s *Server) PendingSince() int64 { return s.pendingSince.Load() }

// ClearPending forgets the unanswered requests, when a server is taken
// out or readmitted. A reply that comes for them later still teaches the
// server's pace.
func (s *Server) ClearPending() {
	if p := s.pendingSince.Swap(0); p != 0 {
		s.forgotten.Store(p)
	}
	s.unanswered.Store(0)
}

// IP returns the server's address as 4 bytes.
func (s *Server) IP() [4]byte { return s.ip }

// Port returns the server's port.
func (s *Server) Port() uint16 { return s.port }

// sent records a request that expects a reply, for passive detection.
func (s *Server) sent(now int64) {
	if s.pendingSince.Load() == 0 {
		s.pendingSince.CompareAndSwap(0, now)
	}
	s.unanswered.Add(1)
}

// maxPace is the longest wait a reply teaches the pace: one later than
// that comes from a server that stalled or was down, not from its
// usual work.
const maxPace = int64(time.Second)

// notePace folds the time the oldest request waited for a reply into
// the server's pace: half the way up at once, a sixteenth of the way
// down, so that it follows the slow end of the server's answers.
func (s *Server) notePace(d int64) {
	if d > maxPace {
		return
	}
	p := s.pace.Load()
	if d > p {
		p += (d - p) / 2
	} else {
		p -= (p - d) / 16
	}
	s.pace.Store(p)
}

// Pace returns how long the server's oldest request usually waits for
// its reply, as the gateway sees it (path and service time together): a
// server busy with large values from a slow disk answers in hundreds of
// milliseconds, and passive detection must not take that for silence.
func (s *Server) Pace() time.Duration { return time.Duration(s.pace.Load()) }

// Unanswered returns the number of requests sent to the server since its
// last reply (for passive detection, which waits for more than one, so
// that a single lost datagram takes no server out).
func (s *Server) Unanswered() uint32 { return s.unanswered.Load() }

// replied records a reply from the server.
func (s *Server) replied(now int64) {
	s.lastReply.Store(now)
	if p := s.pendingSince.Load(); p != 0 {
		s.pendingSince.Store(0)
		s.notePace(now - p)
	} else if f := s.forgotten.Load(); f != 0 {
		s.forgotten.Store(0)
		s.notePace(now - f)
	}
	if s.unanswered.Load() != 0 {
		s.unanswered.Store(0)
	}
	s.Replies.Add(1)
}

func be32(a [4]byte) uint32 {
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
}

func macTo64(m [6]byte) uint64 {
	return 1<<63 | uint64(m[0])<<40 | uint64(m[1])<<32 | uint64(m[2])<<24 | uint64(m[3])<<16 | uint64(m[4])<<8 | uint64(m[5])
}

func macFrom64(v uint64) [6]byte {
	return [6]byte{byte(v >> 40), byte(v >> 32), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

// markSlots is the size of the client-mark table and markTTL how long a
// mark lets replies be rewritten (seconds).
const (
	markSlots = 1 << 16
	markTTL   = 60
)

// markIndex hashes a client's address and port.
func markIndex(ip uint32, port uint16) uint32 {
	h := (uint64(ip)<<16 | uint64(port)) * 0x9e3779b97f4a7c15
	return uint32(h>>48) & (markSlots - 1)
}

// mark records that the client sent a request to a pool now.
func (t *Table) mark(ip uint32, port uint16, now int64) {
	sec := uint32(now/1e9) | 1 // never 0
	m := &t.marks[markIndex(ip, port)]
	if m.Load() != sec {
		m.Store(sec)
	}
}

// marked reports whether the client sent a request to a pool recently.
func (t *Table) marked(ip uint32, port uint16, now int64) bool {
	v := t.marks[markIndex(ip, port)].Load()
	return v != 0 && uint32(now/1e9)|1-v <= markTTL
}
