// Package testbed brings up and tears down detour's multi-site WAN testbed
// on one Linux machine: per site a gateway network namespace (the only one
// with an underlay address, on a TUN device whose other end is the
// user-space WAN emulator of package wanem) and host namespaces (the
// "VMs") bridged to the gateway; an overlay of the user's choice (none,
// kernel VXLAN, tinc or detour) joins the sites at layer 2.
//
// Everything the testbed creates is recorded in a state directory
// (default /run/detour/testbed): the namespaces and the processes, each
// with its start time so that a recycled PID is never killed. Down, and Up
// after a crash, remove all of it.
package testbed

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/lab/proc"
)

// DefaultStateDir is where the testbed keeps its state unless told.
const DefaultStateDir = "/run/detour/testbed"

// DefaultPrefix starts the name of every namespace the testbed creates.
const DefaultPrefix = "dt-"

// State is what a running testbed consists of.
type State struct {
	Scenario string `json:"scenario"`
	Overlay  string `json:"overlay"`
	// Underlay is UnderlayEmulator or UnderlayKernel; empty in states
	// written before kernel underlays existed, which means the emulator.
	Underlay    string      `json:"underlay,omitempty"`
	Prefix      string      `json:"prefix"`
	UnderlayMTU int         `json:"underlay_mtu"`
	HostMTU     int         `json:"host_mtu"`
	Sites       []SiteState `json:"sites"`
	Procs       []Proc      `json:"procs"`
	// DetourBin is the detour binary the agents run, for RestartAgent.
	DetourBin string    `json:"detour_bin,omitempty"`
	Created   time.Time `json:"created"`
	// Ready is set once Up has finished.
	Ready bool `json:"ready"`
	// UnderlayIPv6 is set when the agents run over IPv6 (ipv6.go).
	UnderlayIPv6 bool `json:"underlay_ipv6,omitempty"`
	// Migrations counts host migrations, to name their new ports.
	Migrations int `json:"migrations,omitempty"`
	// Held are the sites whose agents Up did not start (Options.Hold).
	Held []string `json:"held,omitempty"`
	// KVPools are the scenario's memcached pools (kv.go).
	KVPools []KVPoolState `json:"kv_pools,omitempty"`
	// Disks are the disk tiers of kv servers (kv.go, package tiers).
	Disks []DiskState `json:"disks,omitempty"`
}

// SiteState names one site's namespaces and addresses.
type SiteState struct {
	Name     string      `json:"name"`
	Gateway  string      `json:"gateway"`
	Underlay string      `json:"underlay"`
	Hosts    []HostState `json:"hosts"`
}

// HostState is one host namespace and its overlay address.
type HostState struct {
	NS   string `json:"ns"`
	Addr string `json:"addr"`
	// Port is the host's veth in its gateway, when not the default hK
	// (a host that migrated).
	Port string `json:"port,omitempty"`
}

// Namespaces lists every namespace of the testbed.
func (s *State) Namespaces() []string {
	var ns []string
	if !s.UsesEmulator() {
		ns = append(ns, UnderlayNS(s.Prefix))
	}
	for _, site := range s.Sites {
		ns = append(ns, site.Gateway)
		for _, h := range site.Hosts {
			ns = append(ns, h.NS)
		}
	}
	return ns
}

// UsesEmulator reports whether the WAN emulator carries the underlay.
func (s *State) UsesEmulator() bool { return s.Underlay != UnderlayKernel }

// Site returns the named site (case-insensitive) or nil.
func (s *State) Site(name string) *SiteState {
	for i := range s.Sites {
		if strings.EqualFold(s.Sites[i].Name, name) {
			return &s.Sites[i]
		}
	}
	return nil
}

// Proc is a background process the testbed started, recorded by PID and
// start time.
type Proc = proc.Record

// Paths of files in the state directory.
func statePath(dir string) string     { return filepath.Join(dir, "state.json") }
func socketPath(dir string) string    { return filepath.Join(dir, "wanem.sock") }
func logPath(dir, name string) string { return filepath.Join(dir, name+".log") }
func trafficPath(dir string) string   { return filepath.Join(dir, "traffic.json") }

// ErrNoTestbed means there is no testbed state in the directory.
var ErrNoTestbed = errors.New("no testbed is up")

// LoadState reads the state of the testbed in dir.
func LoadState(dir string) (*State, error) {
	b, err := os.ReadFile(statePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (no %s)", ErrNoTestbed, statePath(dir))
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", statePath(dir), err)
	}
	return &s, nil
}

// Save writes the state atomically.
func (s *State) Save(dir string) error {
	return writeJSON(statePath(dir), s)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
