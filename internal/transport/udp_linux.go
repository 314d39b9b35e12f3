package transport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
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
type batch struct {
	hdrs  [MaxBatch]mmsghdr
	iovs  [MaxBatch]unix.Iovec
	names [MaxBatch]unix.RawSockaddrInet6
	n     int // messages in the current call
	done  int // messages the last call handled
	errno syscall.Errno
}

// UDP is a batched UDP socket.
type UDP struct {
	conn  *net.UDPConn
	raw   syscall.RawConn
	local netip.AddrPort
	rd    batch
	wr    batch
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
	for i := range u.rd.hdrs {
		u.rd.hdrs[i].hdr.Iov = &u.rd.iovs[i]
		u.rd.hdrs[i].hdr.Iovlen = 1
		u.rd.hdrs[i].hdr.Name = (*byte)(unsafe.Pointer(&u.rd.names[i]))
		u.wr.hdrs[i].hdr.Iov = &u.wr.iovs[i]
		u.wr.hdrs[i].hdr.Iovlen = 1
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

// ReadBatch implements Conn.
func (u *UDP) ReadBatch(msgs []Message) (int, error) {
	n := min(len(msgs), MaxBatch)
	for i := 0; i < n; i++ {
		b := msgs[i].Buf
		u.rd.iovs[i].Base = &b[0]
		u.rd.iovs[i].SetLen(len(b))
		u.rd.hdrs[i].hdr.Namelen = unix.SizeofSockaddrInet6
		u.rd.hdrs[i].hdr.Flags = 0
	}
	u.rd.n = n
	if err := u.raw.Read(u.readFn); err != nil {
		return 0, closedOr(err)
	}
	if u.rd.errno != 0 {
		return 0, fmt.Errorf("transport: recvmmsg: %w", u.rd.errno)
	}
	for i := 0; i < u.rd.done; i++ {
		msgs[i].N = int(u.rd.hdrs[i].len)
		msgs[i].Addr = fromSockaddr(&u.rd.names[i])
	}
	return u.rd.done, nil
}

// WriteBatch implements Conn. Messages to invalid addresses are skipped
// (counted as sent) rather than blocking the batch.
func (u *UDP) WriteBatch(msgs []Message) (int, error) {
	sent := 0
	for sent < len(msgs) {
		n := min(len(msgs)-sent, MaxBatch)
		for i := 0; i < n; i++ {
			m := &msgs[sent+i]
			u.wr.iovs[i].Base = &m.Buf[0]
			u.wr.iovs[i].SetLen(m.N)
			u.wr.hdrs[i].hdr.Namelen = toSockaddr(&u.wr.names[i], m.Addr)
		}
		u.wr.n = n
		if err := u.raw.Write(u.writeFn); err != nil {
			return sent, closedOr(err)
		}
		switch {
		case u.wr.errno == unix.ECONNREFUSED || u.wr.errno == unix.EHOSTUNREACH || u.wr.errno == unix.ENETUNREACH || u.wr.errno == unix.EINVAL:
			sent++ // skip the message the kernel refused
		case u.wr.errno != 0:
			return sent, fmt.Errorf("transport: sendmmsg: %w", u.wr.errno)
		default:
			sent += u.wr.done
		}
	}
	return sent, nil
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
