package router

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/wire"
)

// TCP to a pool's virtual address (issue 17, item 3). Each gateway runs a
// TCP terminator (package tcpterm): a user-space TCP stack on a TAP
// device of its own on the site's bridge, with the MAC TermMAC(site) and
// the pools' virtual addresses. The router is its link layer: every frame
// of a terminator connection passes through Worker.Egress, which puts in
// the MACs and says where the frame goes.
//
//	client ──► bridge ──► detour TAP (Egress: TCP to VIP:port)
//	        dst MAC = terminator, src MAC = virtual ──► bridge ──► terminator
//	terminator ──► bridge ──► detour TAP (Egress: from the terminator)
//	        to a client: dst MAC = the client's (learned from its
//	                     frames), src MAC = virtual ──► bridge ──► client
//	        to a local server: dst MAC = the server's ──► bridge ──► server
//	        to a remote server: dst MAC = virtual ──► overlay ──► its
//	                     site's Inbound.Deliver: dst MAC = the server's,
//	                     and the connection (server, VIP:port) is noted
//	                     as the source site's (from the terminator MAC)
//	server ──► VIP:port (ARP answered with the virtual MAC) ──► its
//	        gateway's Egress: a noted connection ──► dst MAC = the
//	        terminator of the noted site ──► overlay ──► that site's
//	        bridge ──► its terminator; otherwise to this site's own
//	        terminator over the bridge.
//
// The terminator connects to servers from the pool's virtual address and
// an ephemeral port. Two sites may pick the same port towards one
// server: the server's gateway then keeps the connection it noted first
// (until it has been idle for TCPConnIdle) and drops the other's frames,
// whose connection attempt times out and is made again from another port.

// TermMAC is the MAC of a site's TCP terminator: locally administered,
// 02:6c followed by the site's ID, so that every gateway knows every
// other's and the site that sent a frame is in its source address.
func TermMAC(site wire.SiteID) [6]byte {
	return [6]byte{0x02, 0x6c, byte(site >> 24), byte(site >> 16), byte(site >> 8), byte(site)}
}

// termSite returns the site of a terminator MAC.
func termSite(mac []byte) (wire.SiteID, bool) {
	if mac[0] != 0x02 || mac[1] != 0x6c {
		return 0, false
	}
	return wire.SiteID(binary.BigEndian.Uint32(mac[2:6])), true
}

// Bounds of the TCP state.
const (
	// TCPConnSlots is the number of remote terminator connections to this
	// site's servers a table notes.
	TCPConnSlots = 4096
	// TCPConnIdle frees a noted connection without frames for this long
	// (seconds); the terminators close pooled connections idle for less.
	TCPConnIdle = 120
	tcpProbe    = 4
	// tcpClientSlots is the size of a Worker's table of client MACs.
	tcpClientSlots = 4096
)

// TCPStats are the counters of the TCP path of a table.
type TCPStats struct {
	ToTerminator   atomic.Uint64 // frames handed to this site's terminator
	FromTerminator atomic.Uint64 // frames of this site's terminator sent on
	Remote         atomic.Uint64 // frames between a local server and another site's terminator
	DropDisabled   atomic.Uint64 // frames to a virtual address with no terminator running
	DropNoClient   atomic.Uint64 // terminator frames to a client whose MAC is unknown
	DropNoMAC      atomic.Uint64 // frames for a local server whose MAC is unknown
	DropConflict   atomic.Uint64 // a second site's connection on a noted (server, port)
	DropFull       atomic.Uint64 // no room to note a connection
	DropOther      atomic.Uint64 // other TCP frames (fragments, VLAN tags, unknown ports)
}

// tcpConn is a noted connection of another site's terminator to a local
// server: a hash of (server address and port, virtual address and port),
// the site, and when it last had a frame (seconds, never 0).
type tcpConn struct {
	key  atomic.Uint64
	site atomic.Uint32
	seen atomic.Uint32
}

// tcpState is a table's TCP state, shared by its successors.
type tcpState struct {
	enabled atomic.Bool
	sink    atomic.Pointer[sinkBox]
	conns   [TCPConnSlots]tcpConn
	Stats   TCPStats
}

// TCPSink takes the frames for this site's terminator in the process,
// instead of over the bridge. Input must copy what it keeps and must not
// block: it runs on the data path's device loop.
type TCPSink interface {
	Input(frame []byte)
}

type sinkBox struct{ s TCPSink }

// SetTCPSink hands the frames of clients and local servers for this
// site's terminator to s (nil: over the bridge to the terminator's MAC).
func (t *Table) SetTCPSink(s TCPSink) {
	if s == nil {
		t.tcp.sink.Store(nil)
		return
	}
	t.tcp.sink.Store(&sinkBox{s})
}

// HasTCPSink reports whether a sink is set.
func (t *Table) HasTCPSink() bool { return t.tcp.sink.Load() != nil }

