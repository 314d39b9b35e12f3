package wire

import (
	"errors"
	"net/netip"
	"slices"
)

// Messages that distribute the key router's pools (issue 17) over the
// control plane, with no central server (package site, kvpools.go). A
// pool travels whole, as one versioned record: the site that changes it
// floods the new record to every member, each member floods a record it
// did not have onward, and members compare digests of what they hold
// every few seconds and send each other their records when they differ.
// Both types travel only inside a sealed control message, or in the clear
// on an overlay that runs in the clear.
//
// KV pool (type 14):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 14   |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              sender site ID (the site sending it)             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         origin site ID (the site that made this version)      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     pool version (64 bits)                    |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 network ID (the overlay's, VNI)               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  virtual IPv4 address                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        virtual port           |     hash      | site count    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        server count           |  name length  |  pool name... :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:  site table: site count × (length (1 byte), site name)        :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:  servers: server count × 10 bytes:                            :
//	:   IPv4 (4) | port (2) | weight (2) | site index (1) | flags (1):
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:  replication (only with flag KVPoolFlagReplicated, below)     :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The pool name is 1..MaxKVNameLen bytes and each site name
// 1..MaxNameLen; a server names its site by index into the site table, so
// a pool of many servers on few sites stays small. Server flag bit 0
// (KVServerDrained) keeps the server in the ring with no keys; bit 1
// (KVServerJoining) marks a server just added, which takes no keys until
// its own site has learned its MAC and sends the next version without the
// flag. The hash is ring.Hash's value. A message is at most MaxKVPoolLen
// bytes, so that it fits one datagram once sealed.
//
// A replicated pool (issue 18: shards, each held by one or more servers,
// its replicas) has bit 0 of the common header's flags set
// (KVPoolFlagReplicated) and a replication section after the servers; a
// pool without shards has neither, and is encoded exactly as before
// shards existed.
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    policy     |  repl. flags  |  near count   |  tier count   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         shard count           |  near sites: near count ×     :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+  site index (1 byte each)     :
//	:                                                               :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:  tier table: tier count × (length (1 byte), tier name)        :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:  shards: shard count × (weight (2), name length (1), name)    :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:  replicas: server count × 3 bytes, in the servers' order:     :
//	:   shard index (2) | tier index (1)                            :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The policy is how a read picks a replica (0 predicted, 1 local-first,
// 2 static-zone, 3 nearest-rtt: replica.Policy's values); replication
// flag bit 0 (KVPoolHedge) hedges reads. The near sites (the declared near
// zone) name sites by index into the site table, which then lists, after
// the servers' sites, the near sites no server is at, in the order the
// near sites first name them. A shard's name is 0..255 bytes (empty: its
// first replica's address names it on the ring); its weight is 1 or more.
// Each server names its shard by index (every shard has at least one
// server) and its tier by index into the tier table plus one, 0 for none;
// tiers are 1..255 bytes, listed in the order the servers first name
// them, each once. All of it counts in KVPoolLen, so MaxKVPoolLen bounds
// the whole message. A site that predates the section refuses the message
// (its length does not match), so it holds no version of a replicated
// pool rather than a wrong one.
//
// Versions are ordered by (version, origin): the higher version wins, and
// of two versions with the same number, that of the higher origin ID, so
// that every site keeps the same one whatever the order they arrive in.
//
// KV digest (type 15): the sender's summary of the pools it holds.
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 15   |    flags      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         sender site ID                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          pool count                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      digest (64 bits): FNV-1a over each pool's name, version  |
//	+      and origin, in name order                                +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

// Message types of the pool distribution.
const (
	TypeKVPool   Type = 14
	TypeKVDigest Type = 15
)

// Server flags of a KV pool message.
const (
	KVServerDrained uint8 = 1 << 0
	KVServerJoining uint8 = 1 << 1
)

// Flags of a KV pool message: the common header's, and the replication
// section's.
const (
	// KVPoolFlagReplicated announces the replication section.
	KVPoolFlagReplicated uint8 = 1 << 0
	// KVPoolHedge hedges reads (replication flags).
	KVPoolHedge uint8 = 1 << 0
)

// KVPolicies is the number of read policies a pool may name.
const KVPolicies = 4

