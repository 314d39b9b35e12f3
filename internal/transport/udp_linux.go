package transport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr mirrors struct mmsghdr of <sys/socket.h> on 64-bit Linux.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// batch holds the system-call structures of one direction, allocated once.
// A header may point at several iovecs (a GSO send) and at its own control
// buffer.
type batch struct {
	hdrs  [MaxBatch]mmsghdr
	iovs  [MaxBatch]unix.Iovec
	names [MaxBatch]unix.RawSockaddrInet6
	ctl   [MaxBatch][rxCmsgLen]byte
	// group[i] is how many messages header i carries (writes).
	group [MaxBatch]int
	seg   [MaxBatch]int // segment size of read i, 0 if not coalesced
	n     int           // headers in the current call
	done  int           // headers the last call handled
	errno syscall.Errno
}

// UDP is a batched UDP socket. It sends runs of equal-sized datagrams to
// one address as one GSO send (UDP_SEGMENT) and, once it is given receive
// buffers large enough, takes coalesced datagrams from the kernel
// (UDP_GRO) and cuts them back into messages: callers see one message per
// datagram either way.
type UDP struct {
	conn  *net.UDPConn
	raw   syscall.RawConn
	local netip.AddrPort
	rd    batch
	wr    batch
	// gso is whether sends may use UDP_SEGMENT; it is cleared for good
	// when the kernel refuses it. noGSOOnce sends the next group as plain
	// datagrams after a GSO send was refused for that group alone.
	gso, noGSOOnce bool
	// gro is whether UDP_GRO is on; groOK whether the kernel has it.
	gro, groOK bool
	sp         spill
	// gsoSends and groReads count GSO sends and coalesced datagrams
	// received (see OffloadStats).
	gsoSends, groReads atomic.Uint64
	// readFn and writeFn are built once so a batch costs no allocation.
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
}

// ListenUDP binds a UDP socket to addr.
func ListenUDP(addr netip.AddrPort) (*UDP, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("transport: listen %v: %w", addr, err)
	}
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	u := &UDP{conn: c, raw: raw, local: c.LocalAddr().(*net.UDPAddr).AddrPort()}
	u.setBuffers(4 << 20)
	u.gso, u.groOK = u.offloads()
	u.raw.Control(func(fd uintptr) {
		// Receive times from the kernel: probe timestamps then do not
		// include the time a busy gateway takes to get to the datagram.
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	})
	for i := range u.rd.hdrs {
		u.rd.hdrs[i].hdr.Iov = &u.rd.iovs[i]
		u.rd.hdrs[i].hdr.Iovlen = 1
		u.rd.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&u.rd.names[i]))
		u.wr.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&u.wr.names[i]))
	}
	u.readFn = func(fd uintptr) bool { return u.rd.call(fd, unix.SYS_RECVMMSG) }
	u.writeFn = func(fd uintptr) bool { return u.wr.call(fd, unix.SYS_SENDMMSG) }
	return u, nil
}

// setBuffers asks for larger socket buffers; the kernel caps the request at
// its configured maximum, which is not an error.
func (u *UDP) setBuffers(size int) {
	u.raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size)
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size)
	})
}

// offloads reports whether the kernel knows UDP_SEGMENT and UDP_GRO on
// this socket (Linux 4.18 and 5.0).
func (u *UDP) offloads() (gso, gro bool) {
	u.raw.Control(func(fd uintptr) {
		_, err := unix.GetsockoptInt(int(fd), solUDP, udpSegment)
		gso = err == nil
		_, err = unix.GetsockoptInt(int(fd), solUDP, udpGRO)
		gro = err == nil
	})
	return gso, gro
}

// OffloadStats returns how many GSO sends were made and how many
// coalesced datagrams were received and split so far.
func (u *UDP) OffloadStats() (gsoSends, groReads uint64) {
	return u.gsoSends.Load(), u.groReads.Load()
}

// DisableOffloads turns UDP GSO and GRO off, e.g. to compare.
func (u *UDP) DisableOffloads() {
	u.gso, u.groOK = false, false
	u.setGRO(false)
}

