package testbed

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
)

// ip runs the ip command with args and returns an error that includes its
// output when it fails.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ipBatch runs several ip commands in namespace ns with one process.
func ipBatch(ns string, lines []string) error {
	args := []string{"-b", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s -batch: %v: %s\ncommands:\n%s", ns, err, bytes.TrimSpace(out), strings.Join(lines, "\n"))
	}
	return nil
}

// listNamespaces returns the named network namespaces that start with
// prefix.
func listNamespaces(prefix string) []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// deleteNamespace removes a named namespace if it exists.
func deleteNamespace(ns string) error {
	if _, err := os.Stat("/run/netns/" + ns); err != nil {
		return nil
	}
	return ip("netns", "del", ns)
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,5}-$`)

// ValidPrefix checks a namespace prefix: a lowercase word of at most six
// characters followed by '-', e.g. "dt-".
func ValidPrefix(p string) error {
	if !prefixRE.MatchString(p) {
		return fmt.Errorf("namespace prefix %q: want a lowercase word of 1-6 letters or digits and a '-', e.g. %q", p, DefaultPrefix)
	}
	return nil
}

// GatewayNS is the name of a site's gateway namespace: the prefix and the
// site name in lower case. Site names are unique ignoring case, and
// contain no '.', so gateway and host names never collide.
func GatewayNS(prefix, site string) string { return prefix + strings.ToLower(site) }

// HostNS is the name of host k (1-based) of a site.
func HostNS(prefix, site string, k int) string {
	return fmt.Sprintf("%s.h%d", GatewayNS(prefix, site), k)
}

// UnderlayAddr is the underlay address of site i's gateway (0-based):
// 198.18.0.(i+1), in the 198.18.0.0/16 underlay subnet.
func UnderlayAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}) }

// HostAddr is the overlay address of host k (1-based) of site i
// (0-based): 198.19.(i+1).k, all in one /16 subnet across sites.
func HostAddr(i, k int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(i + 1), byte(k)}) }

// Subnet lengths of the underlay and the overlay.
const (
	underlayBits = 16
	overlayBits  = 16
)