// Bounds of a KV pool message.
const (
	// MaxKVPoolLen is the largest KV pool message: with the sealing's
	// overhead it stays under 1280 bytes, the IPv6 minimum MTU.
	MaxKVPoolLen = 1200
	// MaxKVNameLen is the longest pool name.
	MaxKVNameLen = 64
	// kvPoolFixedLen is the length up to the pool name.
	kvPoolFixedLen = CommonHeaderLen + 4 + 4 + 8 + 4 + 4 + 2 + 1 + 1 + 2 + 1
	// kvServerLen is the length of one server entry.
	kvServerLen = 10
	// kvReplFixedLen is the fixed part of the replication section,
	// kvShardFixedLen that of a shard and kvReplicaLen a server's entry.
	kvReplFixedLen  = 1 + 1 + 1 + 1 + 2
	kvShardFixedLen = 2 + 1
	kvReplicaLen    = 3
	// MaxKVLabelLen is the longest shard name or tier.
	MaxKVLabelLen = 255
	// MaxKVReplicas bounds the replicas of one shard (replica.MaxReplicas);
	// the format does not, the site core checks it.
	MaxKVReplicas = 8
	// KVDigestLen is the exact length of a digest message.
	KVDigestLen = CommonHeaderLen + 4 + 4 + 8
)

// ErrKVPoolTooLarge says a pool does not fit one message.
var ErrKVPoolTooLarge = errors.New("wire: the pool does not fit one control datagram")

// KVPool is one version of a pool as the control plane carries it.
type KVPool struct {
	Name    string
	Origin  SiteID
	Version uint64
	Network uint32
	VIP     netip.AddrPort
	Hash    uint8
	Servers []KVServer
	// Shards, when set, make the pool replicated: the ring's entries,
	// each held by the servers naming it (KVServer.Shard). Policy (a
	// replica.Policy), Hedge and NearSites are set only with Shards.
	Shards    []KVShard
	Policy    uint8
	Hedge     bool
	NearSites []string
}

// KVShard is one shard of a replicated pool.
type KVShard struct {
	// Name is its ketama name ("": its first replica's address).
	Name   string
	Weight uint16
}

// KVServer is one server of a KVPool.
type KVServer struct {
	Addr   netip.AddrPort
	Weight uint16
	Site   string
	Flags  uint8
	// Shard is the index in KVPool.Shards of the shard the server is a
	// replica of, and Tier its storage (free text); with Shards only.
	Shard uint16
	Tier  string
}

// Replicated reports whether p has shards of replicas.
func (p *KVPool) Replicated() bool { return len(p.Shards) > 0 }

// Newer reports whether version (v, origin) of p comes after q's: a
// higher version, or the same version made at a higher origin.
func (p *KVPool) Newer(q *KVPool) bool {
	if p.Version != q.Version {
		return p.Version > q.Version
	}
	return p.Origin > q.Origin
}

// Clone returns a deep copy.
func (p KVPool) Clone() KVPool {
	p.Servers = slices.Clone(p.Servers)
	p.Shards = slices.Clone(p.Shards)
	p.NearSites = slices.Clone(p.NearSites)
	return p
}

// kvSites returns p's site table: the servers' sites in the order they
// first name them, then, for a replicated pool, the near sites no server
// is at.
func kvSites(p *KVPool) []string {
	var sites []string
	for _, s := range p.Servers {
		if !slices.Contains(sites, s.Site) {
			sites = append(sites, s.Site)
		}
	}
	if p.Replicated() {
		for _, s := range p.NearSites {
			if !slices.Contains(sites, s) {
				sites = append(sites, s)
			}
		}
	}
	return sites
}

// kvTiers returns p's tier table: the servers' tiers in the order they
// first name them, none ("") left out.
func kvTiers(p *KVPool) []string {
	var tiers []string
	for _, s := range p.Servers {
		if s.Tier != "" && !slices.Contains(tiers, s.Tier) {
			tiers = append(tiers, s.Tier)
		}
	}
	return tiers
}

