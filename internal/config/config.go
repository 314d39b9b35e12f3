// Package config defines the typed configuration of a detour site agent
// (the file given to `detour agent --config`), its defaults, and Validate,
// which names the offending field and its line in the YAML file.
//
// A minimal file:
//
//	site: fujisawa
//	listen: 203.0.113.10:4800
//	peers:
//	  - name: inagi
//	    address: 198.51.100.7:4800
//
// Every other field has a default (see Defaults). Peers are bootstrap
// members: contacting any one of them is enough to learn the whole overlay.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/detour-overlay/detour/internal/yamlpath"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/detour-overlay/detour/internal/keys"
)

// Defaults used for fields the file leaves out.
const (
	DefaultAPI           = "127.0.0.1:7447"
	DefaultProbeInterval = 100 * time.Millisecond
	// DefaultMaxProbeRate is the default cap on probes per second.
	DefaultMaxProbeRate = 200
	DefaultMaxHops      = 3
	DefaultNetworkName  = "default"
	DefaultNetworkID    = 1
	DefaultTAP          = "detour0"
	DefaultMTU          = 1400
	// MinQueueLen and MaxQueueLen bound a network's queue_len.
	MinQueueLen = 16
	MaxQueueLen = 65536
	maxPath     = 8 // wire.MaxPath; kept here to avoid an import cycle in tools
)

// Agent is the configuration of one site's agent.
type Agent struct {
	// Site is this site's name, unique in the overlay.
	Site string `yaml:"site"`
	// Listen is the UDP address ("IP:port") the agent binds on the underlay.
	Listen string `yaml:"listen"`
	// Advertise is the address other sites use to reach this one, when it
	// differs from Listen (NAT, or Listen on 0.0.0.0).
	Advertise string `yaml:"advertise,omitempty"`
	// PrivateKey is this site's static private key (base64, from
	// `detour genkey`). When set, every packet is encrypted and
	// authenticated, and only the peers listed with a public key are
	// accepted; when empty, the overlay runs in the clear.
	PrivateKey string `yaml:"private_key,omitempty"`
	// Peers are the other sites this one knows: bootstrap members (those
	// with an address; one reachable member is enough) and, with
	// encryption, the accepted set (every site, with its public key).
	Peers []Peer `yaml:"peers,omitempty"`
	// Networks are the virtual L2 networks this site joins.
	Networks []Network `yaml:"networks,omitempty"`
	// API is the TCP address of the read-only views of the local API (the
	// JSON GETs and the Prometheus metrics). Anywhere but loopback it needs
	// APITokenFile.
	API string `yaml:"api,omitempty"`
	// APISocket is the unix socket through which the overlay is changed
	// (pins, forbidden relays, networks, rates), open to root and to the
	// members of group detour. Empty: /run/detour/detour.sock, or, in a
	// named network namespace NS, /run/detour/netns/NS.sock (see
	// api.LocalSocket).
	APISocket string `yaml:"api_socket,omitempty"`
	// APITokenFile is a file (readable by root only) holding the bearer
	// token that requests to the API's TCP address must carry. It is
	// required when API is not a loopback address.
	APITokenFile string `yaml:"api_token_file,omitempty"`
	// ProbeInterval is the period of measurement probes on every pair.
	ProbeInterval time.Duration `yaml:"probe_interval,omitempty"`
	// MaxProbeRate caps the probes per second this site sends to all
	// peers together; with more peers than it allows at ProbeInterval the
	// interval (and failure detection) grows in proportion.
	MaxProbeRate int `yaml:"max_probe_rate,omitempty"`
	// MaxHops is the largest number of underlay hops on a path (H).
	MaxHops int `yaml:"max_hops,omitempty"`
	// EgressRate is the site's total egress capacity shared by its
	// networks' traffic (the access link); zero for no limit. Networks'
	// guaranteed rates (min_rate) are honoured within it.
	EgressRate Rate `yaml:"egress_rate,omitempty"`
	// UnderlayMTU is the MTU of the underlay when it cannot be read from
	// the interface of the listen address (a wildcard listen address);
	// zero means 1500.
	UnderlayMTU int `yaml:"underlay_mtu,omitempty"`
	// TestClockOffset shifts this agent's clock; it exists only so tests can
	// show that routing needs no synchronised clocks.
	TestClockOffset time.Duration `yaml:"test_clock_offset,omitempty"`
}

// Peer is another site: a bootstrap member when it has an address, an
// accepted site when it has a public key.
type Peer struct {
	Name      string `yaml:"name"`
	Address   string `yaml:"address,omitempty"`
	PublicKey string `yaml:"public_key,omitempty"`
}

