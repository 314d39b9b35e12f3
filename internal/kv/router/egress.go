package router

import (
	"encoding/binary"

	"github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/wire"
)

// Output is one frame the router asks the data path to send.
type Output struct {
	// Frame is the frame: the input frame rewritten in place (InPlace),
	// or one the Worker built in its own buffers, valid until its next
	// call.
	Frame   []byte
	InPlace bool
	// Local asks for the frame to be written to the network's TAP
	// device; otherwise it goes over the overlay to Site.
	Local bool
	Site  wire.SiteID
}

// maxOut bounds the frames one request may become (one per server of a
// split request); a request needing more is dropped and counted.
const maxOut = 32

// outSize is the size of each output buffer: an Ethernet frame of the
// largest UDP datagram the split buffer holds.
const (
	splitSize = 65536
	outSize   = 2048
)

// Worker holds the scratch space and per-device state (flow slots, rate
// buckets) of one TAP device's loop. It is not safe for concurrent use.
type Worker struct {
	f, g   frame.Frame
	req    memcache.Request
	split  memcache.Splitter
	lim    limiter
	limSet bool
	flows  flows
	outs   [maxOut]Output
	bufs   [maxOut][]byte
	spl    []byte
	n      int
	nbuf   int // output buffers taken in this call
	req2   memcache.Request

	// Reads held for hedging (replicas.go).
	h        frame.Frame
	hedges   [maxHedges]hedgeSlot
	nHedges  int
	hedgeDue int64

	// clients are the MACs of TCP clients of the virtual addresses (tcp.go).
	clients tcpClients
}

// take returns the next free output buffer with n bytes, grown if needed
// (once to the largest frame seen), or nil when all are taken.
func (w *Worker) take(n int) []byte {
	if w.nbuf >= len(w.bufs) || n > 65535 {
		return nil
	}
	if n > len(w.bufs[w.nbuf]) {
		w.bufs[w.nbuf] = make([]byte, n)
	}
	b := w.bufs[w.nbuf][:n]
	w.nbuf++
	return b
}

// NewWorker returns a Worker.
func NewWorker() *Worker {
	w := &Worker{spl: make([]byte, splitSize)}
	for i := range w.bufs {
		w.bufs[i] = make([]byte, outSize)
	}
	return w
}

// Egress decides what to do with a frame read from the network's TAP
// device. handled false means the frame is not the router's business and
// is forwarded as usual; otherwise the frame is consumed and outs lists
// what to send (possibly nothing: dropped and counted, or a reply the
// router learned from). Frames in outs are valid until the next call.
func (w *Worker) Egress(t *Table, b []byte, now int64) (handled bool, outs []Output) {
	w.n, w.nbuf = 0, 0
	f := &w.f
	if err := frame.Parse(b, f); err != nil {
		if err == frame.ErrNotIP && f.EtherType == frame.EtherTypeARP {
			return w.arp(t, b)
		}
		return false, nil
	}
	if f.V6 || (f.Proto != frame.ProtoUDP && f.Proto != frame.ProtoTCP) {
		return false, nil
	}
	if f.Proto == frame.ProtoTCP {
		return w.tcpEgress(t, b, now), w.outs[:w.n]
	}
	ip := f.IPv4(b)
	dst := be32b(ip.Dst())
	p := t.anyPoolByIP(dst)
	if p == nil {
		return false, nil
	}
	w.fireHedges(t, now)
	if f.Frag != frame.FragNone {
		p.Stats.DropOther.Add(1)
		return true, nil
	}
	u, err := frame.ParseUDP(f.Upper(b))
	if err != nil {
		p.Stats.DropOther.Add(1)
		return true, nil
	}
	port := u.DstPort()
	if q := t.poolByVIP(dst, port); q != nil {
		w.request(t, q, b, u, now)
		return true, w.outs[:w.n]
	}
	src, sport := be32b(ip.Src()), u.SrcPort()
	switch {
	case port == HealthPort:
		w.healthReply(t, b, dst, src, sport, now)
	case port >= FlowPortBase && port < FlowPortBase+FlowSlots:
		w.localReply(t, b, dst, src, sport, port, now)
	default:
		p.Stats.DropOther.Add(1)
	}
	return true, w.outs[:w.n]
}

