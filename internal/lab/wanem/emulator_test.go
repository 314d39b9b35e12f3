package wanem

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// pair builds an emulator whose two sites are the far ends of datagram
// socket pairs, so the whole I/O shell runs without root or TUN devices.
func pair(t *testing.T, doc string) (e *Emulator, near [2]int) {
	t.Helper()
	s, err := scenario.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var ports []Port
	var all []int
	for i := range 2 {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		near[i] = fds[0]
		all = append(all, fds[:]...)
		ports = append(ports, Port{FD: fds[1], Addr: netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})})
	}
	e, err = New(s, ports)
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	// Shut the sockets down first, so that the emulator's readers return
	// from read before their descriptors are closed (and reused by the
	// next test).
	t.Cleanup(func() {
		for _, fd := range all {
			unix.Shutdown(fd, unix.SHUT_RDWR)
		}
		e.Stop()
		done := make(chan struct{})
		go func() { e.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the emulator's goroutines did not return after Stop")
		}
		for _, fd := range all {
			unix.Close(fd)
		}
	})
	return e, near
}

// readRetry reads from fd, retrying when a signal (the Go runtime's
// preemption) interrupts the system call.
func readRetry(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Read(fd, buf)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// ipPacket is a minimal IPv4 header to 198.18.0.dst carrying seq.
func ipPacket(dst byte, seq uint32, size int) []byte {
	b := make([]byte, size)
	b[0] = 0x45
	copy(b[16:20], []byte{198, 18, 0, dst})
	binary.BigEndian.PutUint32(b[20:], seq)
	return b
}

func TestShellDeliversInOrderAfterTheDelay(t *testing.T) {
	e, near := pair(t, "sites: [{name: A}, {name: B}]\nlinks:\n  default: {delay: 20ms, jitter: 2ms}\n")
	const n = 200
	sent := make([]time.Time, n)
	go func() {
		for i := range n {
			sent[i] = time.Now()
			unix.Write(near[0], ipPacket(2, uint32(i), 100))
			time.Sleep(100 * time.Microsecond)
		}
	}()
	buf := make([]byte, 2048)
	for i := range n {
		unix.SetsockoptTimeval(near[1], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
		m, err := readRetry(near[1], buf)
		if err != nil || m != 100 {
			t.Fatalf("packet %d: %d bytes, %v", i, m, err)
		}
		if seq := binary.BigEndian.Uint32(buf[20:]); seq != uint32(i) {
			t.Fatalf("packet %d arrived as number %d: reordered", seq, i)
		}
		if d := time.Since(sent[i]); d < 18*time.Millisecond {
			t.Errorf("packet %d after %v, before the 20ms-2ms minimum", i, d)
		}
	}
	tr := e.Truth()
	ab := tr.Links[0]
	if ab.From != "A" || ab.Delivered != n || ab.MeasuredMS < 18 || ab.MeasuredMS > 25 {
		t.Errorf("truth for A->B: %+v", ab)
	}
}

func TestShellDropsUnroutablePackets(t *testing.T) {
	e, near := pair(t, "sites: [{name: A}, {name: B}]\nlinks:\n  default: {delay: 0ms}\n")
	unix.Write(near[0], ipPacket(9, 0, 40))    // no such site
	unix.Write(near[0], []byte{0x60, 0, 0, 0}) // not IPv4
	unix.Write(near[0], ipPacket(2, 1, 40))
	buf := make([]byte, 100)
	unix.SetsockoptTimeval(near[1], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
	if m, err := readRetry(near[1], buf); err != nil || binary.BigEndian.Uint32(buf[20:]) != 1 || m != 40 {
		t.Fatalf("routable packet: %d %v", m, err)
	}
	if got := e.Truth().Unroutable; got != 2 {
		t.Errorf("unroutable = %d, want 2", got)
	}
}

func TestSetLinkReportsTheNewProperties(t *testing.T) {
	e, _ := pair(t, "sites: [{name: A}, {name: B}]\nlinks:\n  default: {delay: 5ms}\n")
	d := scenario.Duration(40 * time.Millisecond)
	res, err := e.Handle(Request{Op: "set", From: "a", To: "B", Both: true, Patch: scenario.Patch{Delay: &d}})
	if err != nil {
		t.Fatal(err)
	}
	if links := res.(SetResult).Links; len(links) != 2 || links[0].DelayMS != 40 || links[1].DelayMS != 40 {
		t.Errorf("set result %+v", links)
	}
	if _, err := e.Handle(Request{Op: "set", From: "A", To: "Z", Patch: scenario.Patch{Delay: &d}}); err == nil {
		t.Error("unknown site accepted")
	}
	neg := scenario.Duration(-time.Millisecond)
	if _, err := e.Handle(Request{Op: "set", From: "A", To: "B", Patch: scenario.Patch{Delay: &neg}}); err == nil {
		t.Error("negative delay accepted")
	}
}

func TestHeapOrdersByDueThenSequence(t *testing.T) {
	var h pktHeap
	dues := []int64{5, 3, 9, 3, 1, 5}
	for i, d := range dues {
		h.push(&packet{due: d, seq: uint64(i)})
	}
	var got []int64
	var lastSeq = map[int64]uint64{}
	for len(h) > 0 {
		p := h.pop()
		if s, ok := lastSeq[p.due]; ok && p.seq < s {
			t.Errorf("same due %d popped out of sequence", p.due)
		}
		lastSeq[p.due] = p.seq
		got = append(got, p.due)
	}
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("heap order %v", got)
		}
	}
}

func BenchmarkHeapPushPop(b *testing.B) {
	var h pktHeap
	ps := make([]*packet, 256)
	for i := range ps {
		ps[i] = &packet{}
	}
	var t int64
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range ps {
			t++
			p.due = t + int64(t%7)
			h.push(p)
		}
		for len(h) > 0 {
			h.pop()
		}
	}
}

// TestSchedulerLearnsItsLateness checks that the scheduler's estimate of
// its wake-up lateness follows a steady lateness and that one stall cannot
// push it past its bound.
func TestSchedulerLearnsItsLateness(t *testing.T) {
	s := &scheduler{}
	for range 200 {
		s.learnLateness(int64(80 * time.Microsecond))
	}
	if got := time.Duration(s.early); got < 75*time.Microsecond || got > 80*time.Microsecond {
		t.Errorf("after 200 wake-ups 80 µs late, the estimate is %v, want 75-80 µs", got)
	}
	s.learnLateness(int64(time.Second))
	if got := time.Duration(s.early); got > 80*time.Microsecond+maxLate/lateGain {
		t.Errorf("one wake-up 1 s late moved the estimate to %v", got)
	}
	for range 500 {
		s.learnLateness(int64(time.Second))
	}
	if got := time.Duration(s.early); got > maxLate || got < maxLate-time.Microsecond {
		t.Errorf("after many stalls the estimate is %v, want just under the bound %v", got, maxLate)
	}
	for range 500 {
		s.learnLateness(-int64(time.Millisecond))
	}
	if s.early != 0 || s.lateNS.Load() != 0 {
		t.Errorf("after early wake-ups the estimate is %d ns, want 0", s.early)
	}
}
