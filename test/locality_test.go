//go:build netns

package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/locality"
	"github.com/detour-overlay/detour/internal/lab/experiment/nsnet"
	"github.com/detour-overlay/detour/internal/lab/kvload"
	"github.com/detour-overlay/detour/internal/lab/testbed"
	"github.com/detour-overlay/detour/internal/lab/tiers"
)

// locPrefix names the namespaces of the locality test.
const locPrefix = "dtl-"

// TestLocalityTiers brings up the locality scenario and checks the disk
// tier: its loop device, mount and cgroups exist with the scenario's
// caps; 100 KB values written to it end up in extstore; reading them
// back makes memcached read extstore (get_extstore, extstore_bytes_read)
// and the process read that many bytes from the device (read_bytes, the
// page-cache misses); and the disk is slower than the memory server at
// the same site; `testbed disk-cap` lifts and restores the caps. After
// `testbed down`, nothing of the disk is left.
func TestLocalityTiers(t *testing.T) {
	for _, root := range []string{tiers.BlkioRoot, tiers.MemoryRoot} {
		if _, err := os.Stat(root); err != nil {
			t.Skipf("the disk tier needs the cgroup v1 hierarchy %s: %v", root, err)
		}
	}
	var disk testbed.DiskState
	t.Cleanup(func() { checkDiskGone(t, disk) })
	b := upWith(t, locPrefix, "locality", "--overlay", "detour-plain")
	if len(b.st.Disks) != 1 {
		t.Fatalf("%d disks in the state, want 1", len(b.st.Disks))
	}
	disk = b.st.Disks[0]
	d := disk.Disk
	out, err := exec.Command("losetup", "-j", d.Image).Output()
	if err != nil || !strings.HasPrefix(string(out), d.Loop+":") {
		t.Fatalf("losetup -j %s: %q %v", d.Image, out, err)
	}
	if !strings.Contains(mustRead(t, "/proc/self/mounts"), " "+d.Mount+" ext4 ") {
		t.Fatalf("%s is not mounted as ext4", d.Mount)
	}
	for file, want := range map[string]string{
		filepath.Join(d.Blkio, "blkio.throttle.read_bps_device"):  fmt.Sprintf("%s %d", d.Dev, 20<<20),
		filepath.Join(d.Blkio, "blkio.throttle.read_iops_device"): d.Dev + " 500",
		filepath.Join(d.Memory, "memory.limit_in_bytes"):          strconv.Itoa(48 << 20),
	} {
		if got := strings.TrimSpace(mustRead(t, file)); got != want {
			t.Fatalf("%s: %q, want %q", file, got, want)
		}
	}
	pid := memcachedPID(t, b.st, disk.Server)
	procs := strings.Fields(mustRead(t, filepath.Join(d.Blkio, "cgroup.procs")))
	if !slices.Contains(procs, strconv.Itoa(pid)) {
		t.Fatalf("the disk's memcached (pid %d) is not in its blkio cgroup (%v)", pid, procs)
	}

	client := b.st.Sites[0].Hosts[0].NS
	diskC := dialMC(t, client, disk.Server)
	mem := b.st.Sites[0].Hosts[2].Addr + ":11211"
	memC := dialMC(t, client, mem)
	const n, size = 200, 100000
	value := make([]byte, size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	for i := 0; i < n; i++ {
		for _, c := range []*kvload.Conn{diskC, memC} {
			if err := c.Set(fmt.Sprintf("v%d", i), value); err != nil {
				t.Fatal(err)
			}
		}
		if i%16 == 15 {
			waitExtstore(t, diskC)
		}
	}
	waitExtstore(t, diskC)
	st := stats(t, diskC)
	if kvload.StatInt(st, "evictions") != 0 || kvload.StatInt(st, "extstore_objects_used") < n*9/10 {
		t.Fatalf("after the fill: %s evictions, %s of %d items in extstore", st["evictions"], st["extstore_objects_used"], n)
	}
	time.Sleep(2 * time.Second) // writeback done, page cache dropped
	before, readBefore := stats(t, diskC), readBytes(t, pid)
	var lat [2][]float64
	const reads = 30
	for i := 0; i < reads; i++ {
		for j, c := range []*kvload.Conn{diskC, memC} {
			t0 := time.Now()
			v, ok, err := c.Get(fmt.Sprintf("v%d", (i*37)%n))
			if err != nil || !ok || len(v) != size {
				t.Fatalf("get: %v %v %d bytes", err, ok, len(v))
			}
			lat[j] = append(lat[j], float64(time.Since(t0))/1e6)
			time.Sleep(20 * time.Millisecond)
		}
	}
	after, readAfter := stats(t, diskC), readBytes(t, pid)
	ext := kvload.StatInt(after, "get_extstore") - kvload.StatInt(before, "get_extstore")
	extBytes := kvload.StatInt(after, "extstore_bytes_read") - kvload.StatInt(before, "extstore_bytes_read")
	devBytes := readAfter - readBefore
	slices.Sort(lat[0])
	slices.Sort(lat[1])
	p50d, p50m := locality.Quantile(lat[0], 0.5), locality.Quantile(lat[1], 0.5)
	t.Logf("disk: %d gets from extstore, %.1f MB read from extstore, %.1f MB from the device; 100 KB p50 disk %.2f ms, memory %.2f ms",
		ext, float64(extBytes)/1e6, float64(devBytes)/1e6, p50d, p50m)
	if ext != reads {
		t.Errorf("get_extstore rose by %d for %d reads of the disk", ext, reads)
	}
	if extBytes < reads*size {
		t.Errorf("extstore_bytes_read rose by %d, want at least %d", extBytes, reads*size)
	}
	if devBytes < int64(reads*size)*8/10 {
		t.Errorf("memcached read %d bytes from the device for %d bytes of values: the page cache served them", devBytes, reads*size)
	}
	if !(p50d > 5*p50m) {
		t.Errorf("100 KB: disk p50 %.2f ms is not slower than memory %.2f ms", p50d, p50m)
	}

	// `testbed disk-cap` lifts the caps (the throttle's rules go) and
	// restores the scenario's.
	bps := filepath.Join(d.Blkio, "blkio.throttle.read_bps_device")
	if _, e, err := b.run("disk-cap", disk.Server, "--read-mbps", "0", "--read-iops", "0"); err != nil {
		t.Fatalf("disk-cap: %v %s", err, e)
	}
	if got := strings.TrimSpace(mustRead(t, bps)); got != "" {
		t.Errorf("after lifting the cap: %q", got)
	}
	if _, e, err := b.run("disk-cap", disk.Server); err != nil {
		t.Fatalf("disk-cap: %v %s", err, e)
	}
	if got := strings.TrimSpace(mustRead(t, bps)); got != fmt.Sprintf("%s %d", d.Dev, 20<<20) {
		t.Errorf("after restoring the cap: %q", got)
	}
}

// dialMC opens a memcached TCP connection from namespace ns.
func dialMC(t *testing.T, ns, addr string) *kvload.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := nsnet.DialContext(ctx, ns, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	k := kvload.NewConn(c)
	t.Cleanup(func() { k.Close() })
	return k
}

func stats(t *testing.T, c *kvload.Conn) map[string]string {
	t.Helper()
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitExtstore waits until the server's items are all but a few in
// extstore (memcached evicts those that come faster than it writes).
func waitExtstore(t *testing.T, c *kvload.Conn) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		st := stats(t, c)
		if kvload.StatInt(st, "curr_items")-kvload.StatInt(st, "extstore_objects_used") < 4 {
			return
		}
	}
}

