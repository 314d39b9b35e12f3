package wanem

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// packet is one IP packet in flight through the emulator. Packets come
// from a pool and go back to it after they are written or dropped, so the
// data path allocates nothing per packet.
type packet struct {
	buf      []byte
	n        int
	from, to int
	// arrived is when the emulator read the packet, due when it must be
	// written (or, with atDownlink, when it reaches the destination's
	// downlink queue).
	arrived, due int64
	seq          uint64
	atDownlink   bool
}

// pktHeap is a binary min-heap of packets ordered by (due, seq). Packets of
// one link have non-decreasing due times and increasing sequence numbers,
// so the heap hands them out in link order.
type pktHeap []*packet

func (h pktHeap) less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}

func (h *pktHeap) push(p *packet) {
	*h = append(*h, p)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *pktHeap) pop() *packet {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = nil
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, m) {
			m = l
		}
		if r < len(s) && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// scheduler delivers the packets bound for one site at their due times.
// It runs on its own locked OS thread with a timer slack of 1 ns and sleeps
// in ppoll with a nanosecond timeout, so it wakes within tens of
// microseconds of a deadline (Go's own timers on Linux are rounded to a
// millisecond). Producers wake it through an eventfd only when they queue
// a packet due before the deadline it sleeps on.
//
// How late the kernel wakes a sleeping thread depends on the machine (a
// few microseconds on bare metal, a few hundred in some virtual machines),
// and every microsecond of it would add to the emulated delay. The
// scheduler therefore measures its own lateness after every timed sleep
// and sleeps that much less, delivering packets due within the expected
// lateness at once: emulated delays are then right on average, on any
// machine.
type scheduler struct {
	mu       sync.Mutex
	heap     pktHeap
	seq      uint64
	sleeping int64 // deadline of the current sleep, 0 while awake
	efd      int
	deliver  func(p *packet, now int64)
	// early is the expected wake-up lateness in nanoseconds: sleeps end
	// this much before the next deadline. Only the scheduler's own thread
	// writes it; lateNS mirrors it for readers of Truth.
	early  int64
	lateNS atomic.Int64
}

// Bounds of the wake-up lateness compensation: a single late wake-up (the
// thread preempted, say) moves the estimate by at most maxLate/lateGain,
// and the estimate never exceeds maxLate.
const (
	maxLate  = 500 * time.Microsecond
	lateGain = 16
)

// learnLateness folds the lateness of one timed wake-up into the estimate.
func (s *scheduler) learnLateness(late int64) {
	late = min(max(late, -int64(maxLate)), int64(maxLate))
	s.early += (late - s.early) / lateGain
	s.early = min(max(s.early, 0), int64(maxLate))
	s.lateNS.Store(s.early)
}

const batchSize = 64

func newScheduler(deliver func(p *packet, now int64)) (*scheduler, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &scheduler{efd: efd, deliver: deliver}, nil
}

var eventOne = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// push queues p for delivery at p.due.
func (s *scheduler) push(p *packet) {
	s.mu.Lock()
	s.seq++
	p.seq = s.seq
	s.heap.push(p)
	wake := s.sleeping != 0 && p.due < s.sleeping
	if wake {
		s.sleeping = 0
	}
	s.mu.Unlock()
	if wake {
		unix.Write(s.efd, eventOne)
	}
}

// popDue moves up to batchSize packets due at now into batch. When none is
// due it marks the scheduler asleep and returns the next deadline.
func (s *scheduler) popDue(now int64, batch []*packet) ([]*packet, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(batch) < batchSize && len(s.heap) > 0 && s.heap[0].due <= now {
		batch = append(batch, s.heap.pop())
	}
	if len(batch) > 0 {
		return batch, 0
	}
	next := int64(math.MaxInt64)
	if len(s.heap) > 0 {
		next = s.heap[0].due
	}
	s.sleeping = next
	return batch, next
}

// run delivers packets until stop is closed (checked after every wake-up).
func (s *scheduler) run(clock func() int64, stop <-chan struct{}) {
	runtime.LockOSThread()
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	// Deliveries stay on time while other programs load the CPUs. The
	// thread sleeps between deadlines and only writes packets, so it
	// cannot starve the machine.
	realTime(schedulerPriority)
	batch := make([]*packet, 0, batchSize)
	buf := make([]byte, 8)
	fds := []unix.PollFd{{Fd: int32(s.efd), Events: unix.POLLIN}}
	for {
		now := clock()
		var next int64
		batch, next = s.popDue(now+s.early, batch[:0])
		if len(batch) > 0 {
			for _, p := range batch {
				s.deliver(p, now)
			}
			continue
		}
		select {
		case <-stop:
			return
		default:
		}
		var ts *unix.Timespec
		wakeAt := next - s.early
		if next != math.MaxInt64 {
			t := unix.NsecToTimespec(wakeAt - now)
			ts = &t
		}
		if n, _ := unix.Ppoll(fds, ts, nil); n > 0 {
			unix.Read(s.efd, buf)
		} else if n == 0 && ts != nil {
			s.learnLateness(clock() - wakeAt)
		}
		s.mu.Lock()
		s.sleeping = 0
		s.mu.Unlock()
	}
}

// The real-time priorities of the emulator's threads: its readers above
// its schedulers, so that packets are taken in as they come even while
// due ones are written. Only these threads are real-time, not the whole
// process: the Go runtime's own threads (sysmon above all, which wakes
// every 20 µs while goroutines sit in system calls, as these threads do)
// would otherwise run real-time too and take a core from every other
// program (docs/lab.md, "The emulator's priority").
const (
	readerPriority    = 10
	schedulerPriority = 1
)

// realTime makes the calling thread, which must be locked to its
// goroutine, real-time (SCHED_FIFO) at prio; it is best effort (it needs
// root or CAP_SYS_NICE), and the thread keeps its priority otherwise.
func realTime(prio int) {
	unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(prio)}, 0)
}

// wake interrupts the scheduler's sleep (used to stop it).
func (s *scheduler) wake() { unix.Write(s.efd, eventOne) }

// monoClock returns nanoseconds on the monotonic clock since start.
func monoClock(start time.Time) func() int64 {
	return func() int64 { return int64(time.Since(start)) + int64(time.Second) }
}

// monoTime returns the wall time of t, a reading of monoClock(start).
func monoTime(start time.Time, t int64) time.Time {
	return start.Add(time.Duration(t) - time.Second)
}
