package tcpterm

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
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
}

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
	if err := s.CreateNIC(nicID, ep); err != nil {
		return nil, fmt.Errorf("tcpterm: NIC: %v", err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})
	return &netStack{dev: dev, mac: mac, s: s, ep: ep}, nil
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
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f[14:])})
		n.ep.InjectInbound(ipv4.ProtocolNumber, pkt)
		pkt.DecRef()
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

// inject hands the stack a frame the router gave the terminator in the
// process (an untagged IPv4 frame).
func (n *netStack) inject(f []byte) {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f[14:])})
	n.ep.InjectInbound(ipv4.ProtocolNumber, pkt)
	pkt.DecRef()
}

// close stops the stack.
func (n *netStack) close() {
	n.ep.Close()
	n.s.Close()
}
