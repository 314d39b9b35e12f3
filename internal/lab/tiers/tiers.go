// Package tiers builds the storage tiers of the lab's memcached servers.
// The memory tier is plain memcached. The disk tier is memcached 1.6
// with extstore, its items on a file system of its own: a file attached
// to a loop device (direct I/O, so the host's page cache holds none of
// it), formatted ext4 and mounted in a private directory; the device's
// reads capped by the blkio cgroup v1 throttle (bytes and I/Os per
// second, as a cloud disk is capped) and the server's memory, page cache
// included, by a memory cgroup, so that reads really go to the device.
// An optional background reader in the same cgroup keeps some 4 KB
// direct reads outstanding on the device: other work sharing the disk,
// which makes every read of memcached wait its turn under the cap.
//
// Create records every piece it makes in a Disk as it goes (the caller
// saves it), and Remove takes away whatever a Disk records, so a crash
// at any point leaves nothing that Remove cannot find. Processes are
// the caller's: it starts them through Wrap, records them by PID and
// kills them before Remove.
package tiers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config sets up one disk. Zero fields take the defaults below.
type Config struct {
	// ReadMBps and ReadIOPS cap the device's reads.
	ReadMBps int `json:"read_mbps"`
	ReadIOPS int `json:"read_iops"`
	// MemoryLimitMB caps memcached's memory, page cache included.
	MemoryLimitMB int `json:"memory_limit_mb"`
	// CacheMB is memcached's item memory (-m).
	CacheMB int `json:"cache_mb"`
	// FileMB is the size of the device; extstore takes all but 64 MB.
	FileMB int `json:"file_mb"`
	// ReadAheadKB is the device's read-ahead.
	ReadAheadKB int `json:"read_ahead_kb"`
	// LoadDepth is the number of direct 4 KB reads the background reader
	// keeps outstanding; -1 for no reader.
	LoadDepth int `json:"load_depth"`
	// DropCacheMS is the period of the extstore file's page-cache drops;
	// -1 for none.
	DropCacheMS int `json:"drop_cache_ms"`
}

// Defaults of a disk: a small cloud disk (Azure Standard HDD S-series
// and AWS st1/sc1 volumes are capped at 500 IOPS and 60 MB/s or less;
// 20 MB/s is the bandwidth the data-locality paper measured for Azure's
// disks), a RAM cache much smaller than the data, and a reader sharing
// the disk.
const (
	DefaultReadMBps      = 20
	DefaultReadIOPS      = 500
	DefaultMemoryLimitMB = 48
	DefaultCacheMB       = 16
	DefaultFileMB        = 512
	DefaultReadAheadKB   = 128
	DefaultLoadDepth     = 8
	DefaultDropCacheMS   = 50
	// LoadFileMB is the size of the background reader's file.
	LoadFileMB = 64
	// LoadBlock is the size of the background reader's reads.
	LoadBlock = 4096
)

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.ReadMBps, DefaultReadMBps)
	def(&c.ReadIOPS, DefaultReadIOPS)
	def(&c.MemoryLimitMB, DefaultMemoryLimitMB)
	def(&c.CacheMB, DefaultCacheMB)
	def(&c.FileMB, DefaultFileMB)
	def(&c.ReadAheadKB, DefaultReadAheadKB)
	def(&c.LoadDepth, DefaultLoadDepth)
	def(&c.DropCacheMS, DefaultDropCacheMS)
	return c
}

// Disk is one disk tier as built: what Remove takes away.
type Disk struct {
	Name   string `json:"name"`
	Config Config `json:"config"`
	// Dir holds the image and the mount point.
	Dir   string `json:"dir"`
	Image string `json:"image"`
	// Loop is the loop device (/dev/loopN) and Dev its major:minor.
	Loop  string `json:"loop,omitempty"`
	Dev   string `json:"dev,omitempty"`
	Mount string `json:"mount,omitempty"`
	// Mounted is set once the file system is mounted.
	Mounted bool `json:"mounted,omitempty"`
	// Blkio and Memory are the cgroup directories.
	Blkio  string `json:"blkio_cgroup,omitempty"`
	Memory string `json:"memory_cgroup,omitempty"`
}

// Cgroup v1 hierarchies the disks use.
var (
	BlkioRoot  = "/sys/fs/cgroup/blkio"
	MemoryRoot = "/sys/fs/cgroup/memory"
)

