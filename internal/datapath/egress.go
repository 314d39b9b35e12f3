package datapath

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/edge"
	"github.com/detour-overlay/detour/internal/fdb"
	ethframe "github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// egress is the state of one device loop: its buffers and the sequence
// numbers of its network towards each site. It is owned by one goroutine.
type egress struct {
	e      *Engine
	port   *Port
	bufs   [][]byte // each frame is read at wire.Headroom, leaving room for the header
	frames [][]byte // bufs[i][wire.Headroom:], the views given to the device
	sizes  []int
	flood  [][]byte // buffers for the copies of flooded frames
	nflood int
	msgs   []transport.Message
	seq    map[wire.SiteID]uint32
	dests  map[wire.SiteID]*dest
	hdr    wire.DataHeader
	now    int64    // when the batch being forwarded was read (monotonic ns)
	stamp  uint16   // the batch's send stamp, after shaping (wire.StampOf)
	cache  fdbCache // this batch's forwarding-table answers

	icmp     [1500]byte // an ICMP "packet too big" being sent back
	lastICMP int64

	kvw *router.Worker // the key router's state, made at the first frame for a pool

	stash neighbourStash // recent neighbour requests and answers, for sites reachable later (stash.go)
	sent  []wire.SiteID  // the sites a flooded frame reached

	// The flow classes (flows.go): the table is made at the first flow.
	flows *flowTable[ethframe.Flow, egressFlow]
	swept int64 // when the table was last swept of ended flows
	fr    ethframe.Frame
	key   ethframe.Flow
}

// batchFrames is how many frames one device wake-up reads at most: enough
// for a 64 KB TCP super-frame split at an MSS of 536 bytes.
const batchFrames = 128

func (e *Engine) newEgress(p *Port) *egress {
	size := frameSize(p.Dev.MTU())
	g := &egress{e: e, port: p, seq: map[wire.SiteID]uint32{}, dests: map[wire.SiteID]*dest{}, sizes: make([]int, batchFrames)}
	g.stash.live = &p.stashed
	for i := 0; i < batchFrames; i++ {
		b := make([]byte, wire.Headroom+size+wire.Tailroom)
		g.bufs = append(g.bufs, b)
		g.frames = append(g.frames, b[wire.Headroom:wire.Headroom+size])
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
		if errors.Is(err, device.ErrWoken) {
			// The routes changed while neighbour frames were kept.
			g.begin()
			g.replay()
			g.flushBatch()
			continue
		}
		if err != nil {
			return err
		}
		if e.Port(p.Network) != p {
			return nil // detached
		}
		g.shape(n)
		g.begin()
		for i := 0; i < n; i++ {
			g.forward(i, g.sizes[i])
		}
		g.flushBatch()
	}
}

// begin starts forwarding a batch read now.
func (g *egress) begin() {
	g.msgs, g.nflood = g.msgs[:0], 0
	g.now, g.cache = g.e.now(), fdbCache{}
	if g.e.wall != nil {
		g.stamp = wire.StampOf(g.e.wall())
	}
}

// stampIfSteady gives g.hdr the batch's send stamp when the packet to d
// on rt (of flow f, or nil) will leave at once: not the first to its
// destination or on a new path, and not held back by a path switch or a
// flow's move, whose waiting the stamp would measure as delay of the link.
func (g *egress) stampIfSteady(d *dest, rt *routing.Route, f *egressFlow) {
	if g.e.wall == nil || !d.samePath(rt) || d.hold.deadline() != 0 || (f != nil && f.hold != nil && f.hold.deadline() != 0) {
		return
	}
	g.hdr.Flags |= wire.DataFlagStamped
	g.hdr.Stamp = g.stamp
}

