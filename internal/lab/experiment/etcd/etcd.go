// Package etcd deploys a real etcd cluster (the Debian package etcd-server
// 3.4) with WAN timing (--heartbeat-interval=150 --election-timeout=1500),
// places its leader, and times puts and reads through its JSON gateway
// (/v3/kv/put, /v3/kv/range), which needs no client library.
//
// Like package zoo it knows nothing about the testbed: servers run through
// a store.Runner and connections go through a store.Dialer; package proc
// starts and stops them.
package etcd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/store"
	"github.com/detour-overlay/detour/internal/lab/proc"
)

// Ports of every member.
const (
	ClientPort = 2379
	PeerPort   = 2380
)

// Timing for WAN round trips up to about 140 ms (field notes).
const (
	HeartbeatMs = 150
	ElectionMs  = 1500
)

// Cluster is a set of etcd members.
type Cluster struct {
	Servers []store.Server
	Dir     string
	Run     store.Runner
	Dial    store.Dialer
	// Bin is the etcd binary; default "etcd".
	Bin string

	procs proc.Group
}

func peerURL(s store.Server) string {
	return "http://" + net.JoinHostPort(s.Addr, strconv.Itoa(PeerPort))
}
func clientURL(s store.Server) string {
	return "http://" + net.JoinHostPort(s.Addr, strconv.Itoa(ClientPort))
}

// Args returns member s's command line.
func (c *Cluster) Args(s store.Server) []string {
	var initial []string
	for _, o := range c.Servers {
		initial = append(initial, o.Name+"="+peerURL(o))
	}
	bin := c.Bin
	if bin == "" {
		bin = "etcd"
	}
	return []string{bin, "--name", s.Name, "--data-dir", filepath.Join(c.Dir, s.Name, "data"),
		"--listen-peer-urls", peerURL(s), "--initial-advertise-peer-urls", peerURL(s),
		"--listen-client-urls", clientURL(s), "--advertise-client-urls", clientURL(s),
		"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
		"--initial-cluster-token", "detour-experiment",
		"--heartbeat-interval", strconv.Itoa(HeartbeatMs), "--election-timeout", strconv.Itoa(ElectionMs),
		"--log-level", "warn"}
}

// Start starts every member; on error those started are stopped.
func (c *Cluster) Start() error {
	for _, s := range c.Servers {
		if err := c.startOne(s); err != nil {
			c.Stop()
			return fmt.Errorf("etcd: start %s: %w", s.Name, err)
		}
	}
	return nil
}

func (c *Cluster) startOne(s store.Server) error {
	dir := filepath.Join(c.Dir, s.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return c.procs.Start(s.Name, c.Args(s), c.Run, filepath.Join(dir, "etcd.log"))
}

// PIDs returns the members' process IDs.
func (c *Cluster) PIDs() []int { return c.procs.PIDs() }

// Stop ends every member by PID.
func (c *Cluster) Stop() { c.procs.Stop(3 * time.Second) }

func (c *Cluster) httpClient() *http.Client {
	dial := c.Dial
	if dial == nil {
		dial = net.DialTimeout
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dial(network, addr, 3*time.Second)
		},
		DisableKeepAlives: true,
	}}
}

// status is the part of /v3/maintenance/status the cluster uses. etcd's
// gateway writes 64-bit integers as strings.
type status struct {
	Header struct {
		MemberID string `json:"member_id"`
	} `json:"header"`
	Leader string `json:"leader"`
}

func post(hc *http.Client, url string, in, out any) error {
	b, _ := json.Marshal(in)
	resp, err := hc.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}

// statuses asks every member for its ID and the leader it follows.
func (c *Cluster) statuses() (map[string]status, error) {
	hc := c.httpClient()
	out := map[string]status{}
	for _, s := range c.Servers {
		var st status
		if err := post(hc, clientURL(s)+"/v3/maintenance/status", struct{}{}, &st); err != nil {
			return nil, err
		}
		out[s.Name] = st
	}
	return out, nil
}

// PlaceLeader waits until every member agrees on a leader and moves the
// leadership to member want (`etcdctl move-leader`, sent to the current
// leader), then waits until all agree on it.
func (c *Cluster) PlaceLeader(ctx context.Context, want string) error {
	moved := false
	for {
		st, err := c.statuses()
		if err == nil {
			leader, agreed := agreedLeader(st)
			switch {
			case agreed && leader == st[want].Header.MemberID:
				return nil
			case agreed && !moved:
				err = c.moveLeader(st, leader, st[want].Header.MemberID)
				moved = err == nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd: leader at %s: %w (last: %v)", want, ctx.Err(), err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func agreedLeader(st map[string]status) (string, bool) {
	leader := ""
	for _, s := range st {
		if s.Leader == "" || s.Leader == "0" || (leader != "" && s.Leader != leader) {
			return "", false
		}
		leader = s.Leader
	}
	return leader, leader != ""
}

func (c *Cluster) moveLeader(st map[string]status, leaderID, targetID string) error {
	for _, s := range c.Servers {
		if st[s.Name].Header.MemberID == leaderID {
			target, err := strconv.ParseUint(targetID, 10, 64)
			if err != nil {
				return err
			}
			return post(c.httpClient(), clientURL(s)+"/v3/maintenance/transfer-leadership",
				map[string]uint64{"targetID": target}, nil)
		}
	}
	return fmt.Errorf("etcd: leader %s is not a member", leaderID)
}

// Client times puts and serializable (local) reads of one key through one
// member, over one kept-alive HTTP connection.
type Client struct {
	hc           *http.Client
	url, server  string
	key, value64 string
}

// Connect opens a client of member s and writes the key once (untimed).
func Connect(ctx context.Context, s store.Server, dial store.Dialer, key string, size int) (*Client, error) {
	if dial == nil {
		dial = net.DialTimeout
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dial(network, addr, 3*time.Second)
		},
		MaxIdleConnsPerHost: 1,
	}
	v := make([]byte, size)
	_, _ = rand.Read(v)
	c := &Client{hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}, url: clientURL(s), server: s.Name,
		key: base64.StdEncoding.EncodeToString([]byte(key)), value64: base64.StdEncoding.EncodeToString(v)}
	if s := c.Do(store.Write); s.Err != "" {
		return nil, fmt.Errorf("etcd: first put via %s: %s", c.server, s.Err)
	}
	return c, nil
}

// Do runs one timed operation: a put, or a serializable range read.
func (c *Client) Do(op store.Op) store.Sample {
	s := store.Sample{Server: c.server, Op: op, Start: time.Now()}
	var err error
	switch op {
	case store.Write:
		err = post(c.hc, c.url+"/v3/kv/put", map[string]string{"key": c.key, "value": c.value64}, nil)
	case store.Read:
		var out struct {
			Kvs []struct {
				Value string `json:"value"`
			} `json:"kvs"`
		}
		err = post(c.hc, c.url+"/v3/kv/range", map[string]any{"key": c.key, "serializable": true}, &out)
		if err == nil && (len(out.Kvs) != 1 || out.Kvs[0].Value != c.value64) {
			err = fmt.Errorf("read %d values, want the one written", len(out.Kvs))
		}
	default:
		err = fmt.Errorf("unknown operation %q", op)
	}
	s.Latency = time.Since(s.Start)
	if err != nil {
		s.Err = err.Error()
	}
	return s
}

// Close drops the client's connection.
func (c *Client) Close() { c.hc.CloseIdleConnections() }
