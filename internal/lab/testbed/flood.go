package testbed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"runtime"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// Kinds of flood.
const (
	// FloodRandom sends datagrams of random bytes.
	FloodRandom = "random"
	// FloodForged sends handshake initiations whose clear header names a
	// site and whose Noise bytes and MACs are random: what a host that
	// knows a site's name (not its key) can send.
	FloodForged = "forged"
	// FloodKeyed sends the same with a valid mac1: what a host that knows
	// the target's public key can send.
	FloodKeyed = "keyed"
)

// FloodKinds lists the accepted values of FloodOptions.Kind.
var FloodKinds = []string{FloodRandom, FloodForged, FloodKeyed}

// FloodOptions say what a flood sends, from where and to what.
type FloodOptions struct {
	// NS is the namespace the flood is sent from.
	NS string
	// To is the target; it must be in the testbed's underlay range
	// (198.18.0.0/15) or loopback, whatever else is given.
	To netip.AddrPort
	// Kind is one of FloodKinds.
	Kind string
	// As is the site ID the forged and keyed initiations name.
	As wire.SiteID
	// Key is the target's public key, for FloodKeyed.
	Key keys.PublicKey
	// Spoof sends every datagram from a random source address in
	// 198.18.0.0/15 (through a raw socket).
	Spoof bool
	// Duration is how long the flood lasts.
	Duration time.Duration
}

// FloodResult is what a flood sent.
type FloodResult struct {
	Sent    uint64  `json:"sent"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"`
}

// testbedRange is the only range a flood may be sent to or spoofed from.
var testbedRange = netip.MustParsePrefix("198.18.0.0/15")

// floodPool is how many distinct datagrams a flood cycles through.
const floodPool = 4096

// ErrFloodTarget is returned for a target outside the testbed.
var ErrFloodTarget = errors.New("testbed: a flood goes only to 198.18.0.0/15 or loopback")

// CheckFloodTarget refuses any destination but the testbed's underlay
// range and loopback.
func CheckFloodTarget(to netip.AddrPort) error {
	a := to.Addr().Unmap()
	if !to.IsValid() || !(testbedRange.Contains(a) || a.IsLoopback()) {
		return fmt.Errorf("%w: %v", ErrFloodTarget, to)
	}
	return nil
}

// FloodTarget resolves a site of the testbed in dir to its agent's
// underlay address and public key (zero when the overlay is in the
// clear), and returns the gateway namespace of the site from.
func FloodTarget(dir, from, to string) (ns string, addr netip.AddrPort, pub keys.PublicKey, err error) {
	st, err := LoadState(dir)
	if err != nil {
		return "", addr, pub, err
	}
	src, dst := st.Site(from), st.Site(to)
	if src == nil || dst == nil {
		return "", addr, pub, fmt.Errorf("testbed: no site %q or %q", from, to)
	}
	a, err := netip.ParseAddr(dst.Underlay)
	if err != nil {
		return "", addr, pub, err
	}
	cfg, err := config.Load(filepath.Join(dir, "detour", tincName(dst.Name)+".yaml"))
	if err == nil && cfg.Encrypted() {
		var priv keys.PrivateKey
		if priv, err = keys.ParsePrivate(cfg.PrivateKey); err != nil {
			return "", addr, pub, err
		}
		pub = priv.Public()
	}
	return src.Gateway, netip.AddrPortFrom(a, agentPort), pub, nil
}

// Flood sends datagrams as fast as one thread can (sendmmsg, batches of
// 64) until the duration is over or ctx is done.
func Flood(ctx context.Context, o FloodOptions) (*FloodResult, error) {
	if err := CheckFloodTarget(o.To); err != nil {
		return nil, err
	}
	if !o.To.Addr().Is4() {
		return nil, fmt.Errorf("testbed: flood targets are IPv4")
	}
	if (o.Kind == FloodForged || o.Kind == FloodKeyed) && o.As == 0 {
		return nil, fmt.Errorf("testbed: a %s flood names a site", o.Kind)
	}
	if o.Kind == FloodKeyed && o.Key.IsZero() {
		return nil, fmt.Errorf("testbed: a keyed flood needs the target's public key")
	}
	pkts, err := floodPackets(o)
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	send, closer, err := floodSender(o)
	if err != nil {
		return nil, err
	}
	defer closer()
	start := time.Now()
	end := start.Add(o.Duration)
	var sent uint64
	for i := 0; ctx.Err() == nil; i++ {
		n, err := send(pkts, i)
		sent += uint64(n)
		if err != nil && !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.EAGAIN) {
			return nil, err
		}
		if i%64 == 0 && time.Now().After(end) {
			break
		}
	}
	secs := time.Since(start).Seconds()
	return &FloodResult{Sent: sent, Seconds: secs, Rate: float64(sent) / secs}, nil
}