// arp answers an ARP request for a virtual address and learns the MACs
// of local servers from their ARP messages to it.
func (w *Worker) arp(t *Table, b []byte) (bool, []Output) {
	f := &w.f
	a, err := frame.ParseARP(b[f.L3:])
	if err != nil {
		return false, nil
	}
	target := be32b(a.TargetIP())
	p := t.anyPoolByIP(target)
	if p == nil {
		return false, nil
	}
	sender := be32b(a.SenderIP())
	if !t.inSubnet(sender) {
		p.Stats.DropForeign.Add(1)
		return true, nil
	}
	learnMAC(t, sender, a.SenderMAC())
	if a.Op() != frame.ARPRequest {
		return true, nil // a reply to the agent's own request: learned
	}
	out := w.take(outSize)
	n := frame.PutARPReply(out, f, a, p.mac[:])
	if n == 0 {
		return true, nil
	}
	p.Stats.ARPReplies.Add(1)
	w.emit(Output{Frame: out[:n], Local: true})
	return true, w.outs[:w.n]
}

// learnMAC records mac for every local server at address ip.
func learnMAC(t *Table, ip uint32, mac []byte) {
	var m [6]byte
	copy(m[:], mac)
	for _, p := range t.pools {
		for _, s := range p.Servers {
			if s.Local && s.ip32 == ip && s.mac.Load() != macTo64(m) {
				s.SetMAC(m)
				p.Stats.LearnedServers.Add(1)
			}
		}
	}
}

func (w *Worker) emit(o Output) {
	if w.n >= len(w.outs) {
		return
	}
	w.outs[w.n] = o
	w.n++
}

// request routes one datagram to the pool's virtual address.
func (w *Worker) request(t *Table, p *Pool, b []byte, u frame.UDP, now int64) {
	f := &w.f
	ip := f.IPv4(b)
	src := be32b(ip.Src())
	if !t.inSubnet(src) {
		p.Stats.DropForeign.Add(1)
		return
	}
	if !w.limSet || w.lim.rate != int64(t.rate) {
		w.lim, w.limSet = newLimiter(t.rate), true
	}
	if !w.lim.allow(src, now) {
		p.Stats.DropRate.Add(1)
		return
	}
	payload := u.Payload()
	if n := u.Len(); n >= frame.UDPHeaderLen && n-frame.UDPHeaderLen < len(payload) {
		payload = payload[:n-frame.UDPHeaderLen]
	}
	h, rest, err := memcache.ParseDatagram(payload, &w.req)
	if err != nil {
		w.fail(p, b, h, err)
		return
	}
	ri := reqInfo{write: w.req.IsWrite(), quiet: w.req.Quiet, track: w.req.Len == len(rest), id: h.RequestID,
		key: w.req.Key(), valueLen: len(w.req.Value)}
	var parts []memcache.Part
	switch {
	case w.req.Len < len(rest):
		parts, err = w.split.SplitPipeline(rest, p.owner, w.spl)
	case w.req.NumKeys > 1 && w.req.Protocol == memcache.ASCII:
		parts, err = w.split.SplitGet(&w.req, p.owner, w.spl)
	}
	if err != nil || len(parts) <= 1 {
		// One server, or a pipeline the splitter refuses (a multi-key
		// get across servers inside it): the first request's owner.
		o, err := w.split.Owner(&w.req, p.ownerTrial)
		if err != nil {
			w.fail(p, b, h, err)
			return
		}
		if !ri.track && p.rep != nil {
			ri.write = w.anyWrite(rest)
		}
		w.route(t, p, f, b, true, o, ri, now)
		return
	}
	if len(parts) > maxOut {
		p.Stats.DropOther.Add(1)
		return
	}
	p.Stats.Split.Add(1)
	for _, part := range parts {
		nb, ok := w.build(b, h, part.Buf)
		if !ok {
			p.Stats.DropOther.Add(1)
			continue
		}
		pri := reqInfo{quiet: ri.quiet}
		if p.rep != nil {
			pri.write = w.anyWrite(part.Buf)
		}
		w.route(t, p, &w.g, nb, false, part.Server, pri, now)
	}
}

