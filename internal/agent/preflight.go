package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/detour-overlay/detour/internal/config"
)

// Finding is one result of Preflight: a problem that would stop the agent
// at start, or a warning about something it would run with.
type Finding struct {
	// Problem is true for what stops the agent, false for a warning.
	Problem bool
	// Field is the configuration field concerned.
	Field string
	Msg   string
}

func (f Finding) String() string {
	kind := "warning"
	if f.Problem {
		kind = "problem"
	}
	return fmt.Sprintf("%s: %s: %s", kind, f.Field, f.Msg)
}

// Preflight checks on this machine what the agent needs at start beyond a
// valid file (`detour agent --check`): the privileges to open TAP
// devices, the bridges, the UDP port and the API's address, the token
// file; and it warns when the overlay would run in the clear. It changes
// nothing: each address is bound and released at once.
func Preflight(cfg *config.Agent) []Finding {
	var fs []Finding
	problem := func(field, format string, args ...any) {
		fs = append(fs, Finding{Problem: true, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if !hasNetAdmin() {
		problem("networks", "the agent needs root or CAP_NET_ADMIN to open its TAP devices (dist/detour.service grants it)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		problem("networks", "no /dev/net/tun on this machine (modprobe tun): %v", err)
	}
	for i, n := range cfg.Networks {
		if n.Bridge != "" {
			if msg := checkBridge(n.Bridge); msg != "" {
				problem(fmt.Sprintf("networks[%d].bridge", i), "%s", msg)
			}
		}
		if l, err := netlink.LinkByName(n.TAP); err == nil && l.Type() != "tuntap" {
			problem(fmt.Sprintf("networks[%d].tap", i), "%s exists and is a %s device, not a TAP device", n.TAP, l.Type())
		}
	}
	if err := tryBind("udp", cfg.Listen); err != nil {
		problem("listen", "cannot bind UDP %s: %v (another agent running? an address not on this machine?)", cfg.Listen, err)
	}
	if err := tryBind("tcp", cfg.API); err != nil {
		problem("api", "cannot bind TCP %s: %v", cfg.API, err)
	}
	if _, err := readToken(cfg.APITokenFile); err != nil {
		problem("api_token_file", "%v", errors.Unwrap(err))
	}
	if !cfg.Encrypted() {
		fs = append(fs, Finding{Field: "private_key_file", Msg: "not set: the overlay runs in the clear, and anyone on the path can read, change and inject its frames; give every site a key (detour genkey) before using it over the Internet"})
	}
	return fs
}

// capNetAdmin is CAP_NET_ADMIN's bit in the capability sets.
const capNetAdmin = 12

// hasNetAdmin reports whether this process has CAP_NET_ADMIN in its
// effective set (root has it unless a bounding set took it away).
func hasNetAdmin() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return os.Geteuid() == 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(l, "CapEff:"); ok {
			v, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && v&(1<<capNetAdmin) != 0
		}
	}
	return os.Geteuid() == 0
}

// checkBridge says what is wrong with the bridge named name, or "".
func checkBridge(name string) string {
	l, err := netlink.LinkByName(name)
	switch {
	case err != nil:
		return fmt.Sprintf("%s does not exist: create it and put the site's LAN port in it (ip link add %s type bridge; ip link set PORT master %s; ip link set %s up)", name, name, name, name)
	case l.Type() != "bridge":
		return fmt.Sprintf("%s is a %s device, not a bridge", name, l.Type())
	case l.Attrs().OperState == netlink.OperDown:
		return fmt.Sprintf("%s is down (ip link set %s up)", name, name)
	}
	return ""
}

// tryBind binds addr on network and releases it at once.
func tryBind(network, addr string) error {
	switch network {
	case "udp":
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return unwrapOp(err)
		}
		return c.Close()
	default:
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return unwrapOp(err)
		}
		return l.Close()
	}
}

// unwrapOp drops net.OpError's repetition of the operation and address.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
