package wanem

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/detour-overlay/detour/internal/lab/scenario"
)

// Request is one command on the control socket, a JSON object per line.
type Request struct {
	// Op is "truth", "set", "ping", or an operation added by the caller
	// of Serve (the testbed adds "traffic" and "timeline").
	Op   string `json:"op"`
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Both applies a "set" to both directions.
	Both  bool           `json:"both,omitempty"`
	Patch scenario.Patch `json:"patch,omitzero"`
	// Name and Action select a cross-traffic flow ("start", "stop").
	Name   string `json:"name,omitempty"`
	Action string `json:"action,omitempty"`
}

// Response is the answer to a Request.
type Response struct {
	OK     bool            `json:"ok"`
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Handler answers one request.
type Handler func(Request) (any, error)

// Handle answers the emulator's own operations: "ping", "truth", "set".
// It returns ErrUnknownOp for anything else.
func (e *Emulator) Handle(r Request) (any, error) {
	switch r.Op {
	case "ping":
		return map[string]float64{"uptime_s": e.Uptime().Seconds()}, nil
	case "truth":
		return e.Truth(), nil
	case "set":
		return e.handleSet(r)
	}
	return nil, ErrUnknownOp
}

// ErrUnknownOp is returned by a Handler for an operation it does not know.
var ErrUnknownOp = errors.New("unknown operation")

// SetResult is the answer to "set": the new properties of each link.
type SetResult struct {
	Links []LinkTruth `json:"links"`
}

func (e *Emulator) handleSet(r Request) (any, error) {
	a, b := e.sc.SiteIndex(r.From), e.sc.SiteIndex(r.To)
	if a < 0 {
		return nil, fmt.Errorf("unknown site %q", r.From)
	}
	if b < 0 {
		return nil, fmt.Errorf("unknown site %q", r.To)
	}
	if a == b {
		return nil, fmt.Errorf("no link from %s to itself", r.From)
	}
	if r.Patch.IsEmpty() {
		return nil, errors.New("nothing to change: give a delay, jitter, loss, rate or queue")
	}
	pairs := [][2]int{{a, b}}
	if r.Both {
		pairs = append(pairs, [2]int{b, a})
	}
	var res SetResult
	for _, p := range pairs {
		if _, err := e.SetLink(p[0], p[1], r.Patch); err != nil {
			return nil, err
		}
		res.Links = append(res.Links, e.linkTruth(p[0], p[1], e.links[p[0]][p[1]], e.clock()))
	}
	return res, nil
}

// Serve answers requests on ln until it is closed. Each connection may
// send several requests, one JSON object per line.
func Serve(ln net.Listener, h Handler) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serveConn(c, h)
	}
}

func serveConn(c net.Conn, h Handler) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var req Request
		var resp Response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else if res, err := h(req); err != nil {
			resp.Error = err.Error()
		} else if resp.Result, err = json.Marshal(res); err != nil {
			resp.Error = err.Error()
		} else {
			resp.OK = true
		}
		if enc.Encode(resp) != nil {
			return
		}
	}
}

// Call sends one request to the control socket at path and decodes the
// result into out (which may be nil).
func Call(path string, req Request, out any) error {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return fmt.Errorf("emulator control socket: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return err
	}
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return fmt.Errorf("emulator control socket: %w", err)
	}
	if !resp.OK {
		return errors.New(resp.Error)
	}
	if out != nil {
		return json.Unmarshal(resp.Result, out)
	}
	return nil
}
