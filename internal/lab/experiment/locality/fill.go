package locality

import (
	"context"
	"fmt"
	"time"

	"github.com/detour-overlay/detour/internal/lab/kvload"
)

// fillBatch is how much the client sends a disk server before it waits
// for extstore to take the items out of memory: memcached evicts items
// that arrive faster than its flusher writes them to the device.
const fillBatch = 512 << 10

// fill stores every object on every server, the servers in parallel, and
// checks that none was evicted and that the disk server holds each one
// in extstore.
func (e *env) fill(ctx context.Context) error {
	errs := make(chan error, len(e.servers))
	for _, s := range e.servers {
		go func(s *server) { errs <- e.fillServer(ctx, s) }(s)
	}
	var first error
	for range e.servers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	return e.checkDisk()
}

// fillServer sets every key of every size on s.
func (e *env) fillServer(ctx context.Context, s *server) error {
	t0 := time.Now()
	sent := 0
	for _, size := range e.c.Sizes {
		v := value(s, size)
		for i := 0; i < e.c.Keys[size]; i++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := s.conn.SetNoreply(key(size, i), v); err != nil {
				return fmt.Errorf("locality: fill %s: %w", s.Address, err)
			}
			sent += size
			if s.Tier == "disk" && sent >= fillBatch {
				sent = 0
				if err := waitFlushed(s.conn); err != nil {
					return fmt.Errorf("locality: fill %s: %w", s.Address, err)
				}
			}
		}
	}
	if err := s.conn.Sync(); err != nil {
		return fmt.Errorf("locality: fill %s: %w", s.Address, err)
	}
	if s.Tier == "disk" {
		if err := waitFlushed(s.conn); err != nil {
			return err
		}
	}
	st, err := s.conn.Stats()
	if err != nil {
		return err
	}
	// The disk server may evict a few items its flusher had not yet
	// written (its RAM is small on purpose); checkDisk sets them again.
	if ev := kvload.StatInt(st, "evictions"); ev > 0 && s.Tier != "disk" {
		return fmt.Errorf("locality: %s evicted %d items while being filled", s.Address, ev)
	}
	fmt.Fprintf(e.c.Log, "locality: filled %s (%s %s) in %.1f s\n", s.Address, s.Site, s.Tier, time.Since(t0).Seconds())
	return nil
}

// waitFlushed waits until all but a few of the server's items are in
// extstore (at most 5 s).
func waitFlushed(c *kvload.Conn) error {
	if err := c.Sync(); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := c.Stats()
		if err != nil {
			return err
		}
		if kvload.StatInt(st, "curr_items")-kvload.StatInt(st, "extstore_objects_used") < 4 || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkDisk checks that the disk server has every key, setting those it
// evicted again one at a time (up to three passes), and that its items
// are in extstore.
func (e *env) checkDisk() error {
	c := e.disk.conn
	missing := 0
	for pass := 0; pass < 3; pass++ {
		missing = 0
		for _, size := range e.c.Sizes {
			v := value(e.disk, size)
			for i := 0; i < e.c.Keys[size]; i++ {
				ok, err := c.Has(key(size, i))
				if err != nil {
					return err
				}
				if ok {
					continue
				}
				missing++
				if err := c.Set(key(size, i), v); err != nil {
					return err
				}
				if err := waitFlushed(c); err != nil {
					return err
				}
			}
		}
		if missing == 0 {
			break
		}
		fmt.Fprintf(e.c.Log, "locality: set %d evicted keys again on the disk server\n", missing)
	}
	st, err := c.Stats()
	if err != nil {
		return err
	}
	items, ext := kvload.StatInt(st, "curr_items"), kvload.StatInt(st, "extstore_objects_used")
	fmt.Fprintf(e.c.Log, "locality: disk %s holds %d items, %d of them in extstore (%d MB), %d evictions while filling\n",
		e.disk.Address, items, ext, kvload.StatInt(st, "extstore_bytes_used")>>20, kvload.StatInt(st, "evictions"))
	if missing > 0 {
		return fmt.Errorf("locality: the disk server still lost %d keys after three passes", missing)
	}
	if ext < items*9/10 {
		return fmt.Errorf("locality: only %d of the disk server's %d items are in extstore", ext, items)
	}
	return nil
}

// settle lets the disk's writeback finish and its page cache be dropped
// before reads are timed.
func (e *env) settle(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(3 * time.Second):
		return nil
	}
}
