package device

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TAP is a Linux TAP device opened through /dev/net/tun.
type TAP struct {
	f    *os.File
	raw  syscall.RawConn
	name string
	mtu  int
	// rb is the state of the batch being read; readFn is built once so
	// that a batch costs no allocation. Only one goroutine reads.
	rb struct {
		bufs  [][]byte
		sizes []int
		n     int
		err   error
		// For ReadPacked: the arena frames are read into, the room a
		// read needs and the offset of the next one.
		arena     []byte
		room, off int
	}
	readFn func(fd uintptr) bool
	vnet   bool
	uso    bool
	// closed is set by Close: a read it interrupts fails with the
	// poller's own error, not os.ErrClosed.
	closed atomic.Bool
}

// TAPOptions are the optional features of OpenTAPWith.
type TAPOptions struct {
	// VnetHdr opens the device with IFF_VNET_HDR and turns on checksum
	// and TCP segmentation offloads (TUNSETOFFLOAD: CSUM, TSO4, TSO6)
	// and, where the kernel has it (Linux 6.2 and later), UDP
	// segmentation offload (USO4, USO6; TAP.USO reports it): every frame
	// read or written is then preceded by a 10-byte virtio_net_hdr, and
	// reads may return TCP or UDP super-frames of up to 64 KB with
	// partial checksums. Package offload splits and builds them; read
	// buffers must hold offload.HdrLen+65535+18 bytes.
	VnetHdr bool
	// QueueLen, when not zero, sets how many frames the device queues
	// for the reader (its txqueuelen) before it drops; zero keeps the
	// kernel's default.
	QueueLen int
}

// Offload flags of TUNSETOFFLOAD (<linux/if_tun.h>).
const (
	tunFCsum = 0x01
	tunFTSO4 = 0x02
	tunFTSO6 = 0x04
	tunFUSO4 = 0x20 // Linux 6.2 and later; only together with tunFUSO6
	tunFUSO6 = 0x40
)

// OpenTAPWith creates (or attaches to) the TAP device name, sets its MTU,
// attaches it to bridge when bridge is not empty, and sets it up with the
// options o.
func OpenTAPWith(name string, mtu int, bridge string, o TAPOptions) (*TAP, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("device: open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("device: interface name %q: %w", name, err)
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if o.VnetHdr {
		flags |= unix.IFF_VNET_HDR
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("device: create TAP %s: %w", name, err)
	}
	var uso bool
	if o.VnetHdr {
		if uso, err = setOffloads(fd); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("device: offloads on TAP %s: %w", name, err)
		}
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("device: %s: %w", name, err)
	}
	t := &TAP{f: os.NewFile(uintptr(fd), "/dev/net/tun"), name: ifr.Name(), mtu: mtu, vnet: o.VnetHdr, uso: uso}
	if t.raw, err = t.f.SyscallConn(); err != nil {
		t.Close()
		return nil, err
	}
	t.readFn = t.readReady
	if err := t.configure(mtu, bridge, o.QueueLen); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// setOffloads turns on checksum offload and TCP and UDP segmentation
// offloads on the TAP device fd, or, where the kernel does not know UDP
// segmentation offload (before Linux 6.2 it rejects the flags with
// EINVAL), checksum and TCP segmentation offloads only. It reports
// whether UDP segmentation offload is on.
func setOffloads(fd int) (uso bool, err error) {
	const tcp = tunFCsum | tunFTSO4 | tunFTSO6
	err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tcp|tunFUSO4|tunFUSO6)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return false, err
	}
	return false, unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tcp)
}

