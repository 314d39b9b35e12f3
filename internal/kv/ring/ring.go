// Package ring places keys on the servers of a key-value pool by consistent
// hashing, so that every gateway, and every client library configured with
// the same servers, sends a key to the same server.
//
// Two placements are offered:
//
//   - Ketama is libmemcached's weighted ketama
//     (MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED) and, for the same servers,
//     twemproxy's `hash: md5` with `distribution: ketama`; the two programs
//     build the same continuum (see below), and docs/kv.md gives the
//     agreement measured against both on 100,000 keys.
//   - Jump is Lamping and Veach's jump consistent hash ("A Fast, Minimal
//     Memory, Consistent Hash Algorithm", 2014) over the key's 64-bit
//     xxHash (XXH64, seed 0). It needs no table, but all servers weigh the
//     same.
//
// # The ketama continuum
//
// Each server gets a number of points proportional to its weight,
//
//	points = floor(weight/total × 160/4 × nservers + 1e-10) × 4
//
// computed in single precision as both C implementations do. For point
// group i (0, 1, …, points/4−1) the MD5 digest of "NAME-i" gives four
// points, the digest's bytes 0–3, 4–7, 8–11 and 12–15 each read as a
// little-endian uint32. NAME is the server's host as written when its port
// is 11211 and "host:port" otherwise (both programs), or the name given to
// a twemproxy server ("host:port:weight name"). The points are sorted by
// value, ties by server order. A key belongs to the first point at or
// after the little-endian uint32 of the first four bytes of MD5(key),
// wrapping to the first point; a pool of one server owns every key.
//
// # Failover
//
// Next answers where a key goes when its owner is down: the next server
// on the ring (ketama) or on a fixed sequence of rehashes (jump) that the
// caller's skip function does not exclude. The ring itself never changes
// when a server fails, so the keys of healthy servers never move (unlike
// twemproxy's auto_eject_hosts, which rebuilds the continuum without the
// failed server and so moves keys between healthy servers too).
package ring

