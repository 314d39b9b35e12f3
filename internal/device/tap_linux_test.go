package device

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// inNewNetns runs f on a thread of its own in a new, empty network
// namespace, which disappears with the thread: the test creates nothing
// in the machine's namespaces.
func inNewNetns(t *testing.T, f func()) {
	t.Helper()
	if unix.Geteuid() != 0 {
		t.Skip("needs root")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		f()
	}()
	<-done
}

func TestTAPVnetHdrOffloads(t *testing.T) {
	inNewNetns(t, func() {
		tap, err := OpenTAPWith("dtoff0", 1400, "", TAPOptions{VnetHdr: true})
		if err != nil {
			t.Error(err)
			return
		}
		defer tap.Close()
		if !tap.VnetHdr() {
			t.Error("VnetHdr() = false")
		}
		link, err := netlink.LinkByName("dtoff0")
		if err != nil {
			t.Error(err)
			return
		}
		if link.Attrs().MTU != 1400 {
			t.Errorf("MTU %d", link.Attrs().MTU)
		}
		// A frame behind a plain virtio_net_hdr is accepted whole.
		frame := make([]byte, 10+60)
		copy(frame[10:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1})
		binary.BigEndian.PutUint16(frame[10+12:], 0x0806)
		if n, err := tap.Write(frame); err != nil || n != len(frame) {
			t.Errorf("write with header: %d, %v", n, err)
		}
	})
}
