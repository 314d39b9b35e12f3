package datapath

import (
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// egress is the state of one device loop: its buffers and the sequence
// numbers of its network towards each site. It is owned by one goroutine.
type egress struct {
	e     *Engine
	port  *Port
	buf   []byte
	flood [][]byte
	msgs  []transport.Message
	seq   map[wire.SiteID]uint32
	hdr   wire.DataHeader
}

func (e *Engine) newEgress(p *Port) *egress {
	return &egress{e: e, port: p, buf: make([]byte, Headroom+maxFrame), seq: map[wire.SiteID]uint32{}}
}

// deviceLoop reads frames from one device and sends them on.
func (e *Engine) deviceLoop(p *Port) error {
	g := e.newEgress(p)
	for {
		n, err := p.Dev.Read(g.buf[Headroom:])
		if err != nil {
			return err
		}
		g.forward(n)
	}
}

// forward sends the frame of length n at g.buf[Headroom:] towards the site
// its destination address was learned at, or to every site.
func (g *egress) forward(n int) {
	e := g.e
	e.stats.FramesIn.Add(1)
	frame := g.buf[Headroom : Headroom+n]
	if n < 14 {
		e.stats.DropMalformed.Add(1)
		return
	}
	now := e.now()
	var dst, src fdb.MAC
	copy(dst[:], frame[0:6])
	copy(src[:], frame[6:12])
	g.port.FDB.Learn(src, fdb.Local, now)
	if !dst.IsGroup() {
		site, ok := g.port.FDB.Lookup(dst, now)
		if ok && site == fdb.Local {
			e.stats.DropLocal.Add(1)
			return
		}
		if ok {
			g.unicast(site, n)
			return
		}
	}
	g.broadcast(n)
}

// header prepares g.hdr for a packet to dst and returns the first hop.
func (g *egress) header(r Routes, dst wire.SiteID) (transport.Message, bool) {
	h := &g.hdr
	h.Flags, h.Hop = 0, 0
	h.Source = g.e.self
	h.Network = g.port.Network
	addr, ok := r.Path(dst, h)
	if !ok || h.PathLen == 0 || h.Destination() != dst {
		return transport.Message{}, false
	}
	h.Seq = g.seq[dst]
	g.seq[dst] = h.Seq + 1
	return transport.Message{Addr: addr}, true
}

// unicast encapsulates the frame in place, in the headroom before it.
func (g *egress) unicast(dst wire.SiteID, n int) {
	r := g.e.routes.Load().r
	m, ok := g.header(r, dst)
	if !ok {
		g.e.stats.DropNoRoute.Add(1)
		return
	}
	start := Headroom - g.hdr.Len()
	g.hdr.Put(g.buf[start:])
	m.Buf = g.buf[start:]
	m.N = g.hdr.Len() + n
	g.msgs = append(g.msgs[:0], m)
	g.e.send(g.msgs)
}

// broadcast sends one copy of the frame to every other site, each along
// that site's own path, so every site receives it exactly once.
func (g *egress) broadcast(n int) {
	r := g.e.routes.Load().r
	frame := g.buf[Headroom : Headroom+n]
	g.msgs = g.msgs[:0]
	for _, site := range r.Sites() {
		m, ok := g.header(r, site)
		if !ok {
			g.e.stats.DropNoRoute.Add(1)
			continue
		}
		i := len(g.msgs)
		if i == len(g.flood) {
			g.flood = append(g.flood, make([]byte, Headroom+maxFrame))
		}
		hl := g.hdr.Put(g.flood[i])
		copy(g.flood[i][hl:], frame)
		m.Buf, m.N = g.flood[i], hl+n
		g.msgs = append(g.msgs, m)
	}
	if len(g.msgs) > 0 {
		g.e.stats.Flooded.Add(1)
		g.e.send(g.msgs)
	}
}

// send writes a batch on the underlay and counts it.
func (e *Engine) send(msgs []transport.Message) {
	e.writeMu.Lock()
	sent, err := e.conn.WriteBatch(msgs)
	e.writeMu.Unlock()
	for i := 0; i < sent; i++ {
		e.stats.BytesSent.Add(uint64(msgs[i].N))
	}
	e.stats.PacketsSent.Add(uint64(sent))
	if err != nil {
		e.stats.DropSend.Add(uint64(len(msgs) - sent))
	}
}