// ExtPath is the extstore file.
func (d *Disk) ExtPath() string { return filepath.Join(d.Mount, "extstore") }

// LoadPath is the background reader's file.
func (d *Disk) LoadPath() string { return filepath.Join(d.Mount, "load") }

// Create builds a disk named name (a cgroup and file name: letters,
// digits, '-') under dir. save is called with the record after every
// step, so that the caller can store it before the next one; on error
// the partial record is returned for Remove.
func Create(dir, name string, c Config, save func(*Disk) error) (*Disk, error) {
	c = c.WithDefaults()
	for _, root := range []string{BlkioRoot, MemoryRoot} {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			return nil, fmt.Errorf("tiers: a disk tier needs the cgroup v1 hierarchy %s (blkio throttle, memory limit): %w", root, err)
		}
	}
	if c.FileMB < 128 {
		return nil, fmt.Errorf("tiers: a disk needs at least 128 MB (file_mb %d)", c.FileMB)
	}
	d := &Disk{Name: name, Config: c, Dir: filepath.Join(dir, "disk-"+name)}
	d.Image = filepath.Join(d.Dir, "image")
	d.Mount = filepath.Join(d.Dir, "mnt")
	step := func(err error) error {
		if err != nil {
			return fmt.Errorf("tiers: disk %s: %w", name, err)
		}
		return save(d)
	}
	if err := step(nil); err != nil {
		return d, err
	}
	if err := os.MkdirAll(d.Mount, 0o755); err != nil {
		return d, step(err)
	}
	if err := step(makeImage(d.Image, c.FileMB)); err != nil {
		return d, err
	}
	out, err := run("losetup", "--find", "--show", "--direct-io=on", d.Image)
	d.Loop = strings.TrimSpace(out)
	if err := step(err); err != nil {
		return d, err
	}
	d.Dev, err = majorMinor(d.Loop)
	if err := step(err); err != nil {
		return d, err
	}
	ra := filepath.Join("/sys/block", filepath.Base(d.Loop), "queue", "read_ahead_kb")
	if err := step(os.WriteFile(ra, []byte(strconv.Itoa(c.ReadAheadKB)), 0o644)); err != nil {
		return d, err
	}
	if _, err := run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", d.Loop); err != nil {
		return d, step(err)
	}
	if _, err := run("mount", "-o", "noatime", d.Loop, d.Mount); err != nil {
		return d, step(err)
	}
	d.Mounted = true
	if err := step(nil); err != nil {
		return d, err
	}
	if c.LoadDepth > 0 {
		if err := step(fillFile(d.LoadPath(), LoadFileMB)); err != nil {
			return d, err
		}
	}
	return d, step(d.makeCgroups())
}

// makeImage creates the device's backing file, allocated on the host's
// file system.
func makeImage(path string, mb int) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	return syscall.Fallocate(int(f.Fd()), 0, 0, int64(mb)<<20)
}