// anyWrite reports whether the requests in buf (a pipeline) hold a write,
// for a replicated pool, where writes go to every replica.
func (w *Worker) anyWrite(buf []byte) bool {
	for len(buf) > 0 {
		if memcache.Parse(buf, &w.req2) != nil || w.req2.Len <= 0 {
			return true // unreadable: to every replica, to be safe
		}
		if w.req2.IsWrite() {
			return true
		}
		buf = buf[w.req2.Len:]
	}
	return false
}

// build writes into the next output buffer a copy of the request frame b
// whose UDP payload is the frame header h followed by req, and parses it
// into w.g.
func (w *Worker) build(b []byte, h memcache.FrameHeader, req []byte) ([]byte, bool) {
	f := &w.f
	hdr := f.L4 + frame.UDPHeaderLen
	n := hdr + memcache.FrameHeaderLen + len(req)
	nb := w.take(n) // grows once to the largest split seen
	if nb == nil {
		return nil, false
	}
	copy(nb, b[:hdr])
	h.Seq, h.Total = 0, 1
	h.Put(nb[hdr:])
	copy(nb[hdr+memcache.FrameHeaderLen:], req)
	udpLen := n - f.L4
	ip := frame.IPv4(nb[f.L3:])
	ip.SetTotalLen(f.L4 - f.L3 + udpLen) // IPv4 only: the router takes no IPv6
	ip.ComputeChecksum()
	u := frame.UDP(nb[f.L4:])
	u.SetLen(udpLen)
	u.SetChecksum(0)
	u.SetChecksum(frame.UDPChecksum(frame.Checksum(u, frame.PseudoSum(ip.Src(), ip.Dst(), frame.ProtoUDP, udpLen))))
	if err := frame.Parse(nb, &w.g); err != nil {
		return nil, false
	}
	return nb, true
}

// route sends the request frame b (parsed in f; the input frame when
// inPlace) to shard o of p (-1: a request without a key, for the first
// usable shard): to its server, or for a shard of several replicas as
// routeShard decides.
func (w *Worker) route(t *Table, p *Pool, f *frame.Frame, b []byte, inPlace bool, o int, ri reqInfo, now int64) {
	if o < 0 || !p.usable(o) && !p.onTrial(o) {
		o = p.firstUsable()
	}
	if o < 0 {
		p.Stats.DropNoServer.Add(1)
		return
	}
	if sh := p.Shards[o]; sh.chooser != nil {
		w.routeShard(t, p, f, b, inPlace, o, ri, now)
		return
	}
	j := p.Shards[o].Replicas[0]
	if p.rep != nil && !ri.write {
		p.countRead(p.Servers[j])
	}
	w.send(t, p, f, b, inPlace, j, ri.quiet, now)
}

// send rewrites the request frame b (parsed in f; the input frame when
// inPlace) for server j of p and emits it.
func (w *Worker) send(t *Table, p *Pool, f *frame.Frame, b []byte, inPlace bool, j int, quiet bool, now int64) {
	s := p.Servers[j]
	ip := f.IPv4(b)
	src := be32b(ip.Src())
	sport := binary.BigEndian.Uint16(b[f.L4:])
	if !f.RewriteDst(b, s.ip[:], s.port) {
		p.Stats.DropOther.Add(1)
		return
	}
	out := Output{Frame: b, InPlace: inPlace}
	if s.Local {
		mac, ok := s.MAC()
		if !ok {
			s.needARP.Store(true)
			p.Stats.DropNoMAC.Add(1)
			return
		}
		slot := w.flows.take(src, sport, frame.Src(b), p.index, now)
		if slot < 0 {
			p.Stats.DropFlows.Add(1)
			return
		}
		f.RewriteSrc(b, p.vip[:], uint16(FlowPortBase+slot))
		copy(frame.Dst(b), mac[:])
		copy(frame.Src(b), p.mac[:])
		out.Local = true
	} else {
		copy(frame.Dst(b), p.mac[:])
		t.mark(src, sport, now)
		out.Site = s.Site
	}
	if !quiet {
		s.sent(now)
	}
	s.Requests.Add(1)
	p.Stats.Requests.Add(1)
	w.emit(out)
}