// shape waits as long as the network's rate limits ask for the batch of n
// frames, delaying (not dropping) traffic above them.
func (g *egress) shape(n int) {
	s := g.e.shaper.Load()
	if s == nil {
		return
	}
	total := 0
	for _, size := range g.sizes[:n] {
		total += size
	}
	if d := s.Delay(g.port.Network, total, time.Now()); d > 0 {
		g.e.stats.Shaped.Add(1)
		time.Sleep(d)
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
	if t := g.port.KV.Load(); t != nil && g.keyRoute(t, i, n) {
		return
	}
	if mss := e.mss.Load(); mss != 0 && edge.ClampMSS(frame, uint16(mss>>16), uint16(mss)) {
		e.stats.MSSClamped.Add(1)
	}
	if g.tooBig(frame) {
		return
	}
	var dst, src fdb.MAC
	copy(dst[:], frame[0:6])
	copy(src[:], frame[6:12])
	g.cache.learn(g.port.FDB, src, g.now)
	if !dst.IsGroup() {
		site, ok := g.cache.lookup(g.port.FDB, dst, g.now)
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

// fdbCache remembers, for one batch of frames read together, the last
// source address learned and the last destination looked up: the frames
// of a batch mostly belong to one flow. Within a batch the answers change
// by the batch's own learning (which clears the destination's answer) or
// by the ingress loop learning an address at another site, which a batch
// of a few microseconds may miss as it could have missed it by reading a
// moment earlier.
type fdbCache struct {
	src           fdb.MAC
	learned       bool
	dst           fdb.MAC
	site          wire.SiteID
	found, looked bool
}

// learn records src as local in t unless it was the last source learned.
func (c *fdbCache) learn(t *fdb.Table, src fdb.MAC, now int64) {
	if c.learned && c.src == src {
		return
	}
	t.Learn(src, fdb.Local, now)
	c.src, c.learned, c.looked = src, true, false
}

// lookup returns t's answer for dst, asking t only for a new destination.
func (c *fdbCache) lookup(t *fdb.Table, dst fdb.MAC, now int64) (wire.SiteID, bool) {
	if !c.looked || c.dst != dst {
		c.site, c.found = t.Lookup(dst, now)
		c.dst, c.looked = dst, true
	}
	return c.site, c.found
}

// tooBig answers a TCP segment larger than the underlay carries (a flow
// opened before the underlay MTU dropped) with an ICMP "packet too big" to
// its host, which lowers its path MTU, and reports whether it did; the
// segment is then dropped, as a router would. At most one answer per
// millisecond is sent.
func (g *egress) tooBig(frame []byte) bool {
	mtu := int(g.e.innerMTU.Load())
	if mtu == 0 || len(frame) <= mtu+14 {
		return false
	}
	now := g.e.now()
	if now-g.lastICMP < int64(time.Millisecond) {
		return false
	}
	n := edge.TooBig(frame, mtu, g.icmp[:])
	if n == 0 {
		return false
	}
	g.lastICMP = now
	if _, err := g.port.Dev.Write(g.icmp[:n]); err != nil {
		g.e.stats.DropDevice.Add(1)
	}
	g.e.stats.TooBig.Add(1)
	return true
}

// header prepares g.hdr for a packet to dst.
func (g *egress) header(r Routes, dst wire.SiteID) (*routing.Route, bool) {
	rt, ok := r.Lookup(dst)
	if !ok || len(rt.Path) == 0 || len(rt.Path) > wire.MaxPath || rt.Path[len(rt.Path)-1] != dst {
		return nil, false
	}
	h := &g.hdr
	h.Flags, h.Hop = 0, 0
	h.Source = g.e.self
	h.Network = g.port.Network
	h.PathLen = uint8(copy(h.Path[:], rt.Path))
	seq, ok := g.seq[dst]
	if !ok {
		seq = rand.Uint32() // see seqResetGap
	}
	h.Seq = seq
	g.seq[dst] = seq + 1
	return rt, true
}

// destOf returns the egress state towards dst, made at its first packet.
func (g *egress) destOf(dst wire.SiteID) *dest {
	d := g.dests[dst]
	if d == nil {
		d = &dest{hold: &holdQueue{}}
		g.dests[dst] = d
	}
	return d
}

// emit queues an encapsulated packet for the batch, or holds it back while
// a switch to a shorter path towards d could let it overtake earlier
// packets. The packet belongs to flow f (nil for traffic that is no
// flow) and goes on Route.Path when main is true, or else on the flow's
// bulk path, of offset-shifted delay delay.
func (g *egress) emit(d *dest, rt *routing.Route, m transport.Message, f *egressFlow, main bool, delay time.Duration) {
	now := g.now
	if main {
		if !d.samePath(rt) {
			if until := d.last + int64(d.holdTime(rt)); until > now {
				g.flushBatch() // packets on the old path leave first
				d.hold.start(g.e, now, until)
			}
			d.use(rt)
		}
		d.last = now
	}
	if f != nil {
		g.moveFlow(d, f, main, delay)
		if f.hold != nil && f.hold.enqueue(g.e, m, now) {
			return
		}
	}
	if main && d.hold.enqueue(g.e, m, now) {
		return
	}
	g.msgs = append(g.msgs, m)
}

// flushBatch sends the packets queued so far in this batch.
func (g *egress) flushBatch() {
	if len(g.msgs) > 0 {
		g.e.send(g.msgs)
		g.msgs = g.msgs[:0]
	}
}

// unicast encapsulates frame i in place, in the headroom before it.
func (g *egress) unicast(dst wire.SiteID, i, n int) {
	r := g.e.routes.Load().r
	rt, ok := g.header(r, dst)
	if !ok {
		g.e.stats.DropNoRoute.Add(1)
		if ethframe.NeighbourKind(g.frames[i][:n]) == ethframe.NeighbourAnswer {
			g.stash.keep(g.frames[i][:n], g.now, nil, dst)
		}
		return
	}
	f := g.classify(dst, rt, g.frames[i][:n])
	hop, delay, main := g.choosePath(rt, f)
	if main {
		g.duplicate(rt, g.frames[i][:n])
	}
	d := g.destOf(dst)
	g.stampIfSteady(d, rt, f)
	start := wire.Headroom - g.frameOffset()
	if m, ok := g.seal(g.bufs[i][start:], n, hop); ok {
		g.emit(d, rt, m, f, main, delay)
	}
}

// duplicate queues a copy of the frame on the route's backup path, while
// its primary path is in doubt. The copy has the same sequence number, so
// the destination delivers whichever arrives first and drops the other.
// It must be called before the primary is sealed (sealing encrypts the
// frame in place), and leaves g.hdr as it found it.
func (g *egress) duplicate(rt *routing.Route, frame []byte) {
	if len(rt.Backup) == 0 || len(rt.Backup) > wire.MaxPath {
		return
	}
	primary := g.hdr
	g.hdr.PathLen = uint8(copy(g.hdr.Path[:], rt.Backup))
	g.hdr.Flags = wire.DataFlagDuplicate
	b := g.floodBuf()
	copy(b[g.frameOffset():], frame)
	if m, ok := g.seal(b, len(frame), rt.BackupFirstHop); ok {
		g.msgs = append(g.msgs, m)
		g.e.stats.Duplicated.Add(1)
	}
	g.hdr = primary
}

// floodBuf returns a spare packet buffer of the current batch.
func (g *egress) floodBuf() []byte {
	if g.nflood == len(g.flood) {
		g.flood = append(g.flood, make([]byte, wire.Headroom+len(g.frames[0])+wire.Tailroom))
	}
	b := g.flood[g.nflood]
	g.nflood++
	return b
}

// frameOffset is where the frame starts in a packet with g.hdr's path.
func (g *egress) frameOffset() int { return wire.FrameOffset(int(g.hdr.PathLen), g.e.crypto != nil) }

// seal writes g.hdr in front of the frame of length n that starts at
// b[g.frameOffset():] and, with crypto, seals the packet for the first
// hop hop.
func (g *egress) seal(b []byte, n int, hop netip.AddrPort) (transport.Message, bool) {
	if g.e.crypto == nil {
		hl := g.hdr.Put(b)
		return transport.Message{Buf: b, N: hl + n, Addr: hop}, true
	}
	size, err := g.e.crypto.SealData(b, &g.hdr, n)
	if err != nil {
		g.e.stats.DropCrypto.Add(1)
		return transport.Message{}, false
	}
	return transport.Message{Buf: b, N: size, Addr: hop}, true
}

// broadcast queues one copy of the frame for every other site, each along
// that site's own path, so every site receives it exactly once.
func (g *egress) broadcast(frame []byte) {
	if !g.floodAllowed(frame) {
		return
	}
	r := g.e.routes.Load().r
	query := ethframe.NeighbourKind(frame) == ethframe.NeighbourQuery
	sent := g.sent[:0]
	for _, site := range r.Sites() {
		if g.floodTo(r, site, frame) {
			sent = append(sent, site)
		}
	}
	if len(sent) > 0 {
		g.e.stats.Flooded.Add(1)
	}
	if query {
		g.stash.keep(frame, g.now, sent, 0)
	}
	g.sent = sent
}

// floodTo queues a copy of a flooded frame for site, along its path (and
// its backup while the path is in doubt); false if site has no route or
// session.
func (g *egress) floodTo(r Routes, site wire.SiteID, frame []byte) bool {
	rt, ok := g.header(r, site)
	if !ok {
		g.e.stats.DropNoRoute.Add(1)
		return false
	}
	g.duplicate(rt, frame)
	b := g.floodBuf()
	copy(b[g.frameOffset():], frame)
	m, ok := g.seal(b, len(frame), rt.FirstHop)
	if ok {
		g.emit(g.destOf(site), rt, m, nil, true, rt.Delay)
	}
	return ok
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

// keyRoute hands frame i of the batch, of length n, to the network's key
// router and carries out its decision; it reports whether the router took
// the frame (forwarded, answered, or dropped and counted there).
func (g *egress) keyRoute(t *router.Table, i, n int) bool {
	if g.kvw == nil {
		g.kvw = router.NewWorker()
	}
	handled, outs := g.kvw.Egress(t, g.frames[i][:n], g.now)
	if !handled {
		return false
	}
	g.e.stats.KVFrames.Add(1)
	for _, o := range outs {
		switch {
		case o.Local:
			g.writeLocal(o.Frame)
		case o.InPlace:
			g.unicast(o.Site, i, len(o.Frame))
		default:
			g.sendCopy(o.Site, o.Frame)
		}
	}
	return true
}

// writeLocal writes a frame the key router sends back to the network's
// own bridge (an ARP or error reply, a request to a local server, a local
// server's reply) and flushes a coalescing device at once.
func (g *egress) writeLocal(frame []byte) {
	if _, err := g.port.Dev.Write(frame); err != nil {
		g.e.stats.DropDevice.Add(1)
		return
	}
	if f, ok := g.port.Dev.(device.Flusher); ok {
		if err := f.Flush(); err != nil {
			g.e.stats.DropDevice.Add(1)
			return
		}
	}
	g.e.stats.KVLocal.Add(1)
}

// sendCopy queues a copy of a frame the key router built (a part of a
// split request) for site.
func (g *egress) sendCopy(site wire.SiteID, frame []byte) {
	r := g.e.routes.Load().r
	rt, ok := g.header(r, site)
	if !ok {
		g.e.stats.DropNoRoute.Add(1)
		return
	}
	b := g.floodBuf()
	copy(b[g.frameOffset():], frame)
	if m, ok := g.seal(b, len(frame), rt.FirstHop); ok {
		g.emit(g.destOf(site), rt, m, nil, true, rt.Delay)
	}
}
