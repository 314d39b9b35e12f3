package wanem

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// OpenTUN creates a TUN device (IP packets, no packet-information header)
// in the calling thread's network namespace and returns its blocking file
// descriptor. The device keeps working through this descriptor after it is
// moved to another namespace.
func OpenTUN(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUN name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("create TUN %s: %w", name, err)
	}
	return fd, nil
}