// memcachedPID returns the PID of the memcached serving address.
func memcachedPID(t *testing.T, st *testbed.State, address string) int {
	t.Helper()
	for _, p := range st.Procs {
		if strings.HasPrefix(p.Name, "memcached-") {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID)); err == nil &&
				strings.Contains(string(b), "\x00"+strings.Split(address, ":")[0]+"\x00") {
				return p.PID
			}
		}
	}
	t.Fatalf("no memcached for %s", address)
	return 0
}

// readBytes is a process's read_bytes (/proc/PID/io).
func readBytes(t *testing.T, pid int) int64 {
	t.Helper()
	for _, line := range strings.Split(mustRead(t, fmt.Sprintf("/proc/%d/io", pid)), "\n") {
		if v, ok := strings.CutPrefix(line, "read_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("no read_bytes for pid %d", pid)
	return 0
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkDiskGone checks that nothing of the disk is left after down.
func checkDiskGone(t *testing.T, disk testbed.DiskState) {
	d := disk.Disk
	if d.Image == "" {
		return
	}
	if out, _ := exec.Command("losetup", "-j", d.Image).Output(); len(out) > 0 {
		t.Errorf("loop device left after down: %s", out)
	}
	for _, p := range []string{d.Blkio, d.Memory, d.Dir} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left after down", p)
		}
	}
	if b, _ := os.ReadFile("/proc/self/mounts"); strings.Contains(string(b), d.Mount) {
		t.Errorf("%s still mounted after down", d.Mount)
	}
}