// KVPoolLen returns the length of p's message, which may exceed
// MaxKVPoolLen (AppendKVPool then refuses it).
func KVPoolLen(p *KVPool) int {
	n := kvPoolFixedLen + len(p.Name) + kvServerLen*len(p.Servers)
	for _, s := range kvSites(p) {
		n += 1 + len(s)
	}
	if !p.Replicated() {
		return n
	}
	n += kvReplFixedLen + len(p.NearSites) + kvReplicaLen*len(p.Servers)
	for _, t := range kvTiers(p) {
		n += 1 + len(t)
	}
	for _, sh := range p.Shards {
		n += kvShardFixedLen + len(sh.Name)
	}
	return n
}

// checkKVRepl checks what AppendKVPool needs of p's replication: none
// at all without shards, and with them bounds that fit the section.
func checkKVRepl(p *KVPool) error {
	if !p.Replicated() {
		if p.Policy != 0 || p.Hedge || len(p.NearSites) > 0 || slices.ContainsFunc(p.Servers, func(s KVServer) bool { return s.Shard != 0 || s.Tier != "" }) {
			return ErrMalformed
		}
		return nil
	}
	if p.Policy >= KVPolicies || len(p.Shards) > 0xffff || len(p.NearSites) > 255 {
		return ErrMalformed
	}
	for _, sh := range p.Shards {
		if sh.Weight == 0 || len(sh.Name) > MaxKVLabelLen {
			return ErrMalformed
		}
	}
	for _, s := range p.NearSites {
		if len(s) == 0 || len(s) > MaxNameLen {
			return ErrMalformed
		}
	}
	held := make([]bool, len(p.Shards))
	for _, s := range p.Servers {
		if int(s.Shard) >= len(p.Shards) || len(s.Tier) > MaxKVLabelLen {
			return ErrMalformed
		}
		held[s.Shard] = true
	}
	if slices.Contains(held, false) {
		return ErrMalformed // a shard without a replica
	}
	if len(kvTiers(p)) > 255 {
		return ErrKVPoolTooLarge
	}
	return nil
}

// AppendKVPool appends the message carrying p, sent by sender.
func AppendKVPool(b []byte, sender SiteID, p *KVPool) ([]byte, error) {
	switch {
	case sender == 0 || p.Origin == 0 || p.Version == 0 || len(p.Name) == 0 || len(p.Name) > MaxKVNameLen:
		return b, ErrMalformed
	case !p.VIP.Addr().Is4() || len(p.Servers) == 0:
		return b, ErrMalformed
	case KVPoolLen(p) > MaxKVPoolLen:
		return b, ErrKVPoolTooLarge
	}
	for _, s := range p.Servers {
		if len(s.Site) == 0 || len(s.Site) > MaxNameLen || !s.Addr.Addr().Is4() {
			return b, ErrMalformed
		}
	}
	if err := checkKVRepl(p); err != nil {
		return b, err
	}
	sites := kvSites(p)
	if len(sites) > 255 {
		return b, ErrKVPoolTooLarge
	}
	var flags uint8
	if p.Replicated() {
		flags = KVPoolFlagReplicated
	}
	start := len(b)
	b = append(b, make([]byte, kvPoolFixedLen)...)
	h := b[start:]
	PutCommon(h, TypeKVPool, flags)
	be.PutUint32(h[4:], uint32(sender))
	be.PutUint32(h[8:], uint32(p.Origin))
	be.PutUint64(h[12:], p.Version)
	be.PutUint32(h[20:], p.Network)
	vip := p.VIP.Addr().As4()
	copy(h[24:28], vip[:])
	be.PutUint16(h[28:], p.VIP.Port())
	h[30], h[31] = p.Hash, byte(len(sites))
	be.PutUint16(h[32:], uint16(len(p.Servers)))
	h[34] = byte(len(p.Name))
	b = append(b, p.Name...)
	for _, s := range sites {
		b = append(append(b, byte(len(s))), s...)
	}
	for _, s := range p.Servers {
		ip := s.Addr.Addr().As4()
		b = append(b, ip[:]...)
		b = be.AppendUint16(b, s.Addr.Port())
		b = be.AppendUint16(b, s.Weight)
		b = append(b, byte(slices.Index(sites, s.Site)), s.Flags)
	}
	if p.Replicated() {
		b = appendKVRepl(b, p, sites)
	}
	return b, nil
}