import (
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Hash names a placement algorithm.
type Hash int

// The placements.
const (
	// Ketama is weighted ketama over MD5 (libmemcached, twemproxy).
	Ketama Hash = iota
	// Jump is the jump consistent hash over XXH64 of the key.
	Jump
)

// String returns the name used in configuration files.
func (h Hash) String() string {
	switch h {
	case Ketama:
		return "ketama"
	case Jump:
		return "jump"
	}
	return "hash(" + strconv.Itoa(int(h)) + ")"
}

// ParseHash reads a placement name as written in a configuration: "ketama"
// (also the empty string, the default) or "jump".
func ParseHash(s string) (Hash, error) {
	switch s {
	case "", "ketama":
		return Ketama, nil
	case "jump":
		return Jump, nil
	}
	return 0, fmt.Errorf("ring: unknown hash %q (want ketama or jump)", s)
}

// Server is one member of a pool.
type Server struct {
	// Host is the server's address as written in the configuration; it is
	// part of the ketama point names, so it must be written the same way
	// as in the clients' and proxies' configurations.
	Host string
	// Port is the server's port; 11211 is left out of point names.
	Port uint16
	// Weight scales the server's share of the ketama continuum; 0 counts
	// as 1, as in libmemcached.
	Weight uint32
	// Name, when set, replaces host[:port] in the ketama point names, as a
	// twemproxy server written "host:port:weight name" does.
	Name string
}

// DefaultPort is memcached's port, which ketama leaves out of point names.
const DefaultPort = 11211

// pointsPerServer is the number of ketama points a server of average
// weight gets, and pointsPerHash the points taken from one MD5 digest.
const (
	pointsPerServer = 160
	pointsPerHash   = 4
)

// Ring places keys on a fixed list of servers. It is immutable and safe
// for concurrent use; a changed pool gets a new Ring.
type Ring struct {
	hash Hash
	n    int
	// points are the ketama continuum's values in ascending order and
	// owners the server index of each.
	points []uint32
	owners []int32
}

// Errors New returns.
var (
	ErrNoServers     = errors.New("ring: a pool needs at least one server")
	ErrJumpWeights   = errors.New("ring: jump gives every server the same share; weights must be equal")
	ErrTooManyServer = errors.New("ring: too many servers")
)

// New builds the ring of servers (in the configuration's order, which
// ketama uses to break ties and which server indexes refer to) for hash h.
func New(h Hash, servers []Server) (*Ring, error) {
	if len(servers) == 0 {
		return nil, ErrNoServers
	}
	if len(servers) > math.MaxInt32/pointsPerServer {
		return nil, ErrTooManyServer
	}
	r := &Ring{hash: h, n: len(servers)}
	switch h {
	case Ketama:
		r.buildKetama(servers)
	case Jump:
		for _, s := range servers {
			if weight(s) != weight(servers[0]) {
				return nil, ErrJumpWeights
			}
		}
	default:
		return nil, fmt.Errorf("ring: unknown hash %d", int(h))
	}
	return r, nil
}

// weight returns a server's weight with 0 read as 1.
func weight(s Server) uint32 {
	if s.Weight == 0 {
		return 1
	}
	return s.Weight
}

// PointName returns the string whose MD5 digests give a server's ketama
// points, without the "-i" suffix.
func PointName(s Server) string {
	if s.Name != "" {
		return s.Name
	}
	if s.Port == DefaultPort {
		return s.Host
	}
	return s.Host + ":" + strconv.Itoa(int(s.Port))
}

// KetamaPoints returns the number of continuum points a server of weight w
// gets in a pool of n servers whose weights add up to total. The
// arithmetic is single precision with every step rounded, as in
// libmemcached's update_continuum and twemproxy's ketama_update.
func KetamaPoints(w, total uint64, n int) int {
	pct := float32(w) / float32(total)
	x := float32(pct * pointsPerServer)
	x = float32(x / pointsPerHash)
	x = float32(x * float32(n))
	x = float32(x + 1e-10)
	return int(math.Floor(float64(x))) * pointsPerHash
}

// point is one continuum point while the ring is built.
type point struct {
	value uint32
	owner int32
}

// buildKetama fills the continuum.
func (r *Ring) buildKetama(servers []Server) {
	var total uint64
	for _, s := range servers {
		total += uint64(weight(s))
	}
	var pts []point
	for i, s := range servers {
		name := PointName(s)
		count := KetamaPoints(uint64(weight(s)), total, len(servers))
		for g := 0; g < count/pointsPerHash; g++ {
			d := md5.Sum([]byte(name + "-" + strconv.Itoa(g)))
			for k := 0; k < pointsPerHash; k++ {
				v := binary.LittleEndian.Uint32(d[4*k:])
				pts = append(pts, point{value: v, owner: int32(i)})
			}
		}
	}
	sort.Slice(pts, func(a, b int) bool {
		if pts[a].value != pts[b].value {
			return pts[a].value < pts[b].value
		}
		return pts[a].owner < pts[b].owner
	})
	r.points = make([]uint32, len(pts))
	r.owners = make([]int32, len(pts))
	for i, p := range pts {
		r.points[i] = p.value
		r.owners[i] = p.owner
	}
}

// Hash returns the ring's placement algorithm.
func (r *Ring) Hash() Hash { return r.hash }

// Len returns the number of servers.
func (r *Ring) Len() int { return r.n }

// Points returns the number of ketama points server i holds (0 for jump).
func (r *Ring) Points(i int) int {
	c := 0
	for _, o := range r.owners {
		if int(o) == i {
			c++
		}
	}
	return c
}

// KeyHash returns the 32-bit hash ketama looks up for a key: the first four
// bytes of its MD5 digest, little-endian (libhashkit's and twemproxy's
// hash_md5).
func KeyHash(key []byte) uint32 {
	d := md5.Sum(key)
	return binary.LittleEndian.Uint32(d[:4])
}

// Owner returns the index of the server that holds key.
func (r *Ring) Owner(key []byte) int {
	if r.n == 1 {
		return 0
	}
	if r.hash == Jump {
		return JumpHash(xxhash.Sum64(key), r.n)
	}
	return int(r.owners[r.search(KeyHash(key))])
}

// search returns the continuum position of hash h: the first point at or
// after it, or 0 past the last.
func (r *Ring) search(h uint32) int {
	lo, hi := 0, len(r.points)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if r.points[mid] < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(r.points) {
		return 0
	}
	return lo
}

// Next returns the server that should serve key when the servers for which
// skip returns true are unavailable: the owner if skip does not exclude
// it, else the next server on the ring that skip does not exclude, or -1
// when skip excludes every server. Next(key, func(int) bool { return
// false }) is Owner(key), and the answer for a key depends only on which
// servers are skipped, so keys whose owner is not skipped never move.
func (r *Ring) Next(key []byte, skip func(int) bool) int {
	if r.hash == Jump {
		return r.nextJump(key, skip)
	}
	if r.n == 1 {
		if skip(0) {
			return -1
		}
		return 0
	}
	start := r.search(KeyHash(key))
	last := int32(-1)
	for i := 0; i < len(r.owners); i++ {
		o := r.owners[(start+i)%len(r.owners)]
		if o == last {
			continue
		}
		if !skip(int(o)) {
			return int(o)
		}
		last = o
	}
	return -1
}

// jumpRetries is how many rehashed jumps nextJump tries before it walks the
// servers in order.
const jumpRetries = 32

// nextJump is Next for jump: the owner, then the servers chosen by jumps
// over a fixed sequence of rehashes of the key's hash, then the servers
// after the owner in index order.
func (r *Ring) nextJump(key []byte, skip func(int) bool) int {
	h := xxhash.Sum64(key)
	b := JumpHash(h, r.n)
	if !skip(b) {
		return b
	}
	for i := uint64(1); i <= jumpRetries; i++ {
		c := JumpHash(mix64(h+i*0x9e3779b97f4a7c15), r.n)
		if !skip(c) {
			return c
		}
	}
	for i := 1; i < r.n; i++ {
		c := (b + i) % r.n
		if !skip(c) {
			return c
		}
	}
	return -1
}

// mix64 is the finalizer of SplitMix64, which spreads a counter-derived
// value over all 64 bits.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// JumpHash is Lamping and Veach's jump consistent hash: the bucket in [0,
// n) of the 64-bit key hash k. Growing n to n+1 moves only 1/(n+1) of the
// keys, all to the new bucket.
func JumpHash(k uint64, n int) int {
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		k = k*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((k>>33)+1)))
	}
	return int(b)
}
