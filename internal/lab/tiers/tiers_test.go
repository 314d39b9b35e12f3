package tiers

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultsAndArgs(t *testing.T) {
	c := Config{ReadMBps: 40, LoadDepth: -1}.WithDefaults()
	if c.ReadMBps != 40 || c.ReadIOPS != DefaultReadIOPS || c.LoadDepth != -1 || c.DropCacheMS != DefaultDropCacheMS {
		t.Fatalf("defaults %+v", c)
	}
	d := &Disk{Config: c, Mount: "/m", Blkio: "/b", Memory: "/mem"}
	args := strings.Join(d.MemcachedArgs(), " ")
	for _, want := range []string{"-U 0", "-m 16", "ext_path=/m/extstore:448m", "ext_item_age=0"} {
		if !strings.Contains(args, want) {
			t.Fatalf("memcached args %q lack %q", args, want)
		}
	}
	if !d.HasBackground() || slices.Contains(d.LoadArgs(), "--depth") || !slices.Contains(d.LoadArgs(), "/m/extstore") {
		t.Fatalf("load args %v", d.LoadArgs())
	}
	w := d.Wrap("prog", "a b")
	if w[0] != "sh" || !strings.Contains(w[2], "/b/cgroup.procs") || !strings.Contains(w[2], "/mem/cgroup.procs") || w[len(w)-1] != "a b" {
		t.Fatalf("wrap %q", w)
	}
}

// TestBackground runs the reader and the dropper on a temporary file for
// a moment; a missing file or a bad block size is an error.
func TestBackground(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "load")
	if err := fillFile(f, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := Background(ctx, LoadOptions{File: f, Depth: 2, Block: 4096, DropFile: f, DropEvery: 10 * time.Millisecond})
	if err != nil && !strings.Contains(err.Error(), "invalid argument") {
		// tmpfs has no O_DIRECT; any other error is a failure.
		t.Fatal(err)
	}
	if err := Load(context.Background(), filepath.Join(dir, "none"), 1, 4096); err == nil {
		t.Fatal("a missing file was accepted")
	}
	if err := Load(context.Background(), f, 1, 1000); err == nil {
		t.Fatal("a block that is not a multiple of 512 was accepted")
	}
	if _, err := os.Stat(f); err != nil {
		t.Fatal(err)
	}
}
