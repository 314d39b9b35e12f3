package datapath

import (
	"time"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/fdb"
	ethframe "github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// ingress is the state of the underlay loop. It is owned by one goroutine.
type ingress struct {
	e       *Engine
	msgs    []transport.Message
	relay   []transport.Message
	hdr     wire.DataHeader
	at      time.Time // when the packet being handled was received (kernel clock)
	shift   int64     // Config.Wall less the kernel's clock, ns (clockShift)
	windows map[flowKey]*seqWindow
	resets  uint64 // the engine's reset generation last applied
	kv      router.Inbound

	// The order of each flow's frames (flowOrder); the table is made at
	// the first flow.
	flows *flowTable[recvKey, recvFlow]
	fr    ethframe.Frame
	key   recvKey
}

func newIngress(e *Engine) *ingress {
	return &ingress{e: e, msgs: make([]transport.Message, transport.MaxBatch), windows: map[flowKey]*seqWindow{}}
}

// lateBatch is how long after the kernel received its first datagram a
// batch may be done (delivered or relayed) before it counts as late
// (Stats.IngressLate): longer means the agent was not running.
const lateBatch = time.Millisecond

// bufSize is the size of each receive buffer: the largest UDP payload.
const bufSize = 65535

// underlayLoop reads datagrams in batches, delivers or relays data packets
// and hands control packets to the control plane.
func (e *Engine) underlayLoop() error {
	in := newIngress(e)
	for i := range in.msgs {
		in.msgs[i].Buf = make([]byte, bufSize)
	}
	for {
		n, err := e.conn.ReadBatch(in.msgs)
		if err != nil {
			return err
		}
		in.relay = in.relay[:0]
		in.applyResets()
		in.clockShift()
		for i := 0; i < n; i++ {
			in.handle(&in.msgs[i])
		}
		if len(in.relay) > 0 {
			e.send(in.relay)
		}
		in.flushDevices()
		if n > 0 && !in.msgs[0].At.IsZero() && time.Since(in.msgs[0].At) > lateBatch {
			e.stats.IngressLate.Add(1)
		}
	}
}

// handle processes one datagram. Whatever its bytes, it is either
// delivered, relayed, handed to the control plane, or dropped and counted.
func (in *ingress) handle(m *transport.Message) {
	e := in.e
	pkt := m.Buf[:m.N]
	e.stats.PacketsReceived.Add(1)
	e.stats.BytesReceived.Add(uint64(m.N))
	typ, _, err := wire.ParseCommon(pkt)
	if err != nil {
		e.stats.DropMalformed.Add(1)
		return
	}
	if typ != wire.TypeData {
		e.stats.ControlIn.Add(1)
		if e.control != nil {
			e.control(m.Addr, pkt, m.At)
		}
		return
	}
	h := &in.hdr
	off, err := wire.ParseData(pkt, h)
	if err != nil {
		e.stats.DropMalformed.Add(1)
		return
	}
	in.at = m.At
	if h.Receiver() != e.self {
		e.stats.DropMisdirected.Add(1)
		return
	}
	if in.e.crypto != nil && h.Flags&wire.DataFlagSealed == 0 {
		e.stats.DropCrypto.Add(1) // a plaintext packet where keys are configured
		return
	}
	if int(h.Hop) == int(h.PathLen)-1 {
		in.deliver(pkt, off)
		return
	}
	in.forward(m, pkt, off)
}

// deliver writes a frame that reached its destination to the device of its
// network, learning where its source address lives.
func (in *ingress) deliver(pkt []byte, off int) {
	e := in.e
	h := &in.hdr
	frame := pkt[off:]
	if e.crypto != nil {
		var err error
		if frame, err = e.crypto.OpenData(pkt, h, off); err != nil {
			e.stats.DropCrypto.Add(1)
			return
		}
	}
	// Counted once authentic, so that forged datagrams can neither raise
	// a link's delivery rate nor take the table's slots.
	in.count(prevHop(h), len(pkt), h.Hop)
	if len(frame) < 14 {
		e.stats.DropMalformed.Add(1)
		return
	}
	p := (*e.ports.Load())[h.Network]
	if p == nil {
		e.stats.DropUnknownNetwork.Add(1)
		return
	}
	var src fdb.MAC
	copy(src[:], frame[6:12])
	if h.Source == e.self {
		e.stats.DropMalformed.Add(1)
		return
	}
	if !in.sequence() {
		return
	}
	now := e.now()
	in.flowOrder(frame, now)
	p.FDB.Learn(src, h.Source, now)
	if t := p.KV.Load(); t != nil && !in.kv.Deliver(t, frame, now) {
		e.stats.KVDropped.Add(1)
		return
	}
	if _, err := p.Dev.Write(frame); err != nil {
		e.stats.DropDevice.Add(1)
		return
	}
	e.stats.FramesOut.Add(1)
}

// forward relays a packet to the next site of its path, changing nothing
// but the hop index (and, with crypto, the hop tag after checking it).
func (in *ingress) forward(m *transport.Message, pkt []byte, off int) {
	e := in.e
	h := &in.hdr
	next, prev, hop := h.Path[h.Hop+1], prevHop(h), h.Hop
	addr, ok := e.routes.Load().r.Addr(next)
	if !ok || next == e.self {
		e.stats.DropNoRoute.Add(1)
		return
	}
	if e.crypto != nil {
		if _, err := e.crypto.Relay(pkt, h, off); err != nil {
			e.stats.DropCrypto.Add(1)
			return
		}
	} else {
		wire.SetHop(pkt, h.Hop+1)
	}
	in.count(prev, m.N, hop) // once authentic, as in deliver
	e.stats.Relayed.Add(1)
	in.relay = append(in.relay, transport.Message{Buf: m.Buf, N: m.N, Addr: addr})
}

// clockShift takes, once a batch, how far the clock of the send stamps
// (Config.Wall, the agent's clock, which may be offset) is from the
// kernel's, which stamps received datagrams (transport.Message.At): a
// sample must read both ends on the sites' own clocks, as probes do.
func (in *ingress) clockShift() {
	if w := in.e.wall; w != nil {
		in.shift = w() - time.Now().UnixNano()
	}
}

// count counts the authentic packet in in.hdr, of n bytes from previous
// hop prev and received at hop index hop, and, when this site is its
// first receiver, records its send stamp: a sample of the link from its
// source (wire.DataFlagStamped).
func (in *ingress) count(prev wire.SiteID, n int, hop uint8) {
	h := &in.hdr
	if hop == 0 && h.Flags&wire.DataFlagStamped != 0 && !in.at.IsZero() {
		in.e.stats.Peers.CountStamped(prev, n, in.at.UnixNano()+in.shift, h.Stamp)
		return
	}
	in.e.stats.Peers.Count(prev, n)
}

// sequence runs the packet in in.hdr through its source's window: it
// drops and counts duplicates and counts reordering and gaps. It reports
// whether the frame is to be delivered.
func (in *ingress) sequence() bool {
	h := &in.hdr
	k := flowKey{source: h.Source, network: h.Network}
	w := in.windows[k]
	if w == nil {
		w = &seqWindow{}
		in.windows[k] = w
	}
	verdict, skipped := w.check(h.Seq)
	switch verdict {
	case seqDuplicate:
		in.e.stats.DropDuplicate.Add(1)
		return false
	case seqReordered:
		in.e.stats.Reordered.Add(1)
	}
	if skipped > 0 {
		in.e.stats.SeqGaps.Add(uint64(skipped))
	}
	return true
}

// flowOrder counts the frame fr, from the packet in in.hdr, as reordered
// when a frame of the same flow from the same source with a higher
// sequence number arrived before it. The source numbers every frame to
// this site, of any flow, in the order it sends them, so the numbers of
// one flow rise too; a number far behind (seqResetGap) is a restarted
// source, not a late frame.
func (in *ingress) flowOrder(fr []byte, now int64) {
	h := &in.hdr
	if _, ok := ethframe.ParseFlow(fr, &in.fr, &in.key.flow); !ok {
		return
	}
	if in.flows == nil {
		in.flows = newFlowTable[recvKey, recvFlow]()
	}
	in.key.source, in.key.network = h.Source, h.Network
	hash := in.key.flow.Hash(in.flows.seed ^ uint64(h.Source)<<32 ^ uint64(h.Network))
	s, state := in.flows.get(&in.key, hash, now, int64(DefaultFlowIdle))
	if s == nil {
		return // a full set: the flow's order is not watched
	}
	behind := s.val.highest - h.Seq // modulo 2^32
	switch {
	case state != slotFound || behind == 0 || behind >= 1<<31 || behind >= seqResetGap:
		s.val.highest = h.Seq
	default:
		in.e.stats.FlowReordered.Add(1)
	}
}

// applyResets forgets the windows of sources the engine was told to reset.
func (in *ingress) applyResets() {
	e := in.e
	if e.resetGen.Load() == in.resets {
		return
	}
	e.resetMu.Lock()
	sites := e.resetSites
	e.resetSites = nil
	in.resets = e.resetGen.Load()
	e.resetMu.Unlock()
	for _, site := range sites {
		for k := range in.windows {
			if k.source == site {
				delete(in.windows, k)
			}
		}
	}
}

// flushDevices hands devices that coalesce written frames (device.Flusher)
// what they hold, at the end of every batch, so no frame waits for the
// next one.
func (in *ingress) flushDevices() {
	for _, p := range *in.e.ports.Load() {
		if f, ok := p.Dev.(device.Flusher); ok {
			if err := f.Flush(); err != nil {
				in.e.stats.DropDevice.Add(1)
			}
		}
	}
}
