package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/api"
)

// serveAPI opens the API's two listeners and serves them: the TCP address
// with the read-only views (behind api.Guard: Host check, GET only, the
// token when configured) and the unix socket with every endpoint, changes
// included, for root and group detour. It returns the function that
// closes both.
func (a *Agent) serveAPI() (func(), error) {
	token, err := readToken(a.cfg.APITokenFile)
	if err != nil {
		return nil, err
	}
	srv := api.NewServer(a, a.registry, a.log)
	srv.SetHistory(a.history)
	ln, err := net.Listen("tcp", a.cfg.API)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	path := a.socketPath()
	acc, err := a.socketAccess()
	if err != nil {
		ln.Close()
		return nil, err
	}
	sock, err := api.ListenSocket(path, acc)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("api_socket: %w", err)
	}
	guard := api.GuardOptions{Addr: ln.Addr().(*net.TCPAddr).AddrPort(), Token: token}
	tcp := &http.Server{Handler: api.Guard(withProfiler(srv.ReadHandler()), guard), ReadHeaderTimeout: 5 * time.Second}
	local := api.LocalServer(srv.LocalHandler(acc))
	ctx, stopHistory := context.WithCancel(context.Background())
	go srv.RecordHistory(ctx, time.Second)
	go tcp.Serve(ln)
	go local.Serve(sock)
	a.log.Info("api", "views", ln.Addr(), "token", token != "", "changes", path, "group", acc.Group)
	return func() {
		stopHistory()
		tcp.Close()
		local.Close()
	}, nil
}

// socketPath is the configured socket, or the one the CLI finds by
// default (api.LocalSocket).
func (a *Agent) socketPath() string {
	if a.cfg.APISocket != "" {
		return a.cfg.APISocket
	}
	return api.LocalSocket()
}

// socketAccess is group detour's access to the socket, or root's only
// (said in the log) when the group does not exist or the agent does not
// run as root and so cannot give the socket to the group.
func (a *Agent) socketAccess() (api.Access, error) {
	acc, err := api.SocketAccess()
	if err != nil {
		return api.Access{}, err
	}
	switch {
	case os.Geteuid() != 0:
		a.log.Warn("the agent does not run as root: only its own user may change the overlay", "uid", os.Geteuid())
		return api.Access{GID: -1}, nil
	case acc.GID < 0:
		a.log.Warn("group " + api.SocketGroup + " does not exist: only root may change the overlay (create it to let its members)")
	}
	return acc, nil
}

// readToken reads the API's bearer token from file (none for ""). The
// file must not be readable by every user.
func readToken(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	fi, err := os.Stat(file)
	if err != nil {
		return "", fmt.Errorf("api_token_file: %w", err)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return "", fmt.Errorf("api_token_file: %s is readable by every user (mode %v); make it readable by root only (chmod 600)", file, fi.Mode().Perm())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("api_token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("api_token_file: %s must hold one token of at least 16 characters without spaces", file)
	}
	return tok, nil
}