// setGRO switches UDP_GRO on or off.
func (u *UDP) setGRO(on bool) {
	if u.gro == on {
		return
	}
	v := 0
	if on {
		v = 1
	}
	u.raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), solUDP, udpGRO, v) == nil {
			u.gro = on
		}
	})
}

// groBufSize is the receive buffer size from which GRO is used: a
// coalesced datagram can be as large as the largest UDP payload.
const groBufSize = 65535

// call runs one recvmmsg or sendmmsg; it returns false to wait for
// readiness when the socket would block.
func (b *batch) call(fd uintptr, trap uintptr) bool {
	r, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(b.n), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN || e == unix.EINTR {
		return false
	}
	b.done, b.errno = int(r), e
	return true
}

// ReadBatch implements Conn. Datagrams left over from a coalesced receive
// that did not fit the previous batch are returned first, without waiting.
func (u *UDP) ReadBatch(msgs []Message) (int, error) {
	if u.sp.pending() {
		return u.sp.drain(msgs), nil
	}
	n := min(len(msgs), MaxBatch)
	u.setGRO(u.groOK && bigBuffers(msgs[:n]))
	for i := 0; i < n; i++ {
		b := msgs[i].Buf
		u.rd.iovs[i].Base = &b[0]
		u.rd.iovs[i].SetLen(len(b))
		h := &u.rd.hdrs[i].hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.Flags = 0
		h.Control = &u.rd.ctl[i][0]
		h.SetControllen(rxCmsgLen)
	}
	u.rd.n = n
	if err := u.raw.Read(u.readFn); err != nil {
		return 0, closedOr(err)
	}
	if u.rd.errno != 0 {
		return 0, fmt.Errorf("transport: recvmmsg: %w", u.rd.errno)
	}
	got := u.rd.done
	for i := 0; i < got; i++ {
		msgs[i].N = int(u.rd.hdrs[i].len)
		msgs[i].Addr = fromSockaddr(&u.rd.names[i])
		u.rd.seg[i] = 0
		ctl := u.rd.ctl[i][:u.rd.hdrs[i].hdr.Controllen]
		msgs[i].At = rxTime(ctl)
		if u.gro {
			u.rd.seg[i] = groSize(ctl)
			if u.rd.seg[i] > 0 && msgs[i].N > u.rd.seg[i] {
				u.groReads.Add(1)
			}
		}
	}
	if !u.gro {
		return got, nil
	}
	return splitCoalesced(msgs, got, u.rd.seg[:got], &u.sp), nil
}

// bigBuffers reports whether every buffer can hold a coalesced datagram.
func bigBuffers(msgs []Message) bool {
	for i := range msgs {
		if len(msgs[i].Buf) < groBufSize {
			return false
		}
	}
	return len(msgs) > 0
}

// WriteBatch implements Conn. Messages to invalid addresses are skipped
// (counted as sent) rather than blocking the batch.
func (u *UDP) WriteBatch(msgs []Message) (int, error) {
	sent := 0
	for sent < len(msgs) {
		u.prepareWrite(msgs[sent:])
		if err := u.raw.Write(u.writeFn); err != nil {
			return sent, closedOr(err)
		}
		switch e := u.wr.errno; {
		case e != 0 && u.wr.group[0] > 1:
			// The kernel refused the GSO send of the first group: EIO
			// or EOPNOTSUPP when the device cannot segment (never use
			// GSO again), EINVAL or EMSGSIZE when the segments exceed
			// the path MTU (send this group as plain datagrams).
			if e == unix.EIO || e == unix.EOPNOTSUPP || e == unix.ENOPROTOOPT {
				u.gso = false
			}
			u.noGSOOnce = true
		case e == unix.ECONNREFUSED || e == unix.EHOSTUNREACH || e == unix.ENETUNREACH || e == unix.EINVAL:
			sent++ // skip the message the kernel refused
		case e != 0:
			return sent, fmt.Errorf("transport: sendmmsg: %w", e)
		default:
			for i := 0; i < u.wr.done; i++ {
				sent += u.wr.group[i]
				if u.wr.group[i] > 1 {
					u.gsoSends.Add(1)
				}
			}
		}
	}
	return sent, nil
}

