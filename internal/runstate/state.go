// Package runstate is the document that keeps what an operator changes at
// run time through the agent's API (networks attached and detached, rate
// limits, the egress rate, pins and forbidden relays, key-value pools), so
// that a restart or a crash loses none of it. It is pure: encoding, decoding, checking,
// the changes, and the merge with the configuration file. The file layer
// (an atomic, durable write) is in file.go.
//
// The document holds differences from the configuration file, not a copy
// of it: the operator's YAML stays the operator's, and a field the
// document does not name follows the file. When both name the same thing
// the more recent act wins: the document is newer than the file read at
// start, and a reload that changes a network in the file makes the file
// newer for that network (Rebase).
//
// The JSON document:
//
//	{
//	  "version": 1,
//	  "site": "fujisawa",
//	  "attached": [ {"name": "blue", "id": 7, "tap": "dt-blue", ...} ],
//	  "detached": [ "default" ],
//	  "limits": { "blue": {"max_rate": "20mbit", "min_rate": "5mbit"} },
//	  "egress_rate": "100mbit",
//	  "pins": { "inagi": ["kobe", "inagi"] },
//	  "forbidden": [ "kobe" ],
//	  "revocations": [ "1w...(a revocation, base64 as detour ca revoke writes it)" ],
//	  "kv_pools": [ {"name": "cache", "network_id": 1, "address": "198.19.255.250:11211",
//	                 "hash": "ketama", "version": 3, "origin": 2882343476,
//	                 "servers": [ {"address": "198.19.1.1:11211", "weight": 1, "site": "BOR"} ]} ],
//	  "kv_file": { "cache": "5f1c09a2e0b3d4c7" }
//	}
//
// Unlike the rest, kv_pools are not differences from the file but the
// pools in force, whole, with the version each had on the overlay (see
// kv.go): pools are distributed between sites, so what a site holds may
// come from another site's change.
package runstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/config"
)

// Version is the document's format version.
const Version = 1

// maxDoc bounds a document's size; a larger file is refused as damaged.
const maxDoc = 4 << 20

// Doc is the run-time state of one site.
type Doc struct {
	Version int    `json:"version"`
	Site    string `json:"site"`
	// Attached are networks attached at run time, whole; one with the
	// name of a network of the file replaces it.
	Attached []Network `json:"attached,omitempty"`
	// Detached are networks of the file detached at run time, by name.
	Detached []string `json:"detached,omitempty"`
	// Limits are rate limits set at run time, by network name.
	Limits map[string]Limits `json:"limits,omitempty"`
	// Egress is the site's egress rate set at run time; nil follows the
	// file.
	Egress *config.Rate `json:"egress_rate,omitempty"`
	// Pins are the operator's pinned paths by destination, each path
	// ending at the destination.
	Pins map[string][]string `json:"pins,omitempty"`
	// Forbidden are the sites forbidden as relays.
	Forbidden []string `json:"forbidden,omitempty"`
	// Revocations are the overlay CA's revocations this site applied,
	// given by the operator or flooded by a member, in package ca's
	// encoding (base64), so that a restarted site refuses the revoked
	// sites from its start.
	Revocations []string `json:"revocations,omitempty"`
	// KVPools are the key-value pools in force, as distributed (kv.go).
	KVPools []KVPool `json:"kv_pools,omitempty"`
	// KVFile are the fingerprints of the configuration file's pools when
	// they were last applied, by name, to tell an edited file (kv.go).
	KVFile map[string]string `json:"kv_file,omitempty"`
}

// Network is a network attached at run time (config.Network with JSON
// names).
type Network struct {
	Name     string      `json:"name"`
	ID       uint32      `json:"id"`
	TAP      string      `json:"tap,omitempty"`
	Bridge   string      `json:"bridge,omitempty"`
	MTU      int         `json:"mtu,omitempty"`
	QueueLen int         `json:"queue_len,omitempty"`
	MaxRate  config.Rate `json:"max_rate,omitempty"`
	MinRate  config.Rate `json:"min_rate,omitempty"`
	Subnet   string      `json:"subnet,omitempty"`
	// FloodRate is the network's flood_rate (frames/s, 0: the default).
	FloodRate int `json:"flood_rate,omitempty"`
}

