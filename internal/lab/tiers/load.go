package tiers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LoadOptions describe the background work of a disk.
type LoadOptions struct {
	// File is read Depth blocks of Block bytes at a time; Depth 0 reads
	// nothing.
	File         string
	Depth, Block int
	// DropFile, when set, has its page cache dropped every DropEvery.
	DropFile  string
	DropEvery time.Duration
}

// Background runs a disk's background work until ctx ends: the reader
// (Load) and the page-cache dropper (DropCache).
func Background(ctx context.Context, o LoadOptions) error {
	errs := make(chan error, 2)
	n := 0
	if o.Depth > 0 {
		n++
		go func() { errs <- Load(ctx, o.File, o.Depth, o.Block) }()
	}
	if o.DropFile != "" && o.DropEvery > 0 {
		n++
		go func() { errs <- DropCache(ctx, o.DropFile, o.DropEvery) }()
	}
	var first error
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// DropCache drops the page cache of path every period until ctx ends
// (posix_fadvise POSIX_FADV_DONTNEED, which also starts the writeback of
// dirty pages): a page memcached read from its extstore file stays in
// memory for at most one period, as if the data set were much larger
// than the server's memory. The data-locality paper cleared the buffer
// cache after each read for the same reason.
func DropCache(ctx context.Context, path string, period time.Duration) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
		if err != nil {
			// memcached creates the file when it starts.
			continue
		}
		err = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
		syscall.Close(fd)
		if err != nil {
			return fmt.Errorf("tiers: dropping the cache of %s: %w", path, err)
		}
	}
}

// Load keeps depth direct (O_DIRECT) reads of block bytes at random
// aligned offsets of path outstanding until ctx ends: other work sharing
// the disk. Direct reads bypass the page cache, so every one reaches the
// device and its cap.
func Load(ctx context.Context, path string, depth, block int) error {
	if depth < 1 || block < 512 || block%512 != 0 {
		return fmt.Errorf("tiers: load: depth %d, block %d (a multiple of 512)", depth, block)
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("tiers: load: %w", err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	blocks := st.Size / int64(block)
	if blocks < 1 {
		return fmt.Errorf("tiers: load: %s is smaller than one block", path)
	}
	var wg sync.WaitGroup
	errs := make(chan error, depth)
	for i := 0; i < depth; i++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			buf := alignedBuffer(block)
			rng := rand.New(rand.NewPCG(seed, uint64(os.Getpid())))
			for ctx.Err() == nil {
				off := rng.Int64N(blocks) * int64(block)
				if _, err := syscall.Pread(fd, buf, off); err != nil && err != syscall.EINTR {
					errs <- err
					return
				}
			}
		}(uint64(i))
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("tiers: load: %w", err)
	}
	return nil
}

// alignedBuffer returns n bytes aligned to 4096, as O_DIRECT needs.
func alignedBuffer(n int) []byte {
	const align = 4096
	b := make([]byte, n+align)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (align - 1))
	if off != 0 {
		off = align - off
	}
	return b[off : off+n]
}
