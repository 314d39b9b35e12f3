package device

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

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

// TestTAPWake: Wake makes a blocked ReadBatch return ErrWoken, once, and
// the reads after it block again until the device has a frame (the
// kernel sends a few of its own on a new interface) or is closed, which
// they report as ErrClosed.
func TestTAPWake(t *testing.T) {
	inNewNetns(t, func() {
		tap, err := OpenTAPWith("dtwake0", 1400, "", TAPOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		errs := make(chan error, 64)
		go func() {
			bufs, sizes := [][]byte{make([]byte, 1500)}, []int{0}
			for {
				_, err := tap.ReadBatch(bufs, sizes)
				if err != nil {
					errs <- err
				}
				if errors.Is(err, ErrClosed) {
					return
				}
			}
		}()
		time.Sleep(50 * time.Millisecond)
		if err := tap.Wake(); err != nil {
			t.Error(err)
		}
		select {
		case err := <-errs:
			if !errors.Is(err, ErrWoken) {
				t.Errorf("read after Wake: %v, want ErrWoken", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("Wake did not end a blocked read")
		}
		select {
		case err := <-errs:
			t.Errorf("a read after the wake-up: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		tap.Close()
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Errorf("read interrupted by Close: %v, want ErrClosed", err)
		}
	})
}
