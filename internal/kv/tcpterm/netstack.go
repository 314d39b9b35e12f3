package tcpterm

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/kv/router"
)

// netStack is gVisor's TCP/IP stack on the terminator's TAP device. It
// has no ARP: the router is its link layer (router/tcp.go), so every IP
// packet it sends leaves in a frame to the virtual MAC of its source
// address, and it takes the IPv4 frames addressed to the terminator's MAC.
type netStack struct {
	dev device.Device
	mac [6]byte
	s   *stack.Stack
	ep  *channel.Endpoint
	// link is the stack's link endpoint: ep, with the stack's dispatcher
	// kept for the frames inject coalesces first.
	link *groLink
	// gro joins consecutive segments of one TCP flow among the frames
	// inject hands the stack, until flush: a value the router hands over
	// as hundreds of MTU-sized frames reaches TCP as a few large
	// segments. groMu guards it: inject and inbound share it.
	groMu sync.Mutex
	gro   gro.GRO
	// injected counts the frames inject took; link counts the packets
	// the stack was given from them.
	injected atomic.Uint64
}

// groLink is the stack's link endpoint: a channel endpoint that also
// keeps the stack's dispatcher, which the stack gives it when the NIC is
// created, for the packets that leave generic receive offload, and counts
// them.
type groLink struct {
	*channel.Endpoint
	mu         sync.RWMutex
	dispatcher stack.NetworkDispatcher
	delivered  atomic.Uint64
}

// Attach implements stack.LinkEndpoint.
func (l *groLink) Attach(d stack.NetworkDispatcher) {
	l.mu.Lock()
	l.dispatcher = d
	l.mu.Unlock()
	l.Endpoint.Attach(d)
}

// DeliverNetworkPacket implements stack.NetworkDispatcher for the packets
// generic receive offload lets go: it hands them to the stack, unless the
// stack has detached.
func (l *groLink) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	l.mu.RLock()
	d := l.dispatcher
	l.mu.RUnlock()
	if d != nil {
		l.delivered.Add(1)
		d.DeliverNetworkPacket(proto, pkt)
	}
}

// DeliverLinkPacket implements stack.NetworkDispatcher; generic receive
// offload gives no link packets.
func (l *groLink) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

const nicID = 1

// newNetStack builds the stack on dev, whose frames carry mac.
func newNetStack(dev device.Device, mac [6]byte) (*netStack, error) {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
	})
	sack := tcpip.TCPSACKEnabled(true)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil {
		return nil, fmt.Errorf("tcpterm: SACK: %v", err)
	}
	ep := channel.New(1024, uint32(dev.MTU()), tcpip.LinkAddress(mac[:]))
	// Every packet reaches the stack through generic receive offload,
	// which checks the IPv4 and TCP checksums of each TCP segment before
	// it joins segments (it cannot fix the checksums of a joined one), so
	// the stack must not check them again. The other packets (not TCP,
	// fragments, IP options) are never the terminator's, and go
	// unchecked.
	ep.LinkEPCapabilities |= stack.CapabilityRXChecksumOffload
	link := &groLink{Endpoint: ep}
	if err := s.CreateNIC(nicID, link); err != nil {
		return nil, fmt.Errorf("tcpterm: NIC: %v", err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})
	n := &netStack{dev: dev, mac: mac, s: s, ep: ep, link: link}
	n.gro.Init(true)
	n.gro.Dispatcher = link
	return n, nil
}

// addAddress gives the stack a virtual address.
func (n *netStack) addAddress(a netip.Addr) error {
	pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFrom4(a.As4()).WithPrefix()}
	if err := n.s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("tcpterm: address %v: %v", a, err)
	}
	return nil
}

// listen listens on a virtual address and port.
func (n *netStack) listen(ap netip.AddrPort) (*gonet.TCPListener, error) {
	return gonet.ListenTCP(n.s, fullAddr(ap), ipv4.ProtocolNumber)
}