// EnableTCP says whether this site's terminator runs: without it, TCP to
// a virtual address is dropped and counted.
func (t *Table) EnableTCP(on bool) { t.tcp.enabled.Store(on) }

// TCPEnabled reports whether the terminator runs.
func (t *Table) TCPEnabled() bool { return t.tcp.enabled.Load() }

// TCPStats returns the counters of the TCP path.
func (t *Table) TCPStats() *TCPStats { return &t.tcp.Stats }

// connKey hashes a connection between a server and a virtual address.
func connKey(server uint32, sport uint16, vip uint32, vport uint16) uint64 {
	h := (uint64(server)<<32 | uint64(vip)) * 0x9e3779b97f4a7c15
	h ^= (uint64(sport)<<16 | uint64(vport)) * 0xc2b2ae3d27d4eb4f
	h ^= h >> 29
	return h | 1 // never 0
}

func secs(now int64) uint32 { return uint32(now/1e9) | 1 }

// note records that site's terminator has a connection with key; it
// reports false when another site holds the key or there is no room.
func (s *tcpState) note(key uint64, site wire.SiteID, now int64) bool {
	sec := secs(now)
	start := int(key>>40) & (TCPConnSlots - 1)
	free := -1
	for i := 0; i < tcpProbe; i++ {
		c := &s.conns[(start+i)&(TCPConnSlots-1)]
		stale := sec-c.seen.Load() > TCPConnIdle
		if c.key.Load() == key && !stale {
			if wire.SiteID(c.site.Load()) != site {
				s.Stats.DropConflict.Add(1)
				return false
			}
			if c.seen.Load() != sec {
				c.seen.Store(sec)
			}
			return true
		}
		if free < 0 && (c.key.Load() == 0 || stale) {
			free = (start + i) & (TCPConnSlots - 1)
		}
	}
	if free < 0 {
		s.Stats.DropFull.Add(1)
		return false
	}
	c := &s.conns[free]
	c.site.Store(uint32(site))
	c.seen.Store(sec)
	c.key.Store(key)
	return true
}

// lookup returns the site of a noted connection.
func (s *tcpState) lookup(key uint64, now int64) (wire.SiteID, bool) {
	sec := secs(now)
	start := int(key>>40) & (TCPConnSlots - 1)
	for i := 0; i < tcpProbe; i++ {
		c := &s.conns[(start+i)&(TCPConnSlots-1)]
		if c.key.Load() == key && sec-c.seen.Load() <= TCPConnIdle {
			if c.seen.Load() != sec {
				c.seen.Store(sec)
			}
			return wire.SiteID(c.site.Load()), true
		}
	}
	return 0, false
}

// tcpClient is a client's MAC, learned from its frames to a virtual
// address, for the terminator's frames to it.
type tcpClient struct {
	ip  uint32
	mac [6]byte
}

// tcpClients is a Worker's direct-mapped table of client MACs.
type tcpClients struct {
	slots [tcpClientSlots]tcpClient
}

func clientIndex(ip uint32) int {
	return int(uint64(ip) * 0x9e3779b97f4a7c15 >> 52 & (tcpClientSlots - 1))
}

func (c *tcpClients) learn(ip uint32, mac []byte) {
	s := &c.slots[clientIndex(ip)]
	s.ip = ip
	copy(s.mac[:], mac)
}

func (c *tcpClients) get(ip uint32) ([6]byte, bool) {
	s := &c.slots[clientIndex(ip)]
	return s.mac, s.ip == ip && ip != 0
}

// tcpEgress handles a TCP frame read from the TAP device (parsed in w.f):
// one to a virtual address, or one from this site's terminator. It
// reports whether the frame was the router's business.
func (w *Worker) tcpEgress(t *Table, b []byte, now int64) bool {
	f := &w.f
	ip := f.IPv4(b)
	src, dst := be32b(ip.Src()), be32b(ip.Dst())
	self := TermMAC(t.self)
	if [6]byte(frame.Src(b)) == self {
		if p := t.anyPoolByIP(src); p != nil {
			w.fromTerminator(t, p, b, dst, now)
			return true
		}
	}
	p := t.anyPoolByIP(dst)
	if p == nil {
		return false
	}
	st := &t.tcp.Stats
	if !t.tcp.enabled.Load() {
		st.DropDisabled.Add(1)
		p.Stats.DropOther.Add(1)
		return true
	}
	if f.Frag != frame.FragNone || f.VLAN || f.End-f.L4 < 20 || !t.inSubnet(src) {
		st.DropOther.Add(1)
		return true
	}
	sport, dport := binary.BigEndian.Uint16(b[f.L4:]), binary.BigEndian.Uint16(b[f.L4+2:])
	if s := p.localServerAt(src, sport); s != nil {
		if site, ok := t.tcp.lookup(connKey(src, sport, dst, dport), now); ok && site != t.self {
			// A server's reply to another site's terminator.
			mac := TermMAC(site)
			copy(frame.Dst(b), mac[:])
			copy(frame.Src(b), self[:])
			st.Remote.Add(1)
			w.emit(Output{Frame: b, InPlace: true, Site: site})
			return true
		}
	} else if q := t.poolByVIP(dst, dport); q == nil {
		st.DropOther.Add(1)
		return true
	} else {
		w.clients.learn(src, frame.Src(b))
	}
	st.ToTerminator.Add(1)
	if sink := t.tcp.sink.Load(); sink != nil {
		sink.s.Input(b) // as read: the terminator learns the client's MAC
		return true
	}
	copy(frame.Dst(b), self[:])
	copy(frame.Src(b), p.mac[:])
	w.emit(Output{Frame: b, InPlace: true, Local: true})
	return true
}

