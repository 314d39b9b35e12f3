package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Client talks to an agent's API.
type Client struct {
	// Addr is the agent's API address, host:port.
	Addr string
	HTTP *http.Client
}

// NewClient returns a client for the agent at addr.
func NewClient(addr string) *Client {
	return &Client{Addr: addr, HTTP: &http.Client{Timeout: 5 * time.Second}}
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
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("agent API at %s: %w (is `detour agent` running there?)", c.Addr, err)
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
