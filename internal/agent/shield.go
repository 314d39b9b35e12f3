package agent

import (
	"net/netip"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/detour-overlay/detour/internal/wire"
)

// The shield is a classic BPF program on the underlay socket: the kernel
// runs it on every datagram before queueing it, so what it drops costs the
// agent neither a wake-up nor a copy. It always drops datagrams that
// cannot be detour's (wrong magic, or a version that is not the one their
// type speaks). While the guard says the site is shielded (a flood of
// handshakes it had to drop), it also drops the handshake messages (types
// 8, 9 and 11) that do not name, at offset 4, a site trusted at the
// address they come from, but one in shieldSample (256) picked at random, so
// that the guard still sees the flood and sites not yet trusted can still
// get through, more slowly.
//
// Offsets are from the UDP header (8 bytes) of the datagram: the common
// header is at 8, the sender site ID of a handshake message at 12.

// shieldSample is the share (one in shieldSample) of untrusted handshake
// messages the shield lets through.
const shieldSample = 256

// maxShieldPairs bounds the trusted pairs in the program (5 instructions
// each, of the kernel's 4096).
const maxShieldPairs = 512

// Linux's ancillary offsets of classic BPF (linux/filter.h).
const (
	skfAdOff     = -0x1000
	skfAdRandom  = 56
	skfNetOff    = -0x100000
	udpHeaderLen = 8
	acceptAll    = 0x40000 // keep the whole datagram
)

// negOff encodes a negative (ancillary) offset as the kernel reads it.
func negOff(off int32) uint32 { return uint32(off) }

// shieldPair is a site trusted at an IPv4 address.
type shieldPair struct {
	addr uint32
	site wire.SiteID
}

func bpfStmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

const (
	ldB   = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
	ldW   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	ldMem = unix.BPF_LD | unix.BPF_MEM
	stMem = unix.BPF_ST
	jeqK  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	andK  = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	retK  = unix.BPF_RET | unix.BPF_K
)

// shieldProgram returns the program: the structural checks only, or with
// shielded the trusted pairs and the sample too.
func shieldProgram(pairs []shieldPair, shielded bool) []unix.SockFilter {
	h := uint32(udpHeaderLen)
	p := []unix.SockFilter{
		bpfStmt(ldB, h),                 // 0: A = magic
		bpfJump(jeqK, wire.Magic, 1, 0), // 1
		bpfStmt(retK, 0),                // 2: not detour's
		bpfStmt(ldB, h+2),               // 3: A = type
		bpfJump(jeqK, uint32(wire.TypeHandshakeInit), 6, 0),
		bpfJump(jeqK, uint32(wire.TypeHandshakeResponse), 5, 0),
		bpfJump(jeqK, uint32(wire.TypeCookieReply), 4, 0),
		bpfStmt(ldB, h+1),                 // 7: A = version
		bpfJump(jeqK, wire.Version, 0, 1), // 8
		bpfStmt(retK, acceptAll),          // 9
		bpfStmt(retK, 0),                  // 10: wrong version
		bpfStmt(ldB, h+1),                 // 11: a handshake message: A = version
		bpfJump(jeqK, wire.HandshakeVersion, 1, 0),
		bpfStmt(retK, 0), // 13: wrong version
	}
	if !shielded {
		return append(p, bpfStmt(retK, acceptAll))
	}
	p = append(p, bpfStmt(ldW, h+4), bpfStmt(stMem, 0)) // M[0] = sender site ID
	for _, pr := range pairs[:min(len(pairs), maxShieldPairs)] {
		p = append(p,
			bpfStmt(ldW, negOff(skfNetOff+12)), // A = source IPv4 address
			bpfJump(jeqK, pr.addr, 0, 3),
			bpfStmt(ldMem, 0),
			bpfJump(jeqK, uint32(pr.site), 0, 1),
			bpfStmt(retK, acceptAll))
	}
	return append(p,
		bpfStmt(ldW, negOff(skfAdOff+skfAdRandom)),
		bpfStmt(andK, shieldSample-1),
		bpfJump(jeqK, 0, 0, 1),
		bpfStmt(retK, acceptAll),
		bpfStmt(retK, 0))
}

// shieldPairs turns the trusted sites' addresses into sorted pairs (IPv4
// only: the program reads an IPv4 header).
func shieldPairs(trusted map[wire.SiteID]netip.AddrPort) []shieldPair {
	var out []shieldPair
	for site, ap := range trusted {
		if a := ap.Addr().Unmap(); a.Is4() {
			b := a.As4()
			out = append(out, shieldPair{addr: uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), site: site})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].site < out[j].site })
	return out
}

// shieldFilter is what a socket that takes a BPF program implements
// (transport.UDP).
type shieldFilter interface {
	SetFilter(prog []unix.SockFilter) error
}

// setupShield attaches the structural program if the underlay socket
// takes programs and is IPv4; otherwise the agent runs without a shield.
func (h *handshakes) setupShield() {
	f, ok := h.a.conn.(shieldFilter)
	if !ok || !h.a.conn.LocalAddr().Addr().Unmap().Is4() {
		return
	}
	if err := f.SetFilter(shieldProgram(nil, false)); err != nil {
		h.a.log.Warn("no kernel filter on the underlay socket", "err", err)
		return
	}
	h.filter = f
}

// checkShield raises or lowers the shield as the guard says at now. It is
// cheap when nothing changes.
func (h *handshakes) checkShield() {
	if h.filter == nil {
		return
	}
	want := h.guard.Shielded(h.a.clock.Now())
	if want == h.shielded.Load() && !(want && h.trustChanged.Load()) {
		return
	}
	h.shieldMu.Lock()
	defer h.shieldMu.Unlock()
	h.trustChanged.Store(false)
	if err := h.filter.SetFilter(shieldProgram(shieldPairs(h.trusted), want)); err != nil {
		h.a.log.Warn("shield", "err", err)
		return
	}
	if want != h.shielded.Load() {
		h.shieldChanges.Add(1)
		h.a.log.Info("handshake shield", "raised", want)
	}
	h.shielded.Store(want)
	if want {
		h.guard.Sampled(shieldSample)
	} else {
		h.guard.Sampled(1)
	}
}

// trust records that site is at addr, for the guard and the shield.
func (h *handshakes) trust(site wire.SiteID, addr netip.AddrPort) {
	h.guard.Trust(addr.Addr())
	h.shieldMu.Lock()
	defer h.shieldMu.Unlock()
	if h.trusted[site] != addr {
		h.trusted[site] = addr
		h.trustChanged.Store(true)
	}
}