// fromTerminator sends on a frame of this site's terminator, from pool
// p's virtual address to dst: a server of the pool, or a client.
func (w *Worker) fromTerminator(t *Table, p *Pool, b []byte, dst uint32, now int64) {
	f := &w.f
	st := &t.tcp.Stats
	if f.VLAN || f.End-f.L4 < 20 {
		st.DropOther.Add(1)
		return
	}
	dport := binary.BigEndian.Uint16(b[f.L4+2:])
	if s := p.server(dst, dport); s != nil {
		if !s.Local {
			copy(frame.Dst(b), p.mac[:])
			st.FromTerminator.Add(1)
			w.emit(Output{Frame: b, InPlace: true, Site: s.Site})
			return
		}
		mac, ok := s.MAC()
		if !ok {
			s.needARP.Store(true)
			st.DropNoMAC.Add(1)
			return
		}
		copy(frame.Dst(b), mac[:])
		copy(frame.Src(b), p.mac[:])
		st.FromTerminator.Add(1)
		w.emit(Output{Frame: b, InPlace: true, Local: true})
		return
	}
	mac, ok := w.clients.get(dst)
	if !ok || !t.inSubnet(dst) {
		st.DropNoClient.Add(1)
		return
	}
	copy(frame.Dst(b), mac[:])
	copy(frame.Src(b), p.mac[:])
	st.FromTerminator.Add(1)
	w.emit(Output{Frame: b, InPlace: true, Local: true})
}

// localServerAt returns the local server of p at ip:port, or nil.
func (p *Pool) localServerAt(ip uint32, port uint16) *Server {
	if s := p.server(ip, port); s != nil && s.Local {
		return s
	}
	return nil
}

// tcpIngress handles a TCP frame arriving over the overlay (parsed in
// in.f): a remote terminator's frame for a server of this site gets the
// server's MAC and its connection is noted. It reports whether to write
// the frame to the TAP device.
func (in *Inbound) tcpIngress(t *Table, b []byte, now int64) bool {
	f := &in.f
	dmac := frame.Dst(b)
	if dmac[0] != 0x02 || dmac[1] != 0x6b {
		return true // to a terminator or a host: the bridge delivers it
	}
	p := t.anyPoolByIP(be32b(dmac[2:6]))
	if p == nil {
		return true
	}
	st := &t.tcp.Stats
	site, ok := termSite(frame.Src(b))
	ip := f.IPv4(b)
	src, dst := be32b(ip.Src()), be32b(ip.Dst())
	if !ok || src != p.vip32 || f.VLAN || f.End-f.L4 < 20 {
		st.DropOther.Add(1)
		return false
	}
	sport, dport := binary.BigEndian.Uint16(b[f.L4:]), binary.BigEndian.Uint16(b[f.L4+2:])
	s := p.localServerAt(dst, dport)
	if s == nil {
		st.DropOther.Add(1)
		return false
	}
	if !t.tcp.note(connKey(dst, dport, src, sport), site, now) {
		return false
	}
	mac, known := s.MAC()
	if !known {
		s.needARP.Store(true)
		st.DropNoMAC.Add(1)
		return false
	}
	copy(dmac, mac[:])
	st.Remote.Add(1)
	return true
}

// TCPRequest records a request the terminator sent to the server, for
// its counters and for passive failure detection, as a routed datagram
// is recorded.
func (s *Server) TCPRequest(now int64) {
	s.sent(now)
	s.Requests.Add(1)
}

// TCPReply records a reply the terminator received from the server.
func (s *Server) TCPReply(now int64) { s.replied(now) }

// TCPProgress records bytes of a reply arriving from the server at now:
// the server is alive, so passive detection's wait for the requests
// still unanswered starts again. A large value may take longer than that
// wait to arrive, and is not a server that does not answer.
func (s *Server) TCPProgress(now int64) {
	s.lastReply.Store(now)
	if p := s.pendingSince.Load(); p != 0 && p < now {
		s.pendingSince.CompareAndSwap(p, now)
	}
}
