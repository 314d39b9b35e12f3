// Package fdb is a site's MAC-learning forwarding database for one virtual
// network: which site each Ethernet address was last seen at (this site
// itself for hosts behind the local bridge), with ageing and moves when an
// address appears at another site (a migrated host).
//
// Lookups and refreshes of known addresses take only a read lock and
// atomics, so the data path's goroutines do not contend on the common case.
package fdb

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// MAC is an Ethernet address.
type MAC [6]byte

// Local is the site value of addresses learned behind this site's bridge.
const Local wire.SiteID = 0

// DefaultTTL is how long an address is kept without being seen, as in the
// Linux bridge.
const DefaultTTL = 300 * time.Second

// IsGroup reports whether m is a broadcast or multicast address.
func (m MAC) IsGroup() bool { return m[0]&1 == 1 }

func (m MAC) String() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 17)
	for i, x := range m {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hex[x>>4], hex[x&15])
	}
	return string(b)
}

type entry struct {
	site atomic.Uint32
	seen atomic.Int64 // monotonic nanoseconds
}

// Table is a forwarding database. It is safe for concurrent use.
type Table struct {
	ttl   int64
	mu    sync.RWMutex
	m     map[MAC]*entry
	moves atomic.Uint64
}

// New returns an empty table whose entries expire after ttl unseen.
func New(ttl time.Duration) *Table {
	return &Table{ttl: int64(ttl), m: make(map[MAC]*entry)}
}

// Learn records that mac was seen at site at time now (monotonic
// nanoseconds) and reports whether the address moved from another site.
// Group addresses are never learned.
func (t *Table) Learn(mac MAC, site wire.SiteID, now int64) (moved bool) {
	if mac.IsGroup() {
		return false
	}
	t.mu.RLock()
	e := t.m[mac]
	t.mu.RUnlock()
	if e != nil && wire.SiteID(e.site.Load()) == site {
		e.seen.Store(now)
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e = t.m[mac]
	if e == nil {
		e = &entry{}
		t.m[mac] = e
	} else if wire.SiteID(e.site.Load()) != site {
		moved = true
		t.moves.Add(1)
	}
	e.site.Store(uint32(site))
	e.seen.Store(now)
	return moved
}

// Lookup returns the site mac was last seen at, if it has not expired.
func (t *Table) Lookup(mac MAC, now int64) (wire.SiteID, bool) {
	t.mu.RLock()
	e := t.m[mac]
	t.mu.RUnlock()
	if e == nil || now-e.seen.Load() > t.ttl {
		return 0, false
	}
	return wire.SiteID(e.site.Load()), true
}

// Expire removes entries unseen for longer than the TTL and returns how
// many it removed.
func (t *Table) Expire(now int64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for mac, e := range t.m {
		if now-e.seen.Load() > t.ttl {
			delete(t.m, mac)
			n++
		}
	}
	return n
}

// ForgetSite removes every address learned at site (a site that left or
// died), so frames for them are flooded until they are learned again.
func (t *Table) ForgetSite(site wire.SiteID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for mac, e := range t.m {
		if wire.SiteID(e.site.Load()) == site {
			delete(t.m, mac)
			n++
		}
	}
	return n
}

// Moves counts addresses that moved between sites.
func (t *Table) Moves() uint64 { return t.moves.Load() }

// Entry is one row of a snapshot.
type Entry struct {
	MAC  MAC
	Site wire.SiteID
	Age  time.Duration
}

// Snapshot returns the live entries sorted by address.
func (t *Table) Snapshot(now int64) []Entry {
	t.mu.RLock()
	out := make([]Entry, 0, len(t.m))
	for mac, e := range t.m {
		age := now - e.seen.Load()
		if age <= t.ttl {
			out = append(out, Entry{MAC: mac, Site: wire.SiteID(e.site.Load()), Age: time.Duration(age)})
		}
	}
	t.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return string(out[i].MAC[:]) < string(out[j].MAC[:]) })
	return out
}