// firstUsable returns the first server requests may go to, or -1.
func (p *Pool) firstUsable() int {
	for i := range p.Servers {
		if p.usable(i) {
			return i
		}
	}
	return -1
}

// fail answers a malformed request with memcached's error, from the
// virtual address, or drops it when memcached would say nothing.
func (w *Worker) fail(p *Pool, b []byte, h memcache.FrameHeader, err error) {
	me, ok := err.(*memcache.Error)
	if !ok || me.Silent {
		p.Stats.DropMalformed.Add(1)
		return
	}
	p.Stats.Errors.Add(1)
	f := &w.f
	ip := f.IPv4(b)
	out := w.take(outSize)
	if out == nil {
		return
	}
	l := frame.PutEthernet(out, frame.Src(b), p.mac[:], f.VLAN, f.TCI, frame.EtherTypeIPv4)
	l4 := l + frame.IPv4HeaderLen
	pay := l4 + frame.UDPHeaderLen
	(memcache.FrameHeader{RequestID: h.RequestID, Total: 1}).Put(out[pay:])
	reply := me.AppendReply(out[pay+memcache.FrameHeaderLen:pay+memcache.FrameHeaderLen], &w.req)
	if len(reply) == 0 || &reply[0] != &out[pay+memcache.FrameHeaderLen] {
		return // noreply, or too long for the buffer
	}
	udpLen := frame.UDPHeaderLen + memcache.FrameHeaderLen + len(reply)
	frame.PutIPv4(out[l:], 0, frame.IPv4HeaderLen+udpLen, 0, frame.IPv4FlagDF, 64, frame.ProtoUDP, p.vip[:], ip.Src())
	u := frame.UDP(out[l4 : l4+udpLen])
	binary.BigEndian.PutUint16(u[0:], p.port)
	binary.BigEndian.PutUint16(u[2:], binary.BigEndian.Uint16(b[f.L4:]))
	u.SetLen(udpLen)
	u.SetChecksum(0)
	u.SetChecksum(frame.UDPChecksum(frame.Checksum(u, frame.PseudoSum(p.vip[:], ip.Src(), frame.ProtoUDP, udpLen))))
	w.emit(Output{Frame: out[:l4+udpLen], Local: true})
}

// healthReply records a server's answer to a health check.
func (w *Worker) healthReply(t *Table, b []byte, dst, src uint32, sport uint16, now int64) {
	for _, p := range t.pools {
		if p.vip32 != dst {
			continue
		}
		if s := p.server(src, sport); s != nil {
			s.replied(now)
			s.healthReply.Store(now)
			p.Stats.HealthReplies.Add(1)
			if s.Local && s.mac.Load() == 0 {
				learnMAC(t, src, frame.Src(b))
			}
			return
		}
	}
}

// localReply sends a local server's reply to a flow slot on to its
// client, from the virtual address.
func (w *Worker) localReply(t *Table, b []byte, dst, src uint32, sport, port uint16, now int64) {
	f := &w.f
	for _, p := range t.pools {
		if p.vip32 != dst {
			continue
		}
		fl := w.flows.get(port, p.index, now)
		s := p.server(src, sport)
		if fl == nil || s == nil || !s.Local {
			continue
		}
		if p.rep != nil && f.End-f.L4 > frame.UDPHeaderLen {
			if fwd, _ := p.reply(s, fl.ip, fl.port, b[f.L4+frame.UDPHeaderLen:f.End], now); !fwd {
				s.replied(now)
				return // another replica answered first
			}
		}
		var cip [4]byte
		binary.BigEndian.PutUint32(cip[:], fl.ip)
		if !f.RewriteDst(b, cip[:], fl.port) || !f.RewriteSrc(b, p.vip[:], p.port) {
			break
		}
		copy(frame.Dst(b), fl.mac[:])
		copy(frame.Src(b), p.mac[:])
		s.replied(now)
		p.Stats.Replies.Add(1)
		w.emit(Output{Frame: b, InPlace: true, Local: true})
		return
	}
	if p := t.anyPoolByIP(dst); p != nil {
		p.Stats.DropOther.Add(1)
	}
}

func be32b(a []byte) uint32 { return binary.BigEndian.Uint32(a) }