// Network is a virtual L2 network and the TAP device that carries it.
type Network struct {
	Name string `yaml:"name"`
	// ID is the network's identifier on the wire, the same on every site.
	ID uint32 `yaml:"id"`
	// TAP is the name of this site's TAP device for the network.
	TAP string `yaml:"tap,omitempty"`
	// Bridge, when set, is a Linux bridge the TAP device is attached to.
	Bridge string `yaml:"bridge,omitempty"`
	// MTU of the TAP device: the hosts' MTU. It may exceed what the
	// underlay carries: TCP segments are clamped to fit, and larger
	// packets are fragmented on the underlay.
	MTU int `yaml:"mtu,omitempty"`
	// QueueLen is how many frames the TAP device holds while the agent
	// waits for a CPU (its txqueuelen); zero keeps the kernel's default.
	// A longer queue rides out longer waits, as on a gateway that shares
	// its cores with busy workloads, at the price of standing delay when
	// the agent cannot keep up: frames beyond what it carries then wait
	// QueueLen frame times.
	QueueLen int `yaml:"queue_len,omitempty"`
	// MaxRate caps this network's egress from this site; zero for none.
	MaxRate Rate `yaml:"max_rate,omitempty"`
	// MinRate is the egress this network is guaranteed when networks
	// compete for the site's egress_rate.
	MinRate Rate `yaml:"min_rate,omitempty"`
}

// ErrInvalid is matched (errors.Is) by every validation error.
var ErrInvalid = errors.New("invalid configuration")

// FieldError names the field at fault and, when known, its line.
type FieldError struct {
	Field string
	Line  int
	Msg   string
}

