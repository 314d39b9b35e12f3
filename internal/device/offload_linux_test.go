package device

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/detour-overlay/detour/internal/offload"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Addresses of the USO tests: the TAP's own and a peer behind it.
var (
	usoLocal   = net.IPv4(198, 18, 0, 1).To4()
	usoPeer    = net.IPv4(198, 18, 0, 2).To4()
	usoPeerMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

// onesSum adds b to the one's-complement sum acc and folds it.
func onesSum(acc uint32, b []byte) uint16 {
	for ; len(b) >= 2; b = b[2:] {
		acc += uint32(binary.BigEndian.Uint16(b))
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}

// udpFrame returns an Ethernet frame carrying a UDP datagram from the
// peer (port 40000) to dst:port with IPv4 ID id and complete checksums.
func udpFrame(dstMAC net.HardwareAddr, dst net.IP, port int, id uint16, payload []byte) []byte {
	n := 8 + len(payload)
	b := append(append([]byte{}, dstMAC...), usoPeerMAC...)
	b = append(b, 0x08, 0x00)
	ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0}
	binary.BigEndian.PutUint16(ip[2:], uint16(20+n))
	binary.BigEndian.PutUint16(ip[4:], id)
	ip = append(append(ip, usoPeer...), dst.To4()...)
	binary.BigEndian.PutUint16(ip[10:], ^onesSum(0, ip))
	udp := make([]byte, 8, n)
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], uint16(port))
	binary.BigEndian.PutUint16(udp[4:], uint16(n))
	udp = append(udp, payload...)
	pseudo := append(append([]byte{}, ip[12:20]...), 0, 17, udp[4], udp[5])
	c := ^onesSum(uint32(onesSum(0, pseudo)), udp)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	return append(append(b, ip...), udp...)
}

// usoPayload is the payload of datagram i of the USO tests: 1000 bytes,
// the last (i == 9) 300, each different.
func usoPayload(i int) []byte {
	p := make([]byte, 1000)
	if i == 9 {
		p = p[:300]
	}
	for j := range p {
		p[j] = byte(i*31 + j)
	}
	return p
}

// checkUSO reports whether o has USO; on a kernel that should have it
// (6.2 or later) a device without it is an error.
func checkUSO(t *testing.T, o *OffloadTAP) bool {
	if o.USO() {
		return true
	}
	var u unix.Utsname
	var major, minor int
	if unix.Uname(&u) == nil {
		fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	}
	if major > 6 || major == 6 && minor >= 2 {
		t.Errorf("Linux %d.%d did not accept USO on the TAP", major, minor)
	} else {
		t.Logf("Linux %d.%d has no USO: nothing to test", major, minor)
	}
	return false
}

// openCheckedUSOTAP opens the test's TAP (openUSOTAP) and reports whether
// the test can go on: the device is open and has USO (checkUSO). On false
// it has reported why and closed what it opened.
func openCheckedUSOTAP(t *testing.T) (*OffloadTAP, netlink.Link, bool) {
	o, link, err := openUSOTAP()
	if err != nil {
		t.Error(err)
		return nil, nil, false
	}
	if !checkUSO(t, o) {
		o.Close()
		return nil, nil, false
	}
	return o, link, true
}

// openUSOTAP opens an OffloadTAP dtu-uso0 with address 198.18.0.1/24 and
// a permanent neighbour 198.18.0.2 in the current network namespace.
func openUSOTAP() (*OffloadTAP, netlink.Link, error) {
	o, err := OpenOffloadTAP("dtu-uso0", 1500, "", TAPOptions{})
	if err != nil {
		return nil, nil, err
	}
	link, err := routeToPeer("dtu-uso0")
	if err != nil {
		o.Close()
		return nil, nil, err
	}
	return o, link, nil
}

// TestOffloadTAPWritesUDPSuperFrame writes ten datagrams of one flow to
// an OffloadTAP in a new network namespace and checks that they reach
// the kernel as one super-frame and a socket as ten datagrams.
func TestOffloadTAPWritesUDPSuperFrame(t *testing.T) {
	inNewNetns(t, func() {
		o, link, ok := openCheckedUSOTAP(t)
		if !ok {
			return
		}
		defer o.Close()
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: usoLocal, Port: 5555})
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		for i := 0; i < 10; i++ {
			fr := udpFrame(link.Attrs().HardwareAddr, usoLocal, 5555, 0x1234+uint16(i), usoPayload(i))
			if _, err := o.Write(fr); err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
		}
		if !o.co.Pending() {
			t.Error("nothing pending: the datagrams were not coalesced")
		}
		if err := o.Flush(); err != nil {
			t.Errorf("flush: %v", err)
			return
		}
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 2000)
		for i := 0; i < 10; i++ {
			n, err := conn.Read(buf)
			if err != nil {
				t.Errorf("datagram %d: %v", i, err)
				return
			}
			if !bytes.Equal(buf[:n], usoPayload(i)) {
				t.Errorf("datagram %d: %d bytes, not the payload sent", i, n)
			}
		}
		if l, err := netlink.LinkByName("dtu-uso0"); err == nil && l.Attrs().Statistics.RxPackets != 1 {
			t.Errorf("the kernel took %d packets, want one super-frame", l.Attrs().Statistics.RxPackets)
		}
	})
}

