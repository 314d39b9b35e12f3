package router

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/detour-overlay/detour/internal/kv/ring"
)

// Changes at run time. A table is immutable, so a change to a pool's
// servers is made on its spec (Apply: old spec and change in, new spec
// out, pure) and a new table is built from the result (Replace), which
// the agent swaps into the data path's atomic pointer. Servers that stay
// keep their *Server, so their health, MAC and counters carry over, and
// the client marks and flow slots stay valid: no request in flight is
// lost across the swap.

// Op is the kind of a Change.
type Op uint8

// The changes Apply makes.
const (
	// AddServer adds a server at the end of the pool (so that, with
	// ketama and equal weights, only the keys it takes move).
	AddServer Op = iota + 1
	// RemoveServer removes a server from the ring: its keys go to the
	// servers the new ring names.
	RemoveServer
	// Drain keeps a server in the ring but gives it no keys: each goes
	// to its failover, as if the server were down.
	Drain
	// Undrain gives a drained server its keys back: exactly those it
	// had, since the ring never changed.
	Undrain
)

func (o Op) String() string {
	switch o {
	case AddServer:
		return "add-server"
	case RemoveServer:
		return "remove-server"
	case Drain:
		return "drain"
	case Undrain:
		return "undrain"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Change is one change to a pool's servers. Server.Addr names the server;
// for AddServer, Site, SiteName and Weight describe it too.
type Change struct {
	Op     Op
	Server ServerSpec
}

// Limits of a change, the configuration's (config.MaxKVWeight and
// config.MaxKVServers).
const (
	MaxWeight  = 1000
	MaxServers = 1024
)

// Errors of Apply; each is wrapped with the pool and server it is about.
var (
	ErrUnknownServer = errors.New("no such server in the pool")
	ErrDuplicate     = errors.New("the pool already has this server")
	ErrBadAddress    = errors.New("a server's address must be IPv4:port in the network's subnet, other than the pool's virtual address")
	ErrBadWeight     = fmt.Errorf("the weight must be 1..%d", MaxWeight)
	ErrNoSite        = errors.New("a new server needs its site")
	ErrLastServer    = errors.New("the change would leave the pool no server to send keys to")
	ErrDrained       = errors.New("the server is already drained")
	ErrNotDrained    = errors.New("the server is not drained")
	ErrTooMany       = fmt.Errorf("a pool holds at most %d servers", MaxServers)
	ErrOp            = errors.New("unknown change")
	ErrReplicated    = errors.New("a pool with shards of replicas is changed only in the configuration, for now")
)

// Apply returns the pool ps after change c, with its version one higher,
// or an error saying why c cannot be made. subnet is the pool's network's.
// ps is not modified.
func Apply(subnet netip.Prefix, ps PoolSpec, c Change) (PoolSpec, error) {
	addr := c.Server.Addr
	fail := func(err error) (PoolSpec, error) {
		return ps, fmt.Errorf("pool %s, server %v: %w", ps.Name, addr, err)
	}
	if len(ps.Shards) > 0 {
		return fail(ErrReplicated)
	}
	out := clonePool(ps)
	if out.Version == 0 {
		out.Version = 1
	}
	i := slices.IndexFunc(out.Servers, func(s ServerSpec) bool { return s.Addr == addr })
	switch c.Op {
	case AddServer:
		s := c.Server
		switch {
		case i >= 0:
			return fail(ErrDuplicate)
		case !addr.Addr().Is4() || addr.Port() == 0 || !subnet.Contains(addr.Addr()) || addr.Addr() == ps.VIP.Addr():
			return fail(ErrBadAddress)
		case s.Weight < 1 || s.Weight > MaxWeight:
			return fail(ErrBadWeight)
		case s.SiteName == "" || s.Site == 0:
			return fail(ErrNoSite)
		case len(out.Servers) >= MaxServers:
			return fail(ErrTooMany)
		}
		s.Drained = false
		out.Servers = append(out.Servers, s)
	case RemoveServer:
		if i < 0 {
			return fail(ErrUnknownServer)
		}
		out.Servers = slices.Delete(out.Servers, i, i+1)
		if !anyUndrained(out.Servers) {
			return fail(ErrLastServer)
		}
	case Drain:
		switch {
		case i < 0:
			return fail(ErrUnknownServer)
		case out.Servers[i].Drained:
			return fail(ErrDrained)
		}
		out.Servers[i].Drained = true
		if !anyUndrained(out.Servers) {
			return fail(ErrLastServer)
		}
	case Undrain:
		switch {
		case i < 0:
			return fail(ErrUnknownServer)
		case !out.Servers[i].Drained:
			return fail(ErrNotDrained)
		}
		out.Servers[i].Drained = false
	default:
		return fail(ErrOp)
	}
	// The ring must accept the result (jump refuses unequal weights).
	rs := make([]ring.Server, len(out.Servers))
	for j, s := range out.Servers {
		rs[j] = ring.Server{Host: s.Addr.Addr().String(), Port: s.Addr.Port(), Weight: s.Weight}
	}
	if _, err := ring.New(out.Hash, rs); err != nil {
		return fail(err)
	}
	out.Version++
	return out, nil
}

// anyUndrained reports whether some server may take keys.
func anyUndrained(ss []ServerSpec) bool {
	return slices.ContainsFunc(ss, func(s ServerSpec) bool { return !s.Drained })
}

// Replace returns a new table like t with pool ps (by name) in place of
// the pool of the same name. The new table shares t's client marks, the
// pool's counters and the *Server of every server that stays, so the
// data path may switch to it between any two frames.
func (t *Table) Replace(ps PoolSpec) (*Table, error) {
	spec := cloneSpec(t.spec)
	i := slices.IndexFunc(spec.Pools, func(p PoolSpec) bool { return p.Name == ps.Name })
	if i < 0 {
		return nil, fmt.Errorf("router: no pool %q", ps.Name)
	}
	spec.Pools[i] = clonePool(ps)
	return build(spec, t)
}

// Spec returns the spec the table was built from (a copy).
func (t *Table) Spec() Spec { return cloneSpec(t.spec) }

// Subnet returns the network's subnet.
func (t *Table) Subnet() netip.Prefix { return t.subnet }

// Spec returns the spec the pool was built from (a copy), with its
// version.
func (p *Pool) Spec() PoolSpec { return clonePool(p.spec) }

// ServerAt returns the pool's server at addr, or nil.
func (p *Pool) ServerAt(addr netip.AddrPort) *Server {
	for _, s := range p.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

func cloneSpec(s Spec) Spec {
	s.Pools = slices.Clone(s.Pools)
	for i := range s.Pools {
		s.Pools[i] = clonePool(s.Pools[i])
	}
	return s
}

func clonePool(p PoolSpec) PoolSpec {
	p.Servers = slices.Clone(p.Servers)
	p.Shards = slices.Clone(p.Shards)
	p.NearSites = slices.Clone(p.NearSites)
	if p.Version == 0 {
		p.Version = 1
	}
	return p
}