// dial connects from the virtual address from (an ephemeral port) to a
// server.
func (n *netStack) dial(ctx context.Context, from netip.Addr, to netip.AddrPort) (*gonet.TCPConn, error) {
	return gonet.DialTCPWithBind(ctx, n.s, fullAddr(netip.AddrPortFrom(from, 0)), fullAddr(to), ipv4.ProtocolNumber)
}

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(ap.Addr().As4()), Port: ap.Port()}
}

// inbound reads frames from the TAP device and hands the stack the IPv4
// packets of those addressed to the terminator, until the device closes.
func (n *netStack) inbound() error {
	buf := make([]byte, n.dev.MTU()+18)
	for {
		l, err := n.dev.Read(buf)
		if err != nil {
			return err
		}
		f := buf[:l]
		if l < 14+20 || [6]byte(f[0:6]) != n.mac || binary.BigEndian.Uint16(f[12:14]) != 0x0800 {
			continue
		}
		n.inject(f)
		n.flush()
	}
}

// direct says where a packet of the stack goes when it can skip the
// router: the destination MAC, from the virtual MAC of its source, on
// the network's bridge; ok false sends it through the terminator's own
// TAP device and the router.
type direct func(p []byte) (dst [6]byte, ok bool)

// outbound writes the stack's packets until ctx is done: each in a frame
// from the virtual MAC of its source address to the MAC direct gives, on
// bridge; or, when direct says no (or there is no bridge), in a frame
// from the terminator's MAC to that virtual MAC, on the terminator's own
// TAP device (the router then puts in the MACs and sends it on).
//
// A bridge that coalesces written frames (device.Flusher: TCP segments of
// one flow become one super-frame and one system call) is flushed when
// the stack has no packet queued, not after every frame: a large value
// the stack sends in a burst of segments then leaves in writes of up to
// 64 KB instead of one per segment, and nothing waits once the burst
// ends.
func (n *netStack) outbound(ctx context.Context, bridge device.Device, route direct) {
	frame := make([]byte, 14+n.dev.MTU()+64)
	fl, _ := bridge.(device.Flusher)
	pending := false
	for {
		pkt := n.ep.Read()
		if pkt == nil {
			if pending {
				_ = fl.Flush()
				pending = false
			}
			if pkt = n.ep.ReadContext(ctx); pkt == nil {
				return
			}
		}
		v := pkt.ToView()
		pkt.DecRef()
		p := v.AsSlice()
		if len(p) < 20 || 14+len(p) > len(frame) {
			v.Release()
			continue
		}
		vmac := router.VirtualMAC(netip.AddrFrom4([4]byte(p[12:16])))
		binary.BigEndian.PutUint16(frame[12:14], 0x0800)
		m := copy(frame[14:], p)
		v.Release()
		if dst, ok := route(frame[14 : 14+m]); ok && bridge != nil {
			copy(frame[0:6], dst[:])
			copy(frame[6:12], vmac[:])
			if _, err := bridge.Write(frame[:14+m]); err == nil && fl != nil {
				pending = true
			}
			continue
		}
		copy(frame[0:6], vmac[:])
		copy(frame[6:12], n.mac[:])
		_, _ = n.dev.Write(frame[:14+m])
	}
}

// inject hands the stack an untagged IPv4 frame for the terminator (one
// the router gave it in the process, or read from its device), through
// generic receive offload: a
// segment that continues the flow of one held there joins it, and the
// stack takes them at the next flush.
func (n *netStack) inject(f []byte) {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f[14:])})
	pkt.NetworkProtocolNumber = ipv4.ProtocolNumber
	n.injected.Add(1)
	n.groMu.Lock()
	n.gro.Enqueue(pkt)
	n.groMu.Unlock()
	pkt.DecRef()
}

// flush hands the stack what generic receive offload holds. The caller
// of inject calls it when no frame waits, so that nothing is held longer
// than the burst it belongs to.
func (n *netStack) flush() {
	n.groMu.Lock()
	n.gro.Flush()
	n.groMu.Unlock()
}

// close stops the stack.
func (n *netStack) close() {
	n.ep.Close()
	n.s.Close()
}