// TestOffloadTAPReadsUDPSuperFrame sends ten datagrams with UDP_SEGMENT
// through an OffloadTAP in a new network namespace and checks that the
// device hands over one UDP_L4 super-frame that ReadBatch splits into the
// ten datagrams.
func TestOffloadTAPReadsUDPSuperFrame(t *testing.T) {
	inNewNetns(t, func() {
		o, _, ok := openCheckedUSOTAP(t)
		if !ok {
			return
		}
		defer o.Close()
		if err := sendSegmented(); err != nil {
			t.Error(err)
			return
		}
		o.tap.f.SetReadDeadline(time.Now().Add(3 * time.Second))
		bufs, sizes := make([][]byte, 128), make([]int, 128)
		for i := range bufs {
			bufs[i] = make([]byte, 1518)
		}
		var got [][]byte
		sawSuper := false
		for len(got) < 10 {
			n, err := o.ReadBatch(bufs, sizes)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%d datagrams read, want 10", len(got))
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; i < o.rawN; i++ {
				sawSuper = sawSuper || o.raw[i][1] == offload.GSOUDPL4
			}
			for i := 0; i < n; i++ {
				if p, ok := peerDatagram(bufs[i][:sizes[i]]); ok {
					got = append(got, p)
				}
			}
		}
		if !sawSuper {
			t.Error("no UDP_L4 super-frame read")
		}
		for i, p := range got {
			if !bytes.Equal(p, usoPayload(i)) {
				t.Errorf("datagram %d: %d bytes, not the payload sent", i, len(p))
			}
		}
	})
}

// sendSegmented sends the ten payloads of usoPayload to the peer's port
// 5556 in one sendto with UDP_SEGMENT.
func sendSegmented() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, 1000); err != nil {
		return err
	}
	var all []byte
	for i := 0; i < 10; i++ {
		all = append(all, usoPayload(i)...)
	}
	to := &unix.SockaddrInet4{Port: 5556}
	copy(to.Addr[:], usoPeer)
	return unix.Sendto(fd, all, 0, to)
}

// peerDatagram returns the payload of frame if it is a UDP datagram to
// the peer's port 5556 with valid IPv4 and UDP checksums.
func peerDatagram(frame []byte) ([]byte, bool) {
	if len(frame) < 42 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 || frame[23] != 17 {
		return nil, false
	}
	ip := frame[14:34]
	udp := frame[34:min(len(frame), 14+int(binary.BigEndian.Uint16(ip[2:])))]
	if !net.IP(ip[16:20]).Equal(usoPeer) || binary.BigEndian.Uint16(udp[2:]) != 5556 {
		return nil, false
	}
	pseudo := append(append([]byte{}, ip[12:20]...), 0, 17, udp[4], udp[5])
	if onesSum(0, ip) != 0xffff || onesSum(uint32(onesSum(0, pseudo)), udp) != 0xffff {
		return nil, false
	}
	return udp[8:], true
}

// sendNumbered sends count datagrams "datagram 000", "datagram 001", ... to
// the peer's port 5556, one system call each.
func sendNumbered(count int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	to := &unix.SockaddrInet4{Port: 5556}
	copy(to.Addr[:], usoPeer)
	for i := 0; i < count; i++ {
		if err := unix.Sendto(fd, []byte(fmt.Sprintf("datagram %03d", i)), 0, to); err != nil {
			return fmt.Errorf("send %d: %w", i, err)
		}
	}
	return nil
}

// checkOneBatch makes one call of read with nbufs MTU-sized buffers and
// checks that it gave all count datagrams of sendNumbered, in order. The
// namespace may add a frame of its own (IPv6 neighbour discovery on the
// new device), so only the datagrams to the peer are counted.
func checkOneBatch(t *testing.T, read func([][]byte, []int) (int, error), nbufs, count int) {
	t.Helper()
	bufs, sizes := make([][]byte, nbufs), make([]int, nbufs)
	for i := range bufs {
		bufs[i] = make([]byte, 1518)
	}
	n, err := read(bufs, sizes)
	if err != nil {
		t.Error(err)
		return
	}
	var got []string
	for i := 0; i < n; i++ {
		if p, ok := peerDatagram(bufs[i][:sizes[i]]); ok {
			got = append(got, string(p))
		}
	}
	if len(got) != count {
		t.Errorf("one ReadBatch gave %d frames, %d of them the datagrams sent; want all %d", n, len(got), count)
		return
	}
	for i, p := range got {
		if want := fmt.Sprintf("datagram %03d", i); p != want {
			t.Errorf("frame %d: %q, want %q", i, p, want)
		}
	}
}