// prepareWrite fills the send headers for the messages at the start of
// msgs, grouping runs for GSO.
func (u *UDP) prepareWrite(msgs []Message) {
	h, iov, carried := 0, 0, 0
	for carried < len(msgs) && h < MaxBatch && iov < MaxBatch {
		k := 1
		if u.gso && !u.noGSOOnce {
			k = min(gsoGroup(msgs[carried:]), MaxBatch-iov)
		}
		u.noGSOOnce = false
		u.fillHeader(h, iov, msgs[carried:carried+k])
		carried += k
		iov += k
		h++
	}
	u.wr.n = h
}

// fillHeader points send header h at iovecs iov.. for the messages group,
// with a UDP_SEGMENT control message when there are several.
func (u *UDP) fillHeader(h, iov int, group []Message) {
	for j := range group {
		u.wr.iovs[iov+j].Base = &group[j].Buf[0]
		u.wr.iovs[iov+j].SetLen(group[j].N)
	}
	hdr := &u.wr.hdrs[h].hdr
	hdr.Iov = &u.wr.iovs[iov]
	hdr.SetIovlen(len(group))
	hdr.Namelen = toSockaddr(&u.wr.names[h], group[0].Addr)
	if len(group) > 1 {
		hdr.Control = &u.wr.ctl[h][0]
		hdr.SetControllen(putGSOCmsg(u.wr.ctl[h][:], group[0].N))
	} else {
		hdr.Control = nil
		hdr.SetControllen(0)
	}
	u.wr.group[h] = len(group)
}

// LocalAddr implements Conn.
func (u *UDP) LocalAddr() netip.AddrPort { return u.local }

// Close implements Conn.
func (u *UDP) Close() error { return u.conn.Close() }

func closedOr(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return ErrClosed
	}
	return err
}

// fromSockaddr converts a kernel socket address to an AddrPort without
// allocating; IPv4-mapped IPv6 addresses are unmapped.
func fromSockaddr(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := uint16(sa4.Port>>8) | uint16(sa4.Port<<8)
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	case unix.AF_INET6:
		port := uint16(sa.Port>>8) | uint16(sa.Port<<8)
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
	}
	return netip.AddrPort{}
}

// toSockaddr writes ap into sa and returns the length to pass the kernel.
func toSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort) uint32 {
	port := ap.Port()
	p := port>>8 | port<<8
	if ap.Addr().Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		sa4.Port = p
		sa4.Addr = ap.Addr().As4()
		return unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	sa.Port = p
	sa.Flowinfo = 0
	sa.Addr = ap.Addr().As16()
	sa.Scope_id = 0
	return unix.SizeofSockaddrInet6
}

// SetFilter attaches a classic BPF program to the socket (SO_ATTACH_FILTER),
// replacing the one attached before: the kernel drops the datagrams it
// rejects before they are queued to the socket, so they cost this process
// nothing. Offset 0 of the program is the UDP header.
func (u *UDP) SetFilter(prog []unix.SockFilter) error {
	if len(prog) == 0 {
		return errors.New("transport: empty filter")
	}
	var serr error
	err := u.raw.Control(func(fd uintptr) {
		fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp)
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("transport: attach filter: %w", serr)
	}
	return nil
}

// skMeminfoDrops is the index of the drop count in SO_MEMINFO's array
// (SK_MEMINFO_DROPS of linux/sock_diag.h).
const skMeminfoDrops = 8

// SocketDrops returns how many datagrams the kernel dropped at this socket
// (SO_MEMINFO): those its filter rejected (SetFilter) and those that found
// the receive buffer full.
func (u *UDP) SocketDrops() (uint64, error) {
	var info [16]uint32
	var serr error
	err := u.raw.Control(func(fd uintptr) {
		n := uint32(len(info) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&n)), 0)
		if e != 0 {
			serr = e
		}
	})
	if err == nil {
		err = serr
	}
	return uint64(info[skMeminfoDrops]), err
}
