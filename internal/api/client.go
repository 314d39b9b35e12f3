package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"
)

// Client talks to an agent's API: its TCP address (read-only views) or
// its unix socket (everything).
type Client struct {
	// Addr is the agent's API address, host:port; for a socket client,
	// the host named in requests.
	Addr string
	// Socket is the path of the agent's unix socket; empty for TCP.
	Socket string
	// Token, when set, is sent as a bearer token.
	Token string
	HTTP  *http.Client
}

// NewClient returns a client of the read-only views at addr.
func NewClient(addr string) *Client {
	return &Client{Addr: addr, HTTP: &http.Client{Timeout: 5 * time.Second}}
}

// NewSocketClient returns a client of the agent's unix socket at path,
// through which changes are made.
func NewSocketClient(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{Addr: "localhost", Socket: path, HTTP: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
}

// Get fetches path and decodes its JSON into out; with out of type
// *json.RawMessage the body is returned untouched.
func (c *Client) Get(path string, out any) error { return c.do(http.MethodGet, path, nil, out) }

// Post sends in as JSON to path and decodes the answer into out.
func (c *Client) Post(path string, in, out any) error { return c.do(http.MethodPost, path, in, out) }

// Put sends in as JSON to path with PUT and decodes the answer into out.
func (c *Client) Put(path string, in, out any) error { return c.do(http.MethodPut, path, in, out) }

// Delete calls DELETE on path.
func (c *Client) Delete(path string, out any) error { return c.do(http.MethodDelete, path, nil, out) }

// PathEscape escapes a site name for a URL path.
func PathEscape(s string) string { return url.PathEscape(s) }

func (c *Client) do(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+c.Addr+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return c.dialError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e Error
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return fmt.Errorf("agent: %s", e.Error)
		}
		return fmt.Errorf("agent: %s", resp.Status)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = b
		return nil
	}
	return json.Unmarshal(b, out)
}

// ErrPermission is matched (errors.Is) by the error of a socket client
// whose caller may not connect to the agent's socket.
var ErrPermission = errors.New("permission denied")

// dialError says why the agent could not be reached, in the operator's
// terms.
func (c *Client) dialError(err error) error {
	if c.Socket == "" {
		return fmt.Errorf("agent API at %s: %w (is `detour agent` running there?)", c.Addr, err)
	}
	switch {
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w on %s: run as root or as a member of group %s", ErrPermission, c.Socket, SocketGroup)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("no agent listens on %s (is `detour agent` running? another socket: --socket or %s)", c.Socket, SocketEnv)
	}
	return fmt.Errorf("agent socket %s: %w", c.Socket, err)
}