// TestOffloadTAPReadsManySmallFramesPerWakeup sends 100 small datagrams,
// one system call each, out of an OffloadTAP in a new network namespace
// and checks that one ReadBatch takes them all: the device's reads pack
// small frames into memory sized for four 64 KB super-frames (it took four
// frames per wake-up when each read had a super-frame's buffer of its own,
// and 64-byte traffic paid a wake-up and a send per four frames).
func TestOffloadTAPReadsManySmallFramesPerWakeup(t *testing.T) {
	const count = 100
	inNewNetns(t, func() {
		o, _, err := openUSOTAP()
		if err != nil {
			t.Error(err)
			return
		}
		defer o.Close()
		if err := sendNumbered(count); err != nil {
			t.Error(err)
			return
		}
		o.tap.f.SetReadDeadline(time.Now().Add(3 * time.Second))
		checkOneBatch(t, o.ReadBatch, 128, count)
		for i := 0; i < o.rawN; i++ {
			off := int(uintptr(unsafe.Pointer(&o.raw[i][0])) - uintptr(unsafe.Pointer(&o.arena[0])))
			if off%8 != 0 || off < 0 || off+len(o.raw[i]) > len(o.arena) {
				t.Errorf("frame %d read at offset %d (%d bytes) of the %d-byte arena", i, off, len(o.raw[i]), len(o.arena))
			}
		}
	})
}

// TestTAPReadPackedBadArena: an arena smaller than one read's room, or no
// frames to fill, is an error that names the sizes, not a short read.
func TestTAPReadPackedBadArena(t *testing.T) {
	inNewNetns(t, func() {
		tap, err := OpenTAPWith("dtpk0", 1500, "", TAPOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		defer tap.Close()
		for _, c := range []struct {
			arena, room, frames int
		}{{100, 1518, 8}, {4096, 0, 8}, {4096, 1518, 0}} {
			_, err := tap.ReadPacked(make([]byte, c.arena), c.room, make([][]byte, c.frames))
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("arena of %d bytes", c.arena)) {
				t.Errorf("arena %d, room %d, %d frames: %v", c.arena, c.room, c.frames, err)
			}
		}
	})
}

// TestTAPReadBatchReadsEveryQueuedFrame: a plain TAP (no offloads) reads
// each queued frame into a buffer of its own, all of them in one batch.
func TestTAPReadBatchReadsEveryQueuedFrame(t *testing.T) {
	const count = 20
	inNewNetns(t, func() {
		tap, err := OpenTAPWith("dtpl0", 1500, "", TAPOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		defer tap.Close()
		if _, err := routeToPeer("dtpl0"); err != nil {
			t.Error(err)
			return
		}
		if err := sendNumbered(count); err != nil {
			t.Error(err)
			return
		}
		tap.f.SetReadDeadline(time.Now().Add(3 * time.Second))
		checkOneBatch(t, tap.ReadBatch, 64, count)
	})
}

// routeToPeer gives the TAP device name the local address and a permanent
// neighbour entry for the peer, so that sendNumbered's datagrams leave
// through it.
func routeToPeer(name string) (netlink.Link, error) {
	link, err := netlink.LinkByName(name)
	if err == nil {
		err = netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: usoLocal, Mask: net.CIDRMask(24, 32)}})
	}
	if err == nil {
		err = netlink.NeighAdd(&netlink.Neigh{LinkIndex: link.Attrs().Index, State: netlink.NUD_PERMANENT, IP: usoPeer, HardwareAddr: usoPeerMAC})
	}
	return link, err
}

// TestTAPQueueLen: a TAP opened with a queue of 3000 frames holds 2500
// frames queued while nobody reads (the kernel's default of 1000 drops
// most of them), and gives them all.
func TestTAPQueueLen(t *testing.T) {
	const queue, count = 3000, 2500
	inNewNetns(t, func() {
		tap, err := OpenTAPWith("dtq0", 1500, "", TAPOptions{QueueLen: queue})
		if err != nil {
			t.Error(err)
			return
		}
		defer tap.Close()
		link, err := routeToPeer("dtq0")
		if err != nil {
			t.Error(err)
			return
		}
		if got := link.Attrs().TxQLen; got != queue {
			t.Errorf("txqueuelen %d, want %d", got, queue)
		}
		if err := sendNumbered(count); err != nil {
			t.Error(err)
			return
		}
		bufs, sizes := make([][]byte, 128), make([]int, 128)
		for i := range bufs {
			bufs[i] = make([]byte, 1518)
		}
		got := 0
		tap.f.SetReadDeadline(time.Now().Add(time.Second))
		for got < count {
			n, err := tap.ReadBatch(bufs, sizes)
			if err != nil {
				break // the deadline: nothing more is queued
			}
			for i := 0; i < n; i++ {
				if _, ok := peerDatagram(bufs[i][:sizes[i]]); ok {
					got++
				}
			}
		}
		if got != count {
			t.Errorf("read %d of the %d datagrams queued", got, count)
		}
	})
}
