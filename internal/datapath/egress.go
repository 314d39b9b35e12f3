package datapath

import (
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// egress is the state of one device loop: its buffers and the sequence
// numbers of its network towards each site. It is owned by one goroutine.
type egress struct {
	e      *Engine
	port   *Port
	bufs   [][]byte // each frame is read at Headroom, leaving room for the header
	frames [][]byte // bufs[i][Headroom:], the views given to the device
	sizes  []int
	flood  [][]byte // buffers for the copies of flooded frames
	nflood int
	msgs   []transport.Message
	seq    map[wire.SiteID]uint32
	hdr    wire.DataHeader
}

// batchFrames is how many frames one device wake-up reads at most.
const batchFrames = 32

func (e *Engine) newEgress(p *Port) *egress {
	size := frameSize(p.Dev.MTU())
	g := &egress{e: e, port: p, seq: map[wire.SiteID]uint32{}, sizes: make([]int, batchFrames)}
	for i := 0; i < batchFrames; i++ {
		b := make([]byte, Headroom+size)
		g.bufs = append(g.bufs, b)
		g.frames = append(g.frames, b[Headroom:])
	}
	return g
}

// frameSize is the largest Ethernet frame a device of this MTU gives:
// the MTU plus the Ethernet and VLAN headers.
func frameSize(mtu int) int { return min(mtu+18, maxFrame) }

// deviceLoop reads batches of frames from one device and sends each batch
// on the underlay with one system call.
func (e *Engine) deviceLoop(p *Port) error {
	g := e.newEgress(p)
	for {
		n, err := p.Dev.ReadBatch(g.frames, g.sizes)
		if err != nil {
			return err
		}
		g.msgs, g.nflood = g.msgs[:0], 0
		for i := 0; i < n; i++ {
			g.forward(i, g.sizes[i])
		}
		if len(g.msgs) > 0 {
			e.send(g.msgs)
		}
	}
}

// forward queues frame i of the batch, of length n, towards the site its
// destination address was learned at, or towards every site.
func (g *egress) forward(i, n int) {
	e := g.e
	e.stats.FramesIn.Add(1)
	frame := g.frames[i][:n]
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
			g.unicast(site, i, n)
			return
		}
	}
	g.broadcast(frame)
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

// unicast encapsulates frame i in place, in the headroom before it.
func (g *egress) unicast(dst wire.SiteID, i, n int) {
	r := g.e.routes.Load().r
	m, ok := g.header(r, dst)
	if !ok {
		g.e.stats.DropNoRoute.Add(1)
		return
	}
	start := Headroom - g.hdr.Len()
	g.hdr.Put(g.bufs[i][start:])
	m.Buf = g.bufs[i][start:]
	m.N = g.hdr.Len() + n
	g.msgs = append(g.msgs, m)
}

// broadcast queues one copy of the frame for every other site, each along
// that site's own path, so every site receives it exactly once.
func (g *egress) broadcast(frame []byte) {
	r := g.e.routes.Load().r
	queued := false
	for _, site := range r.Sites() {
		m, ok := g.header(r, site)
		if !ok {
			g.e.stats.DropNoRoute.Add(1)
			continue
		}
		if g.nflood == len(g.flood) {
			g.flood = append(g.flood, make([]byte, Headroom+len(g.frames[0])))
		}
		b := g.flood[g.nflood]
		g.nflood++
		hl := g.hdr.Put(b)
		copy(b[hl:], frame)
		m.Buf, m.N = b, hl+len(frame)
		g.msgs = append(g.msgs, m)
		queued = true
	}
	if queued {
		g.e.stats.Flooded.Add(1)
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