// Limits are a network's rate limits (zero: none).
type Limits struct {
	MaxRate config.Rate `json:"max_rate"`
	MinRate config.Rate `json:"min_rate"`
}

// FromConfig converts a configured network.
func FromConfig(n config.Network) Network {
	return Network{Name: n.Name, ID: n.ID, TAP: n.TAP, Bridge: n.Bridge, MTU: n.MTU, QueueLen: n.QueueLen,
		MaxRate: n.MaxRate, MinRate: n.MinRate, Subnet: n.Subnet, FloodRate: n.FloodRate}
}

// Config converts back.
func (n Network) Config() config.Network {
	return config.Network{Name: n.Name, ID: n.ID, TAP: n.TAP, Bridge: n.Bridge, MTU: n.MTU, QueueLen: n.QueueLen,
		MaxRate: n.MaxRate, MinRate: n.MinRate, Subnet: n.Subnet, FloodRate: n.FloodRate}
}

// New returns the empty document of a site.
func New(site string) *Doc { return &Doc{Version: Version, Site: site} }

// Decode reads a document strictly (unknown fields are errors) and checks
// it.
func Decode(b []byte) (*Doc, error) {
	if len(b) > maxDoc {
		return nil, fmt.Errorf("runstate: %d bytes, more than %d", len(b), maxDoc)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d Doc
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("runstate: %w", err)
	}
	if dec.More() {
		return nil, errors.New("runstate: data after the document")
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Encode writes the document in a canonical form: lists sorted, indented,
// ending with a newline.
func (d *Doc) Encode() []byte {
	c := d.normal()
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		panic(err) // every field is plainly encodable
	}
	return append(b, '\n')
}

// normal returns a copy with its lists sorted and empty maps dropped.
func (d *Doc) normal() *Doc {
	c := d.Clone()
	sort.Slice(c.Attached, func(i, j int) bool { return c.Attached[i].Name < c.Attached[j].Name })
	sort.Strings(c.Detached)
	sort.Strings(c.Forbidden)
	if len(c.Limits) == 0 {
		c.Limits = nil
	}
	if len(c.Pins) == 0 {
		c.Pins = nil
	}
	sort.Slice(c.KVPools, func(i, j int) bool { return c.KVPools[i].Name < c.KVPools[j].Name })
	if len(c.KVFile) == 0 {
		c.KVFile = nil
	}
	return c
}

// Clone returns a deep copy.
func (d *Doc) Clone() *Doc {
	c := *d
	c.Attached = slices.Clone(d.Attached)
	c.Detached = slices.Clone(d.Detached)
	c.Forbidden = slices.Clone(d.Forbidden)
	c.Revocations = slices.Clone(d.Revocations)
	c.Limits = maps.Clone(d.Limits)
	c.Pins = make(map[string][]string, len(d.Pins))
	for k, v := range d.Pins {
		c.Pins[k] = slices.Clone(v)
	}
	if d.Egress != nil {
		e := *d.Egress
		c.Egress = &e
	}
	c.KVPools = make([]KVPool, len(d.KVPools))
	for i, p := range d.KVPools {
		c.KVPools[i] = p.clone()
	}
	if len(c.KVPools) == 0 {
		c.KVPools = nil
	}
	c.KVFile = maps.Clone(d.KVFile)
	return &c
}

// Validate checks what a document can say on its own: its version, names
// present and unique, rates consistent. Whether its networks fit the
// configuration is Merge's question.
func (d *Doc) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("runstate: "+format, args...)) }
	if d.Version != Version {
		bad("version %d, want %d", d.Version, Version)
	}
	names := map[string]bool{}
	ids := map[uint32]bool{}
	for _, n := range d.Attached {
		switch {
		case n.Name == "":
			bad("an attached network has no name")
		case names[n.Name]:
			bad("network %q attached twice", n.Name)
		case n.ID == 0:
			bad("network %q has id 0", n.Name)
		case ids[n.ID]:
			bad("network id %d attached twice", n.ID)
		case n.MaxRate > 0 && n.MinRate > n.MaxRate:
			bad("network %q: min_rate exceeds max_rate", n.Name)
		}
		names[n.Name], ids[n.ID] = true, true
	}
	for _, name := range d.Detached {
		if name == "" || names[name] {
			bad("detached network %q is empty or also attached", name)
		}
	}
	for name, l := range d.Limits {
		if name == "" || l.MaxRate < 0 || l.MinRate < 0 || (l.MaxRate > 0 && l.MinRate > l.MaxRate) {
			bad("limits of network %q: min_rate %v, max_rate %v", name, l.MinRate, l.MaxRate)
		}
	}
	if d.Egress != nil && *d.Egress < 0 {
		bad("egress_rate is negative")
	}
	for dest, p := range d.Pins {
		if dest == "" || len(p) == 0 || p[len(p)-1] != dest || slices.Contains(p, "") {
			bad("pin to %q: the path %v must end at the destination", dest, p)
		}
	}
	for _, s := range d.Forbidden {
		if s == "" {
			bad("an empty site is forbidden")
		}
	}
	for i, r := range d.Revocations {
		if b, err := ca.Decode(r); err != nil {
			bad("revocations[%d]: %v", i, err)
		} else if _, err := ca.ParseRevocation(b); err != nil {
			bad("revocations[%d]: %v", i, err)
		}
	}
	for _, err := range d.validateKV() {
		bad("%v", err)
	}
	return errors.Join(errs...)
}