// fillFile writes mb megabytes of non-zero data, so that every block of
// the file is really on the device.
func fillFile(path string, mb int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for i := 0; i < mb; i++ {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// makeCgroups creates the disk's blkio and memory cgroups and sets the
// caps.
func (d *Disk) makeCgroups() error {
	cg := "detour-lab-" + d.Name
	d.Blkio = filepath.Join(BlkioRoot, cg)
	d.Memory = filepath.Join(MemoryRoot, cg)
	for _, p := range []string{d.Blkio, d.Memory} {
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if err := d.SetCap(d.Config.ReadMBps, d.Config.ReadIOPS); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d.Memory, "memory.limit_in_bytes"), []byte(strconv.Itoa(d.Config.MemoryLimitMB<<20)), 0o644)
}

// SetCap sets the device's read caps (0 lifts one).
func (d *Disk) SetCap(mbps, iops int) error {
	if err := os.WriteFile(filepath.Join(d.Blkio, "blkio.throttle.read_bps_device"), []byte(fmt.Sprintf("%s %d", d.Dev, int64(mbps)<<20)), 0o644); err != nil {
		return fmt.Errorf("tiers: read_bps_device: %w", err)
	}
	if err := os.WriteFile(filepath.Join(d.Blkio, "blkio.throttle.read_iops_device"), []byte(fmt.Sprintf("%s %d", d.Dev, iops)), 0o644); err != nil {
		return fmt.Errorf("tiers: read_iops_device: %w", err)
	}
	return nil
}

// Wrap returns a command line that puts itself into the disk's cgroups
// and then executes argv, keeping its PID.
func (d *Disk) Wrap(argv ...string) []string {
	script := fmt.Sprintf("echo $$ > %s/cgroup.procs && echo $$ > %s/cgroup.procs && exec \"$@\"", d.Blkio, d.Memory)
	return append([]string{"sh", "-c", script, "sh"}, argv...)
}

// MemcachedArgs are the extstore options of the disk's memcached:
// -U 0 (memcached refuses UDP with extstore), items of 2 MB at most,
// small extstore pages and write buffers, every item over 512 bytes
// written to the device as soon as it reaches the COLD part of the LRU
// (ext_item_age=0), and no item pulled back into RAM by reads
// (ext_recache_rate at its largest).
func (d *Disk) MemcachedArgs() []string {
	extMB := d.Config.FileMB - 64
	return []string{"-U", "0", "-m", strconv.Itoa(d.Config.CacheMB), "-I", "2m",
		"-o", fmt.Sprintf("ext_page_size=8,ext_wbuf_size=2,ext_threads=2,ext_path=%s:%dm,ext_item_size=512,ext_item_age=0,ext_recache_rate=2000000000,ext_max_sleep=10000,slab_automove=0",
			d.ExtPath(), extMB)}
}

// HasBackground reports whether the disk has background work: a reader
// or page-cache drops.
func (d *Disk) HasBackground() bool { return d.Config.LoadDepth > 0 || d.Config.DropCacheMS > 0 }

// LoadArgs are the arguments of the background work (`detour-lab tiers
// load`), after the program's name.
func (d *Disk) LoadArgs() []string {
	args := []string{"tiers", "load", "--block", strconv.Itoa(LoadBlock)}
	if d.Config.LoadDepth > 0 {
		args = append(args, "--file", d.LoadPath(), "--depth", strconv.Itoa(d.Config.LoadDepth))
	}
	if d.Config.DropCacheMS > 0 {
		args = append(args, "--drop", d.ExtPath(), "--drop-every", (time.Duration(d.Config.DropCacheMS) * time.Millisecond).String())
	}
	return args
}

// Remove takes away everything the record names, carrying on past
// errors: the cgroups (their processes must be gone), the mount, every
// loop device attached to the image, the directory. It returns the
// first error.
func (d *Disk) Remove() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("tiers: removing disk %s: %w", d.Name, err)
		}
	}
	for _, cg := range []string{d.Blkio, d.Memory} {
		if cg != "" {
			keep(removeCgroup(cg))
		}
	}
	if d.Mount != "" && isMounted(d.Mount) {
		if _, err := run("umount", d.Mount); err != nil {
			// Busy (a process still holds a file): detach it now, the
			// kernel frees it when the last user goes.
			_, err = run("umount", "-l", d.Mount)
			keep(err)
		}
	}
	if d.Image != "" {
		if out, err := run("losetup", "-j", d.Image); err == nil {
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if dev, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(dev, "/dev/loop") {
					_, err := run("losetup", "-d", dev)
					keep(err)
				}
			}
		}
	}
	if d.Dir != "" {
		keep(os.RemoveAll(d.Dir))
	}
	return first
}

// removeCgroup removes a cgroup directory, waiting briefly for processes
// being killed to leave it.
func removeCgroup(path string) error {
	var err error
	for i := 0; i < 50; i++ {
		err = os.Remove(path)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// isMounted reports whether path is a mount point (in /proc/self/mounts).
func isMounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && f[1] == path {
			return true
		}
	}
	return false
}

// majorMinor returns a block device's "major:minor".
func majorMinor(dev string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		return "", err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
		return "", fmt.Errorf("%s is not a block device", dev)
	}
	return fmt.Sprintf("%d:%d", (st.Rdev>>8)&0xfff, (st.Rdev&0xff)|((st.Rdev>>12)&0xfff00)), nil
}

// run runs a command and returns its standard output; the error quotes
// its standard error.
func run(prog string, args ...string) (string, error) {
	cmd := exec.Command(prog, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", prog, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