func (t *TAP) configure(mtu int, bridge string, queueLen int) error {
	link, err := netlink.LinkByName(t.name)
	if err != nil {
		return fmt.Errorf("device: find %s: %w", t.name, err)
	}
	if err := netlink.LinkSetMTU(link, mtu); err != nil {
		return fmt.Errorf("device: set MTU %d on %s: %w", mtu, t.name, err)
	}
	if queueLen != 0 {
		if err := netlink.LinkSetTxQLen(link, queueLen); err != nil {
			return fmt.Errorf("device: set a queue of %d frames on %s: %w", queueLen, t.name, err)
		}
	}
	if bridge != "" {
		br, err := netlink.LinkByName(bridge)
		if err != nil {
			return fmt.Errorf("device: bridge %s: %w", bridge, err)
		}
		if err := netlink.LinkSetMaster(link, br); err != nil {
			return fmt.Errorf("device: attach %s to %s: %w", t.name, bridge, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("device: set %s up: %w", t.name, err)
	}
	return nil
}

// Read implements Device.
func (t *TAP) Read(b []byte) (int, error) {
	n, err := t.f.Read(b)
	if errors.Is(err, os.ErrClosed) {
		return 0, ErrClosed
	}
	return n, err
}

// ReadBatch implements Device: one wake-up of the poller reads every frame
// the kernel has queued, up to len(bufs).
func (t *TAP) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	t.rb.bufs, t.rb.sizes, t.rb.arena = bufs, sizes, nil
	return t.readBatch()
}

// ReadPacked reads frames one after the other into arena, each at the next
// 8-byte boundary after the one before, for as long as room bytes are left
// for the next read (the largest frame the device can give) and fewer than
// len(frames) were read; frames[:n] are the frames read. One wake-up of the
// poller thus reads many small frames into memory sized for a few large
// ones.
func (t *TAP) ReadPacked(arena []byte, room int, frames [][]byte) (int, error) {
	if room <= 0 || len(arena) < room || len(frames) == 0 {
		return 0, fmt.Errorf("device: read %s: arena of %d bytes for reads of %d into %d frames", t.name, len(arena), room, len(frames))
	}
	t.rb.bufs, t.rb.sizes = frames, nil
	t.rb.arena, t.rb.room, t.rb.off = arena, room, 0
	n, err := t.readBatch()
	t.rb.arena = nil
	return n, err
}

// readBatch runs readReady on the next wake-up of the poller.
func (t *TAP) readBatch() (int, error) {
	t.rb.n, t.rb.err = 0, nil
	if err := t.raw.Read(t.readFn); err != nil {
		switch {
		case errors.Is(err, os.ErrClosed) || t.closed.Load():
			return 0, ErrClosed
		case errors.Is(err, os.ErrDeadlineExceeded):
			if err := t.f.SetReadDeadline(time.Time{}); err != nil {
				return 0, err
			}
			return 0, ErrWoken
		}
		return 0, err
	}
	return t.rb.n, t.rb.err
}

// readReady reads frames until the device would block or the batch is
// full; it returns false (wait for readiness) only when nothing was read.
// With an arena (ReadPacked) each frame goes to the arena's next free
// bytes, while room is left, and bufs get views of it; otherwise each
// frame goes to its own buffer and sizes get the lengths.
func (t *TAP) readReady(fd uintptr) bool {
	rb := &t.rb
	for rb.n < len(rb.bufs) {
		dst := rb.bufs[rb.n]
		if rb.arena != nil {
			if len(rb.arena)-rb.off < rb.room {
				break
			}
			dst = rb.arena[rb.off:]
		}
		n, err := rawRead(fd, dst)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return rb.n > 0
		}
		if err != nil {
			rb.err = fmt.Errorf("device: read %s: %w", t.name, err)
			return true
		}
		if rb.arena != nil {
			rb.bufs[rb.n] = dst[:n:n]
			rb.off += (n + 7) &^ 7
		} else {
			rb.sizes[rb.n] = n
		}
		rb.n++
	}
	return true
}

// rawRead reads from the non-blocking descriptor fd without telling the Go
// scheduler (RawSyscall): the read never blocks, and a batch makes one
// read per frame, where the scheduler's bookkeeping cost about a tenth of
// the read in a profile of 64-byte frames. b must not be empty.
func rawRead(fd uintptr, b []byte) (int, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// Write implements Device.
func (t *TAP) Write(frame []byte) (int, error) {
	n, err := t.f.Write(frame)
	if errors.Is(err, os.ErrClosed) {
		return 0, ErrClosed
	}
	return n, err
}

// VnetHdr reports whether every frame read or written carries a
// virtio_net_hdr (TAPOptions.VnetHdr).
func (t *TAP) VnetHdr() bool { return t.vnet }

// USO reports whether the kernel accepted UDP segmentation offload
// (TAPOptions.VnetHdr on Linux 6.2 and later): reads may then return UDP
// super-frames (GSO type UDP_L4), and writes may carry them.
func (t *TAP) USO() bool { return t.uso }

// Name implements Device.
func (t *TAP) Name() string { return t.name }

// MTU implements Device.
func (t *TAP) MTU() int { return t.mtu }

// Close implements Device. The kernel removes the TAP device when its last
// Wake implements Waker: a read deadline in the past makes the poller
// return from a blocked read, and the read that sees it clears it.
func (t *TAP) Wake() error { return t.f.SetReadDeadline(time.Unix(1, 0)) }

// file descriptor closes.
func (t *TAP) Close() error {
	t.closed.Store(true)
	return t.f.Close()
}