// Attach records a network attached at run time (base is the file).
func (d *Doc) Attach(n config.Network, base *config.Agent) {
	d.drop(n.Name)
	if have, ok := fileNetwork(base, n.Name); ok && have == n {
		return // the file's own network, attached again as the file has it
	}
	d.Attached = append(d.Attached, FromConfig(n))
}

// Detach records a network detached at run time.
func (d *Doc) Detach(name string, base *config.Agent) {
	d.drop(name)
	if _, ok := fileNetwork(base, name); ok {
		d.Detached = append(d.Detached, name)
	}
}

// drop forgets everything the document says about a network.
func (d *Doc) drop(name string) {
	d.Attached = slices.DeleteFunc(d.Attached, func(n Network) bool { return n.Name == name })
	d.Detached = slices.DeleteFunc(d.Detached, func(s string) bool { return s == name })
	delete(d.Limits, name)
}

// SetLimits records a network's rate limits.
func (d *Doc) SetLimits(name string, l Limits) {
	for i := range d.Attached {
		if d.Attached[i].Name == name {
			d.Attached[i].MaxRate, d.Attached[i].MinRate = l.MaxRate, l.MinRate
			return
		}
	}
	if d.Limits == nil {
		d.Limits = map[string]Limits{}
	}
	d.Limits[name] = l
}

// SetEgress records the site's egress rate.
func (d *Doc) SetEgress(r config.Rate) { d.Egress = &r }

// Pin records a pinned path (ending at dest).
func (d *Doc) Pin(dest string, path []string) {
	if d.Pins == nil {
		d.Pins = map[string][]string{}
	}
	d.Pins[dest] = slices.Clone(path)
}

// Unpin forgets the pin to dest.
func (d *Doc) Unpin(dest string) { delete(d.Pins, dest) }

// Forbid records a site forbidden as a relay.
func (d *Doc) Forbid(site string) {
	if !slices.Contains(d.Forbidden, site) {
		d.Forbidden = append(d.Forbidden, site)
	}
}

// Revoked records a revocation (package ca's encoding) applied at run
// time, once.
func (d *Doc) Revoked(rev []byte) {
	if s := strings.TrimSpace(ca.Encode(rev)); !slices.Contains(d.Revocations, s) {
		d.Revocations = append(d.Revocations, s)
	}
}

// Allow forgets a forbidden relay.
func (d *Doc) Allow(site string) {
	d.Forbidden = slices.DeleteFunc(d.Forbidden, func(s string) bool { return s == site })
}

func fileNetwork(base *config.Agent, name string) (config.Network, bool) {
	if base == nil {
		return config.Network{}, false
	}
	for _, n := range base.Networks {
		if n.Name == name {
			return n, true
		}
	}
	return config.Network{}, false
}