// appendKVRepl appends the replication section of p, whose site table
// is sites; checkKVRepl accepted p.
func appendKVRepl(b []byte, p *KVPool, sites []string) []byte {
	tiers := kvTiers(p)
	var rf uint8
	if p.Hedge {
		rf |= KVPoolHedge
	}
	b = append(b, p.Policy, rf, byte(len(p.NearSites)), byte(len(tiers)))
	b = be.AppendUint16(b, uint16(len(p.Shards)))
	for _, s := range p.NearSites {
		b = append(b, byte(slices.Index(sites, s)))
	}
	for _, t := range tiers {
		b = append(append(b, byte(len(t))), t...)
	}
	for _, sh := range p.Shards {
		b = be.AppendUint16(b, sh.Weight)
		b = append(append(b, byte(len(sh.Name))), sh.Name...)
	}
	for _, s := range p.Servers {
		b = be.AppendUint16(b, s.Shard)
		b = append(b, byte(slices.Index(tiers, s.Tier)+1))
	}
	return b
}

// ParseKVPool decodes a KV pool message into p, reusing p.Servers'
// storage, and returns its sender. Unlike the data path's parsers it
// allocates the names it returns (a pool changes rarely).
func ParseKVPool(b []byte, p *KVPool) (SiteID, error) {
	if err := expect(b, TypeKVPool, kvPoolFixedLen); err != nil {
		return 0, err
	}
	if len(b) > MaxKVPoolLen {
		return 0, ErrMalformed
	}
	replicated := b[3]&KVPoolFlagReplicated != 0
	sender := SiteID(be.Uint32(b[4:]))
	origin := SiteID(be.Uint32(b[8:]))
	version := be.Uint64(b[12:])
	nsites, nservers, nameLen := int(b[31]), int(be.Uint16(b[32:])), int(b[34])
	if sender == 0 || origin == 0 || version == 0 || nameLen == 0 || nameLen > MaxKVNameLen || nsites == 0 || nservers == 0 {
		return 0, ErrMalformed
	}
	off := kvPoolFixedLen
	if len(b) < off+nameLen {
		return 0, ErrTruncated
	}
	name := b[off : off+nameLen]
	off += nameLen
	var sites [255][]byte
	off, err := parseKVLabels(b, off, sites[:nsites], MaxNameLen)
	if err != nil {
		return 0, err
	}
	switch rest := len(b) - off; {
	case rest < nservers*kvServerLen:
		return 0, ErrTruncated
	case rest != nservers*kvServerLen && !replicated:
		return 0, ErrMalformed
	}
	var vip [4]byte
	copy(vip[:], b[24:28])
	*p = KVPool{Name: string(name), Origin: origin, Version: version, Network: be.Uint32(b[20:]),
		VIP: netip.AddrPortFrom(netip.AddrFrom4(vip), be.Uint16(b[28:])), Hash: b[30], Servers: p.Servers[:0]}
	names := make([]string, nsites)
	for i := range nsites {
		names[i] = string(sites[i])
	}
	for i := range nsites {
		for j := range i {
			if names[i] == names[j] {
				return 0, ErrMalformed
			}
		}
	}
	// Sites are listed in the order servers (then near sites) first name
	// them, each once, so that a pool has exactly one encoding.
	next := 0
	for range nservers {
		e := b[off : off+kvServerLen]
		off += kvServerLen
		idx := int(e[8])
		if idx > next || idx >= nsites {
			return 0, ErrMalformed
		}
		if idx == next {
			next++
		}
		var ip [4]byte
		copy(ip[:], e[:4])
		p.Servers = append(p.Servers, KVServer{Addr: netip.AddrPortFrom(netip.AddrFrom4(ip), be.Uint16(e[4:])),
			Weight: be.Uint16(e[6:]), Site: names[idx], Flags: e[9]})
	}
	if replicated {
		if next, err = parseKVRepl(b, off, p, names, next); err != nil {
			return 0, err
		}
	}
	if next != nsites {
		return 0, ErrMalformed
	}
	return sender, nil
}

// parseKVLabels reads len(out) labels of 1..maxLen bytes, each after its
// length byte, from b at off into out (slices of b), and returns the
// offset after them.
func parseKVLabels(b []byte, off int, out [][]byte, maxLen int) (int, error) {
	for i := range out {
		if off >= len(b) {
			return 0, ErrTruncated
		}
		l := int(b[off])
		if l == 0 || l > maxLen {
			return 0, ErrMalformed
		}
		if off+1+l > len(b) {
			return 0, ErrTruncated
		}
		out[i] = b[off+1 : off+1+l]
		off += 1 + l
	}
	return off, nil
}