func (e *FieldError) Error() string {
	switch {
	case e.Field == "":
		return e.Msg // a YAML error, which names its own line
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Load reads, decodes, completes with defaults and validates a file.
func Load(path string) (*Agent, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	a, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// Parse decodes a YAML document strictly (unknown keys are errors), applies
// defaults and validates. Errors carry the YAML line of the field.
func Parse(b []byte) (*Agent, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, &FieldError{Msg: yamlMessage(err)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var a Agent
	if err := dec.Decode(&a); err != nil {
		return nil, &FieldError{Msg: yamlMessage(err)}
	}
	a.ApplyDefaults()
	if err := a.Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.Line = yamlpath.Line(&root, fe.Field)
		}
		return nil, err
	}
	return &a, nil
}

// Marshal encodes the configuration as YAML.
func (a *Agent) Marshal() ([]byte, error) { return yaml.Marshal(a) }

// ApplyDefaults fills the fields the file left out.
func (a *Agent) ApplyDefaults() {
	if a.API == "" {
		a.API = DefaultAPI
	}
	if a.ProbeInterval == 0 {
		a.ProbeInterval = DefaultProbeInterval
	}
	if a.MaxProbeRate == 0 {
		a.MaxProbeRate = DefaultMaxProbeRate
	}
	if a.MaxHops == 0 {
		a.MaxHops = DefaultMaxHops
	}
	if len(a.Networks) == 0 {
		a.Networks = []Network{{Name: DefaultNetworkName, ID: DefaultNetworkID}}
	}
	for i := range a.Networks {
		n := &a.Networks[i]
		if n.TAP == "" && len(a.Networks) == 1 {
			n.TAP = DefaultTAP
		}
		if n.MTU == 0 {
			n.MTU = DefaultMTU
		}
	}
}

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	ifnameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`)
)

// Validate checks the whole configuration and returns the first problem
// as a *FieldError.
func (a *Agent) Validate() error {
	if a.Site == "" {
		return &FieldError{Field: "site", Msg: "missing: every agent needs its site name"}
	}
	if !nameRE.MatchString(a.Site) {
		return &FieldError{Field: "site", Msg: fmt.Sprintf("%q is not a valid site name (letters, digits, '.', '_', '-'; at most 63)", a.Site)}
	}
	if err := validateListen(a); err != nil {
		return err
	}
	if err := validatePeers(a); err != nil {
		return err
	}
	if err := validateKeys(a); err != nil {
		return err
	}
	if err := validateNetworks(a.Networks); err != nil {
		return err
	}
	if err := validateAPI(a); err != nil {
		return err
	}
	if a.ProbeInterval < 10*time.Millisecond || a.ProbeInterval > 5*time.Second {
		return &FieldError{Field: "probe_interval", Msg: fmt.Sprintf("%v is outside 10ms..5s", a.ProbeInterval)}
	}
	if a.MaxProbeRate < 0 || time.Duration(a.MaxProbeRate)*a.ProbeInterval < time.Second {
		return &FieldError{Field: "max_probe_rate", Msg: fmt.Sprintf("%d/s does not allow even one peer every probe_interval (%v)", a.MaxProbeRate, a.ProbeInterval)}
	}
	if a.UnderlayMTU != 0 && (a.UnderlayMTU < 576 || a.UnderlayMTU > 65535) {
		return &FieldError{Field: "underlay_mtu", Msg: fmt.Sprintf("%d is outside 576..65535", a.UnderlayMTU)}
	}
	if err := validateRates(a); err != nil {
		return err
	}
	if a.MaxHops < 1 || a.MaxHops > maxPath {
		return &FieldError{Field: "max_hops", Msg: fmt.Sprintf("%d is outside 1..%d", a.MaxHops, maxPath)}
	}
	return nil
}

// maxSocketPath is the longest path a unix socket address holds.
const maxSocketPath = 107

// validateAPI checks the API's TCP address, socket and token: a TCP
// address other than loopback is reachable from other machines, so it
// needs a token.
func validateAPI(a *Agent) error {
	ap, err := netip.ParseAddrPort(a.API)
	if err != nil {
		return &FieldError{Field: "api", Msg: fmt.Sprintf("%q is not an IP:port address", a.API)}
	}
	if !ap.Addr().IsLoopback() && a.APITokenFile == "" {
		return &FieldError{Field: "api", Msg: fmt.Sprintf("%s is not a loopback address, so the API needs a token: set api_token_file (a file readable by root) or listen on 127.0.0.1", a.API)}
	}
	if a.APITokenFile != "" && !strings.HasPrefix(a.APITokenFile, "/") {
		return &FieldError{Field: "api_token_file", Msg: fmt.Sprintf("%q is not an absolute path", a.APITokenFile)}
	}
	if a.APISocket != "" && (!strings.HasPrefix(a.APISocket, "/") || len(a.APISocket) > maxSocketPath) {
		return &FieldError{Field: "api_socket", Msg: fmt.Sprintf("%q is not an absolute path of at most %d bytes", a.APISocket, maxSocketPath)}
	}
	return nil
}

func validateListen(a *Agent) error {
	if a.Listen == "" {
		return &FieldError{Field: "listen", Msg: "missing: the UDP address (IP:port) to bind on the underlay"}
	}
	lp, err := netip.ParseAddrPort(a.Listen)
	if err != nil || lp.Port() == 0 {
		return &FieldError{Field: "listen", Msg: fmt.Sprintf("%q is not an IP:port address with a non-zero port", a.Listen)}
	}
	if a.Advertise != "" {
		ap, err := netip.ParseAddrPort(a.Advertise)
		if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() {
			return &FieldError{Field: "advertise", Msg: fmt.Sprintf("%q is not a reachable IP:port address", a.Advertise)}
		}
	} else if lp.Addr().IsUnspecified() {
		return &FieldError{Field: "advertise", Msg: "missing: listen is a wildcard address, so peers need an advertised IP:port"}
	}
	return nil
}

func validatePeers(a *Agent) error {
	seen := map[string]bool{a.Site: true}
	for i, p := range a.Peers {
		field := fmt.Sprintf("peers[%d]", i)
		if p.Name == "" {
			return &FieldError{Field: field + ".name", Msg: "missing"}
		}
		if !nameRE.MatchString(p.Name) {
			return &FieldError{Field: field + ".name", Msg: fmt.Sprintf("%q is not a valid site name", p.Name)}
		}
		if seen[p.Name] {
			what := "duplicate site name"
			if p.Name == a.Site {
				what = "is this site's own name"
			}
			return &FieldError{Field: field + ".name", Msg: fmt.Sprintf("%q %s", p.Name, what)}
		}
		seen[p.Name] = true
		if p.Address == "" {
			if p.PublicKey == "" {
				return &FieldError{Field: field + ".address", Msg: "missing: a peer needs an address (to join through it) or a public_key (to accept it)"}
			}
			continue
		}
		ap, err := netip.ParseAddrPort(p.Address)
		if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() {
			return &FieldError{Field: field + ".address", Msg: fmt.Sprintf("%q is not an IP:port address", p.Address)}
		}
	}
	return nil
}

// validateRates checks that guarantees fit under ceilings and the site's
// egress capacity.
func validateRates(a *Agent) error {
	var sum Rate
	for i, n := range a.Networks {
		if n.MaxRate > 0 && n.MinRate > n.MaxRate {
			return &FieldError{Field: fmt.Sprintf("networks[%d].min_rate", i), Msg: fmt.Sprintf("%v exceeds max_rate %v", n.MinRate, n.MaxRate)}
		}
		sum += n.MinRate
	}
	if sum > 0 && a.EgressRate == 0 {
		return &FieldError{Field: "egress_rate", Msg: "missing: networks have a min_rate, which is guaranteed within the site's egress_rate"}
	}
	if a.EgressRate > 0 && sum > a.EgressRate {
		return &FieldError{Field: "egress_rate", Msg: fmt.Sprintf("%v is less than the networks' guaranteed rates (%v in all)", a.EgressRate, sum)}
	}
	return nil
}

// validateKeys checks that the keys parse and that encryption is either
// configured for every peer or for none.
func validateKeys(a *Agent) error {
	var own keys.PublicKey
	if a.PrivateKey != "" {
		priv, err := keys.ParsePrivate(a.PrivateKey)
		if err != nil {
			return &FieldError{Field: "private_key", Msg: err.Error()}
		}
		own = priv.Public()
	}
	for i, p := range a.Peers {
		field := fmt.Sprintf("peers[%d].public_key", i)
		switch {
		case p.PublicKey == "" && a.PrivateKey != "":
			return &FieldError{Field: field, Msg: fmt.Sprintf("missing: with a private_key, every peer needs its public key (site %q)", p.Name)}
		case p.PublicKey != "" && a.PrivateKey == "":
			return &FieldError{Field: "private_key", Msg: "missing: peers have public keys, so this site needs its private key (detour genkey)"}
		case p.PublicKey != "":
			pub, err := keys.ParsePublic(p.PublicKey)
			if err != nil {
				return &FieldError{Field: field, Msg: err.Error()}
			}
			if pub == own {
				return &FieldError{Field: field, Msg: fmt.Sprintf("is this site's own public key, not site %q's", p.Name)}
			}
		}
	}
	return nil
}

// Encrypted reports whether the overlay runs encrypted.
func (a *Agent) Encrypted() bool { return a.PrivateKey != "" }

func validateNetworks(ns []Network) error {
	ids := map[uint32]bool{}
	names := map[string]bool{}
	taps := map[string]bool{}
	for i, n := range ns {
		field := fmt.Sprintf("networks[%d]", i)
		switch {
		case !nameRE.MatchString(n.Name):
			return &FieldError{Field: field + ".name", Msg: fmt.Sprintf("%q is not a valid network name", n.Name)}
		case names[n.Name]:
			return &FieldError{Field: field + ".name", Msg: fmt.Sprintf("duplicate network %q", n.Name)}
		case n.ID == 0:
			return &FieldError{Field: field + ".id", Msg: "missing or zero: every network needs a non-zero identifier"}
		case ids[n.ID]:
			return &FieldError{Field: field + ".id", Msg: fmt.Sprintf("duplicate network id %d", n.ID)}
		case n.TAP == "":
			return &FieldError{Field: field + ".tap", Msg: "missing: the TAP device name"}
		case !ifnameRE.MatchString(n.TAP):
			return &FieldError{Field: field + ".tap", Msg: fmt.Sprintf("%q is not a valid interface name (at most 15 characters)", n.TAP)}
		case taps[n.TAP]:
			return &FieldError{Field: field + ".tap", Msg: fmt.Sprintf("duplicate TAP device %q", n.TAP)}
		case n.Bridge != "" && !ifnameRE.MatchString(n.Bridge):
			return &FieldError{Field: field + ".bridge", Msg: fmt.Sprintf("%q is not a valid interface name", n.Bridge)}
		case n.MTU < 576 || n.MTU > 65000:
			return &FieldError{Field: field + ".mtu", Msg: fmt.Sprintf("%d is outside 576..65000", n.MTU)}
		case n.QueueLen != 0 && (n.QueueLen < MinQueueLen || n.QueueLen > MaxQueueLen):
			return &FieldError{Field: field + ".queue_len", Msg: fmt.Sprintf("%d frames is outside %d..%d (0 keeps the kernel's default)", n.QueueLen, MinQueueLen, MaxQueueLen)}
		}
		names[n.Name], ids[n.ID], taps[n.TAP] = true, true, true
	}
	return nil
}

// unknownField matches the YAML decoder's report of an unknown key.
var unknownField = regexp.MustCompile(`^line (\d+): field (\S+) not found in type \S+$`)

// yamlMessage turns a YAML error, which may span several lines, into one
// line: "line 4: unknown field "adress"; line 9: ...".
func yamlMessage(err error) string {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "yaml: "))
		if l == "" || l == "unmarshal errors:" {
			continue
		}
		if m := unknownField.FindStringSubmatch(l); m != nil {
			l = fmt.Sprintf("line %s: unknown field %q", m[1], m[2])
		}
		parts = append(parts, l)
	}
	return strings.Join(parts, "; ")
}
