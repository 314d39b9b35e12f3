package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The unix socket carries every change to the overlay. Its file is owned
// by root and group SocketGroup with mode 0660, so that only root and the
// group's members can connect; the server checks each caller's
// credentials again (SO_PEERCRED) and logs them with each change.

// SocketGroup is the group whose members may change the overlay.
const SocketGroup = "detour"

// DefaultSocket is the agent's unix socket outside named network
// namespaces.
const DefaultSocket = "/run/detour/detour.sock"

// SocketEnv names the environment variable that tells the CLI which socket
// to use.
const SocketEnv = "DETOUR_SOCKET"

// NetnsSocket is the socket of an agent that runs in the named network
// namespace ns (one of `ip netns`): the file system is shared by all
// namespaces, so each agent needs its own path.
func NetnsSocket(ns string) string { return "/run/detour/netns/" + ns + ".sock" }

// LocalSocket is the socket of the agent of this network namespace when
// the configuration names none: NetnsSocket of the namespace's name when
// the caller runs in a named namespace (as `ip netns exec NS` runs it),
// DefaultSocket otherwise. The agent and the CLI derive it the same way,
// so `ip netns exec NS detour route ...` reaches NS's agent.
func LocalSocket() string {
	if ns := netnsName(); ns != "" {
		return NetnsSocket(ns)
	}
	return DefaultSocket
}

// netnsName returns the name under /run/netns of the caller's network
// namespace, or "" (the way `ip netns identify` finds it).
func netnsName() string {
	self, err := os.Stat("/proc/self/ns/net")
	if err != nil {
		return ""
	}
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if fi, err := os.Stat(filepath.Join("/run/netns", e.Name())); err == nil && os.SameFile(fi, self) {
			return e.Name()
		}
	}
	return ""
}

// Access says who may use the socket: root, the agent's own user, and
// the members of a group.
type Access struct {
	// GID is the group's ID; negative for no group (root only).
	GID int
	// Group is the group's name, for messages.
	Group string
}

// SocketAccess returns the Access of group SocketGroup, or root only when
// the group does not exist.
func SocketAccess() (Access, error) {
	g, err := user.LookupGroup(SocketGroup)
	if err != nil {
		var unknown user.UnknownGroupError
		if errors.As(err, &unknown) {
			return Access{GID: -1}, nil
		}
		return Access{}, fmt.Errorf("group %s: %w", SocketGroup, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return Access{}, fmt.Errorf("group %s: gid %q", SocketGroup, g.Gid)
	}
	return Access{GID: gid, Group: SocketGroup}, nil
}

// ListenSocket creates the socket at path for acc: its directory if
// missing, a socket left by an agent that did not stop cleanly removed,
// then the file given to root (or the agent's user) and acc's group with
// mode 0660, or 0600 without a group.
func ListenSocket(path string, acc Access) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// The socket is created without permissions for anyone but its owner
	// and opened up only once its group is set.
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	if acc.GID >= 0 {
		if err := os.Chown(path, -1, acc.GID); err != nil {
			ln.Close()
			return nil, fmt.Errorf("%s: group %s: %w", path, acc.Group, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			ln.Close()
			return nil, err
		}
	}
	return ln, nil
}

// removeStale removes a socket file at path that no agent listens on; it
// refuses to touch anything else, or a socket that answers.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s: another agent listens on it", path)
	}
	return os.Remove(path)
}

// Peer is the process at the other end of a unix socket connection.
type Peer struct {
	PID  int32
	UID  uint32
	GID  uint32
	User string
}

func (p Peer) String() string { return fmt.Sprintf("uid %d (%s), pid %d", p.UID, p.User, p.PID) }

type peerKey struct{}

// PeerOf returns the peer that LocalServer recorded for a request.
func PeerOf(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// LocalServer returns an HTTP server of h for the unix socket: it records
// each connection's peer credentials (SO_PEERCRED) in its requests'
// contexts, where LocalHandler checks them.
func LocalServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if p, err := peerCred(c); err == nil {
				return withPeer(ctx, p)
			}
			return ctx
		},
	}
}

// peerCred reads the credentials of a unix connection's peer.
func peerCred(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, fmt.Errorf("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return Peer{}, err
	}
	if serr != nil {
		return Peer{}, serr
	}
	p := Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, User: strconv.Itoa(int(cred.Uid))}
	if u, err := user.LookupId(p.User); err == nil {
		p.User = u.Username
	}
	return p, nil
}

// checkPeer answers 403 to a request whose peer acc does not allow.
func (s *Server) checkPeer(acc Access, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := PeerOf(r.Context())
		if !ok {
			replyError(w, http.StatusForbidden, "permission denied: the caller's credentials could not be read")
			return
		}
		if err := acc.allow(p, groupsOf); err != nil {
			s.log.Warn("api caller refused", "method", r.Method, "path", r.URL.Path, "uid", p.UID, "user", p.User, "pid", p.PID)
			replyError(w, http.StatusForbidden, err.Error())
			return
		}
		h.ServeHTTP(w, r)
	})
}

// allow returns nil if p may use the socket: p is root or the agent's own
// user, or p's process has acc's group as its group or one of its
// supplementary groups (read by groups, from /proc).
func (acc Access) allow(p Peer, groups func(pid int32) ([]uint32, error)) error {
	if p.UID == 0 || int(p.UID) == os.Geteuid() {
		return nil
	}
	if acc.GID >= 0 {
		if p.GID == uint32(acc.GID) {
			return nil
		}
		if gs, err := groups(p.PID); err == nil && slices.Contains(gs, uint32(acc.GID)) {
			return nil
		}
	}
	return fmt.Errorf("permission denied: %s is neither root nor a member of group %s", p, SocketGroup)
}

// groupsOf returns the supplementary groups of process pid.
func groupsOf(pid int32) ([]uint32, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	return parseGroups(string(b))
}

// parseGroups reads the "Groups:" line of a /proc/PID/status file.
func parseGroups(status string) ([]uint32, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, "Groups:")
		if !ok {
			continue
		}
		var out []uint32
		for _, f := range strings.Fields(rest) {
			g, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("groups: %q", f)
			}
			out = append(out, uint32(g))
		}
		return out, nil
	}
	return nil, fmt.Errorf("no Groups line")
}

// withPeer records p as the caller of a request's connection.
func withPeer(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}