// parseKVRepl reads the replication section at off, the rest of b, into
// p, whose servers are parsed; sites is the site table and next the
// number of its entries the servers named. It returns the number named
// by the servers and near sites together.
func parseKVRepl(b []byte, off int, p *KVPool, sites []string, next int) (int, error) {
	if len(b)-off < kvReplFixedLen {
		return 0, ErrTruncated
	}
	policy, rf, nnear, ntiers, nshards := b[off], b[off+1], int(b[off+2]), int(b[off+3]), int(be.Uint16(b[off+4:]))
	off += kvReplFixedLen
	if policy >= KVPolicies || rf&^KVPoolHedge != 0 || nshards == 0 {
		return 0, ErrMalformed
	}
	p.Policy, p.Hedge = policy, rf&KVPoolHedge != 0
	if len(b)-off < nnear {
		return 0, ErrTruncated
	}
	for _, idx := range b[off : off+nnear] {
		if int(idx) > next || int(idx) >= len(sites) {
			return 0, ErrMalformed
		}
		if int(idx) == next {
			next++
		}
		p.NearSites = append(p.NearSites, sites[idx])
	}
	off += nnear
	var tierb [255][]byte
	off, err := parseKVLabels(b, off, tierb[:ntiers], MaxKVLabelLen)
	if err != nil {
		return 0, err
	}
	tiers := make([]string, ntiers)
	for i := range ntiers {
		tiers[i] = string(tierb[i])
		if slices.Contains(tiers[:i], tiers[i]) {
			return 0, ErrMalformed
		}
	}
	p.Shards = make([]KVShard, 0, min(nshards, len(b)/kvShardFixedLen))
	for range nshards {
		if len(b)-off < kvShardFixedLen {
			return 0, ErrTruncated
		}
		w, l := be.Uint16(b[off:]), int(b[off+2])
		off += kvShardFixedLen
		if w == 0 {
			return 0, ErrMalformed
		}
		if len(b)-off < l {
			return 0, ErrTruncated
		}
		p.Shards = append(p.Shards, KVShard{Name: string(b[off : off+l]), Weight: w})
		off += l
	}
	switch rest := len(b) - off; {
	case rest < kvReplicaLen*len(p.Servers):
		return 0, ErrTruncated
	case rest > kvReplicaLen*len(p.Servers):
		return 0, ErrMalformed
	}
	held := make([]bool, nshards)
	ntier := 0 // tiers are listed in the order servers first name them
	for i := range p.Servers {
		s := &p.Servers[i]
		shard, tier := int(be.Uint16(b[off:])), int(b[off+2])
		off += kvReplicaLen
		if shard >= nshards || tier > ntier+1 || tier > ntiers {
			return 0, ErrMalformed
		}
		if tier == ntier+1 {
			ntier++
		}
		held[shard] = true
		s.Shard = uint16(shard)
		if tier > 0 {
			s.Tier = tiers[tier-1]
		}
	}
	if ntier != ntiers || slices.Contains(held, false) {
		return 0, ErrMalformed
	}
	return next, nil
}

// AppendKVDigest appends a digest message.
func AppendKVDigest(b []byte, sender SiteID, count uint32, digest uint64) []byte {
	var h [KVDigestLen]byte
	PutCommon(h[:], TypeKVDigest, 0)
	be.PutUint32(h[4:], uint32(sender))
	be.PutUint32(h[8:], count)
	be.PutUint64(h[12:], digest)
	return append(b, h[:]...)
}

// ParseKVDigest decodes a digest message: sender, pool count and digest.
func ParseKVDigest(b []byte) (SiteID, uint32, uint64, error) {
	if err := expect(b, TypeKVDigest, KVDigestLen); err != nil {
		return 0, 0, 0, err
	}
	sender := SiteID(be.Uint32(b[4:]))
	if sender == 0 || len(b) != KVDigestLen {
		return 0, 0, 0, ErrMalformed
	}
	return sender, be.Uint32(b[8:]), be.Uint64(b[12:]), nil
}