// floodPackets builds the datagrams (UDP payloads) of a flood.
func floodPackets(o FloodOptions) ([][]byte, error) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 25))
	out := make([][]byte, floodPool)
	for i := range out {
		switch o.Kind {
		case FloodRandom:
			out[i] = randomBytes(rng, make([]byte, wire.HandshakeInitLen))
		case FloodForged, FloodKeyed:
			b := randomBytes(rng, make([]byte, wire.HandshakeInitLen))
			wire.PutHandshakeHeader(b, wire.TypeHandshakeInit, o.As, rng.Uint32())
			if o.Kind == FloodKeyed {
				session.PutMAC1(b, o.Key)
			}
			out[i] = b
		default:
			return nil, fmt.Errorf("testbed: unknown flood kind %q (want one of %v)", o.Kind, FloodKinds)
		}
	}
	if !o.Spoof {
		return out, nil
	}
	for i, p := range out {
		src := randomSource(rng)
		out[i] = ipv4UDP(src, o.To, p)
	}
	return out, nil
}

func randomBytes(rng *rand.Rand, b []byte) []byte {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// randomSource returns a random address of 198.18.0.0/15 and port.
func randomSource(rng *rand.Rand) netip.AddrPort {
	v := rng.Uint32()
	a := netip.AddrFrom4([4]byte{198, 18 + byte(v>>16&1), byte(v >> 8), byte(v)})
	return netip.AddrPortFrom(a, uint16(1024+rng.IntN(60000)))
}

// ipv4UDP wraps payload in IPv4 and UDP headers from src to dst; the
// kernel fills in the IP checksum, and the UDP checksum is left out (zero,
// allowed over IPv4).
func ipv4UDP(src, dst netip.AddrPort, payload []byte) []byte {
	b := make([]byte, 28+len(payload))
	b[0], b[8], b[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint16(b[20:], src.Port())
	binary.BigEndian.PutUint16(b[22:], dst.Port())
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)))
	copy(b[28:], payload)
	return b
}

// floodSender opens the flood's socket in o.NS (a plain UDP socket, or a
// raw one to spoof sources) and returns a function that sends batch i of
// the pool.
func floodSender(o FloodOptions) (func([][]byte, int) (int, error), func(), error) {
	var fd int = -1
	var udp *transport.UDP
	err := inNamespace(o.NS, func() error {
		var err error
		if o.Spoof {
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
			return err
		}
		udp, err = transport.ListenUDP(netip.AddrPortFrom(netip.IPv4Unspecified(), 0))
		if err == nil {
			udp.DisableOffloads()
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if udp != nil {
		msgs := make([]transport.Message, transport.MaxBatch)
		send := func(pkts [][]byte, i int) (int, error) {
			for j := range msgs {
				p := pkts[(i*len(msgs)+j)%len(pkts)]
				msgs[j] = transport.Message{Buf: p, N: len(p), Addr: o.To}
			}
			return udp.WriteBatch(msgs)
		}
		return send, func() { udp.Close() }, nil
	}
	rs := newRawSender(fd, o.To)
	return rs.send, func() { unix.Close(fd) }, nil
}

// inNamespace runs f with the calling thread in namespace ns (the current
// one when ns is empty); sockets f opens stay in ns.
func inNamespace(ns string, f func() error) error {
	if ns == "" {
		return f()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("testbed: namespace %s: %w", ns, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return err
	}
	defer netns.Set(orig)
	return f()
}

// rawSender sends batches of IPv4 packets on a raw socket with sendmmsg.
type rawSender struct {
	fd   int
	name unix.RawSockaddrInet4
	hdrs [transport.MaxBatch]mmsghdr
	iovs [transport.MaxBatch]unix.Iovec
}

// mmsghdr mirrors struct mmsghdr on 64-bit Linux.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

func newRawSender(fd int, to netip.AddrPort) *rawSender {
	r := &rawSender{fd: fd}
	r.name.Family = unix.AF_INET
	r.name.Addr = to.Addr().As4()
	return r
}

func (r *rawSender) send(pkts [][]byte, i int) (int, error) {
	for j := range r.hdrs {
		p := pkts[(i*len(r.hdrs)+j)%len(pkts)]
		r.iovs[j] = unix.Iovec{Base: &p[0]}
		r.iovs[j].SetLen(len(p))
		h := &r.hdrs[j].hdr
		h.Name = (*byte)(unsafe.Pointer(&r.name))
		h.Namelen = unix.SizeofSockaddrInet4
		h.Iov = &r.iovs[j]
		h.SetIovlen(1)
	}
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(r.hdrs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
