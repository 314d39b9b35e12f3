package device

import (
	"errors"
	"fmt"
	"sync"

	"github.com/detour-overlay/detour/internal/offload"
)

// OffloadTAP is a TAP device opened with segmentation offloads, presented
// as an ordinary Device: reads give MTU-sized Ethernet frames (the kernel's
// TCP super-frames of up to 64 KB, and UDP ones where the kernel has USO,
// split by package offload, with complete checksums), and writes of
// consecutive segments of one TCP flow, or, with USO (see USO), of
// consecutive datagrams of one UDP flow, are coalesced into one
// super-frame, which the kernel takes in one system call. Frames written
// are held until Flush, which the data path calls at the end of every
// batch it delivers, so no frame waits for another batch.
type OffloadTAP struct {
	tap *TAP

	// Read side, used by one goroutine.
	arena   []byte   // what frames are read into, packed
	raw     [][]byte // frames and super-frames as read, behind their virtio_net_hdr (views of arena)
	rawN    int      // frames read
	rawNext int      // the next one to split

	// Write side.
	wmu   sync.Mutex
	co    *offload.Coalescer
	plain []byte
}

// A read of the device takes frames into one arena, packed, while there is
// room for the largest super-frame: up to rawFrames small frames (64-byte
// datagrams give as many as one batch of the data path can take) or at
// least superFrames super-frames of 64 KB per wake-up.
const (
	superFrames = 4
	rawFrames   = 128
)

// superFrameSize holds a virtio_net_hdr and the largest super-frame.
const superFrameSize = offload.HdrLen + 65535 + 18

// OpenOffloadTAP opens a TAP device with checksum and TCP segmentation
// offloads, and UDP segmentation offload where the kernel has it (Linux
// 6.2 and later); see OpenTAPWith for the other arguments (o.VnetHdr is
// implied). Written UDP datagrams are coalesced only when the kernel
// accepted USO.
func OpenOffloadTAP(name string, mtu int, bridge string, o TAPOptions) (*OffloadTAP, error) {
	o.VnetHdr = true
	t, err := OpenTAPWith(name, mtu, bridge, o)
	if err != nil {
		return nil, err
	}
	co := offload.NewCoalescer(make([]byte, superFrameSize))
	if t.USO() {
		co.EnableUDP()
	}
	return &OffloadTAP{tap: t, arena: make([]byte, superFrames*(superFrameSize+8)), raw: make([][]byte, rawFrames),
		co: co, plain: make([]byte, superFrameSize)}, nil
}

// ReadBatch implements Device. It splits super-frames into bufs, each of
// which must hold an MTU-sized frame; a super-frame that does not fit in
// what is left of bufs waits for the next call, and one that does not fit
// in all of them is dropped, so callers should offer at least 128 buffers
// (a UDP super-frame carries up to 128 datagrams on recent kernels).
func (o *OffloadTAP) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	if o.rawNext == o.rawN {
		n, err := o.tap.ReadPacked(o.arena, superFrameSize, o.raw)
		if err != nil {
			return 0, err
		}
		o.rawN, o.rawNext = n, 0
	}
	out := 0
	for o.rawNext < o.rawN {
		n, err := offload.Split(o.raw[o.rawNext], bufs[out:], sizes[out:])
		if errors.Is(err, offload.ErrNoRoom) && out > 0 {
			break // the rest of this super-frame goes in the next batch
		}
		o.rawNext++
		if err != nil {
			continue // a frame the kernel should not have given: dropped
		}
		out += n
	}
	return out, nil
}

// Wake implements Waker.
func (o *OffloadTAP) Wake() error { return o.tap.Wake() }

// Read implements Device with a batch of one frame.
func (o *OffloadTAP) Read(b []byte) (int, error) {
	var size [1]int
	for {
		n, err := o.ReadBatch([][]byte{b}, size[:])
		if err != nil || n == 1 {
			return size[0], err
		}
	}
}

// Write implements Device: the frame joins the pending super-frame when it
// continues its TCP (or, with USO, UDP) flow, and is otherwise written
// after it.
func (o *OffloadTAP) Write(frame []byte) (int, error) {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	if o.co.Add(frame) {
		return len(frame), nil
	}
	if err := o.flushLocked(); err != nil {
		return 0, err
	}
	if o.co.Add(frame) {
		return len(frame), nil
	}
	if len(frame)+offload.HdrLen > len(o.plain) {
		return 0, fmt.Errorf("device: %s: frame of %d bytes", o.tap.name, len(frame))
	}
	offload.PutPlain(o.plain)
	n := copy(o.plain[offload.HdrLen:], frame)
	if _, err := o.tap.Write(o.plain[:offload.HdrLen+n]); err != nil {
		return 0, err
	}
	return len(frame), nil
}

// Flush writes the pending super-frame, if any.
func (o *OffloadTAP) Flush() error {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	return o.flushLocked()
}

func (o *OffloadTAP) flushLocked() error {
	if !o.co.Pending() {
		return nil
	}
	_, err := o.tap.Write(o.co.Flush())
	return err
}

// USO reports whether the kernel accepted UDP segmentation offload on the
// device, so that UDP super-frames are read and written.
func (o *OffloadTAP) USO() bool { return o.tap.USO() }

// Name implements Device.
func (o *OffloadTAP) Name() string { return o.tap.Name() }

// MTU implements Device.
func (o *OffloadTAP) MTU() int { return o.tap.MTU() }

// Close implements Device.
func (o *OffloadTAP) Close() error { return o.tap.Close() }

// Flusher is implemented by devices that hold written frames until Flush.
type Flusher interface {
	Flush() error
}
