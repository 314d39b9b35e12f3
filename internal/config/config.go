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
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/yamlpath"
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
	// DefaultFloodRate is a network's flood_rate when the file gives none
	// (datapath.DefaultFloodRate); MaxFloodRate bounds it.
	DefaultFloodRate = 2000
	MaxFloodRate     = 1000000
	maxPath          = 8 // wire.MaxPath; kept here to avoid an import cycle in tools
)

// The measurement schemes (Agent.Measurement).
const (
	MeasurementFull    = "full"
	MeasurementEconomy = "economy"
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
	// PrivateKeyFile is a file holding the private key instead (written by
	// `detour genkey > FILE`, readable by root only), so the configuration
	// can be shared without the secret. Load reads it into PrivateKey.
	PrivateKeyFile string `yaml:"private_key_file,omitempty"`
	// keyRead is set when PrivateKey was read from PrivateKeyFile, so
	// that a configuration Load returned validates again.
	keyRead bool
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
	// Measurement is the measurement scheme: MeasurementFull (the
	// default: every pair probed at the full rate, whole link-state rows)
	// or MeasurementEconomy (links that carry or could carry a best path
	// probed at the full rate and the others less often, link-state
	// changes only, delays averaged over 10 s; docs/scaling.md). Every
	// site of an overlay must use the same scheme.
	Measurement string `yaml:"measurement,omitempty"`
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
	// KVPools are memcached pools behind virtual addresses, routed by key
	// at every gateway (see KVPool).
	KVPools []KVPool `yaml:"kv_pools,omitempty"`
	// Trust admits sites by certificate of an overlay CA (trust.go).
	Trust Trust `yaml:"trust,omitempty"`
	// Bulk configures flow classes: bulk flows on the path with the most
	// available throughput, the rest on the fastest (bulk.go).
	Bulk Bulk `yaml:"bulk,omitempty"`
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
	// FloodRate caps the frames per second this site floods to every
	// other site for the network (broadcast, multicast, unknown unicast);
	// zero means DefaultFloodRate. Frames above it are dropped and counted
	// (flood_limited).
	FloodRate int `yaml:"flood_rate,omitempty"`
	// Subnet is the IPv4 prefix the network's hosts use (e.g. 10.20.0.0/16),
	// needed when key-value pools serve the network. detour forwards
	// Ethernet frames and needs no subnet otherwise.
	Subnet string `yaml:"subnet,omitempty"`
}

// Load reads, decodes, completes with defaults and validates a file, and
// reads the private key from private_key_file when the file names one.
func Load(path string) (*Agent, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	a, err := Parse(b)
	if err == nil && a.PrivateKeyFile != "" {
		err = a.readKeyFile(b)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// Parse decodes a YAML document strictly (unknown keys are errors), applies
// defaults and validates. Every problem is reported at once, as Problems
// naming field and line.
func Parse(b []byte) (*Agent, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, Problems{{Msg: yamlMessage(err)}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var a Agent
	var decoded Problems
	if err := dec.Decode(&a); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, Problems{{Msg: yamlMessage(err)}}
		}
		decoded = decodeProblems(&root, te)
	}
	a.ApplyDefaults()
	var found Problems
	if err := a.Validate(); err != nil {
		found = err.(Problems)
	}
	if all := found.place(&root, decoded); len(all) > 0 {
		return nil, all
	}
	return &a, nil
}

// readKeyFile reads the private key from PrivateKeyFile into PrivateKey
// and checks it. The file must not be readable by others. doc is the
// configuration file, for the line of the field.
func (a *Agent) readKeyFile(doc []byte) error {
	fail := func(format string, args ...any) error {
		var root yaml.Node
		_ = yaml.Unmarshal(doc, &root)
		return Problems{{Field: "private_key_file", Line: yamlpath.Line(&root, "private_key_file"), Msg: fmt.Sprintf(format, args...)}}
	}
	st, err := os.Stat(a.PrivateKeyFile)
	if err != nil {
		return fail("%v", err)
	}
	if st.Mode().Perm()&0o004 != 0 {
		return fail("%s is readable by everyone (mode %v): chmod 600 it, or 640 for group detour", a.PrivateKeyFile, st.Mode().Perm())
	}
	b, err := os.ReadFile(a.PrivateKeyFile)
	if err != nil {
		return fail("%v", err)
	}
	text := strings.TrimSpace(string(b))
	priv, err := keys.ParsePrivate(text)
	if err != nil {
		return fail("%s: %v (write it with: detour genkey > %s)", a.PrivateKeyFile, err, a.PrivateKeyFile)
	}
	for i, p := range a.Peers {
		if pub, err := keys.ParsePublic(p.PublicKey); err == nil && pub == priv.Public() {
			return Problems{{Field: fmt.Sprintf("peers[%d].public_key", i), Msg: fmt.Sprintf("is this site's own public key, not site %q's", p.Name)}}
		}
	}
	a.PrivateKey, a.keyRead = text, true
	return nil
}

// Marshal encodes the configuration as YAML. A key read from
// private_key_file stays in its file.
func (a *Agent) Marshal() ([]byte, error) {
	c := *a
	if c.PrivateKeyFile != "" {
		c.PrivateKey = ""
	}
	return yaml.Marshal(&c)
}

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
	for i := range a.KVPools {
		a.KVPools[i].applyDefaults()
	}
	a.Bulk.applyDefaults()
}

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	ifnameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`)
)

// Validate checks the whole configuration. It returns nil or Problems:
// every mistake it found, each a *FieldError naming its field.
func (a *Agent) Validate() error {
	var pr Problems
	if a.Site == "" {
		pr.add("site", "missing: every agent needs its site name")
	} else if !nameRE.MatchString(a.Site) {
		pr.add("site", "%q is not a valid site name (letters, digits, '.', '_', '-'; at most 63)", a.Site)
	}
	validateListen(a, &pr)
	validatePeers(a, &pr)
	validateKeys(a, &pr)
	validateTrust(a, &pr)
	validateNetworks(a.Networks, &pr)
	validateAPI(a, &pr)
	if a.ProbeInterval < 10*time.Millisecond || a.ProbeInterval > 5*time.Second {
		pr.add("probe_interval", "%v is outside 10ms..5s", a.ProbeInterval)
	} else if a.MaxProbeRate < 0 || time.Duration(a.MaxProbeRate)*a.ProbeInterval < time.Second {
		pr.add("max_probe_rate", "%d/s does not allow even one peer every probe_interval (%v)", a.MaxProbeRate, a.ProbeInterval)
	}
	if a.Measurement != "" && a.Measurement != MeasurementFull && a.Measurement != MeasurementEconomy {
		pr.add("measurement", "%q is neither %s nor %s", a.Measurement, MeasurementFull, MeasurementEconomy)
	}
	if a.UnderlayMTU != 0 && (a.UnderlayMTU < 576 || a.UnderlayMTU > 65535) {
		pr.add("underlay_mtu", "%d is outside 576..65535", a.UnderlayMTU)
	}
	validateRates(a, &pr)
	validateKVPools(a, &pr)
	validateBulk(&a.Bulk, &pr)
	if a.MaxHops < 1 || a.MaxHops > maxPath {
		pr.add("max_hops", "%d is outside 1..%d", a.MaxHops, maxPath)
	}
	return pr.err()
}

// maxSocketPath is the longest path a unix socket address holds.
const maxSocketPath = 107

// validateAPI checks the API's TCP address, socket and token: a TCP
// address other than loopback is reachable from other machines, so it
// needs a token.
func validateAPI(a *Agent, pr *Problems) {
	ap, err := netip.ParseAddrPort(a.API)
	switch {
	case err != nil:
		pr.add("api", "%q is not an IP:port address", a.API)
	case !ap.Addr().IsLoopback() && a.APITokenFile == "":
		pr.add("api", "%s is not a loopback address, so the API needs a token: set api_token_file (a file readable by root) or listen on 127.0.0.1", a.API)
	}
	if a.APITokenFile != "" && !strings.HasPrefix(a.APITokenFile, "/") {
		pr.add("api_token_file", "%q is not an absolute path", a.APITokenFile)
	}
	if a.APISocket != "" && (!strings.HasPrefix(a.APISocket, "/") || len(a.APISocket) > maxSocketPath) {
		pr.add("api_socket", "%q is not an absolute path of at most %d bytes", a.APISocket, maxSocketPath)
	}
}

func validateListen(a *Agent, pr *Problems) {
	if a.Listen == "" {
		pr.add("listen", "missing: the UDP address (IP:port) to bind on the underlay")
		return
	}
	lp, err := netip.ParseAddrPort(a.Listen)
	if err != nil || lp.Port() == 0 {
		pr.add("listen", "%q is not an IP:port address with a non-zero port", a.Listen)
		return
	}
	if a.Advertise != "" {
		ap, err := netip.ParseAddrPort(a.Advertise)
		if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() {
			pr.add("advertise", "%q is not a reachable IP:port address", a.Advertise)
		}
	} else if lp.Addr().IsUnspecified() && !a.Encrypted() {
		// Encrypted sites follow the source of authenticated datagrams, so
		// a site behind NAT needs no address of its own (docs/membership.md).
		pr.add("advertise", "missing: listen is a wildcard address, so peers need an advertised IP:port (or a private_key: encrypted sites follow a site's source address, as behind NAT)")
	}
}

func validatePeers(a *Agent, pr *Problems) {
	seen := map[string]bool{a.Site: true}
	for i, p := range a.Peers {
		field := fmt.Sprintf("peers[%d]", i)
		switch {
		case p.Name == "":
			pr.add(field+".name", "missing")
		case !nameRE.MatchString(p.Name):
			pr.add(field+".name", "%q is not a valid site name", p.Name)
		case p.Name == a.Site:
			pr.add(field+".name", "%q is this site's own name", p.Name)
		case seen[p.Name]:
			pr.add(field+".name", "%q duplicate site name", p.Name)
		}
		seen[p.Name] = true
		if p.Address == "" {
			if p.PublicKey == "" {
				pr.add(field+".address", "missing: a peer needs an address (to join through it) or a public_key (to accept it)")
			}
			continue
		}
		ap, err := netip.ParseAddrPort(p.Address)
		if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() {
			pr.add(field+".address", "%q is not an IP:port address", p.Address)
		}
	}
}

// validateRates checks that guarantees fit under ceilings and the site's
// egress capacity.
func validateRates(a *Agent, pr *Problems) {
	var sum Rate
	for i, n := range a.Networks {
		if n.MaxRate > 0 && n.MinRate > n.MaxRate {
			pr.add(fmt.Sprintf("networks[%d].min_rate", i), "%v exceeds max_rate %v", n.MinRate, n.MaxRate)
		}
		sum += n.MinRate
	}
	if sum > 0 && a.EgressRate == 0 {
		pr.add("egress_rate", "missing: networks have a min_rate, which is guaranteed within the site's egress_rate")
	}
	if a.EgressRate > 0 && sum > a.EgressRate {
		pr.add("egress_rate", "%v is less than the networks' guaranteed rates (%v in all)", a.EgressRate, sum)
	}
}

// validateKeys checks that the keys parse and that encryption is either
// configured for every peer or for none. The key in private_key_file is
// read and checked by Load.
func validateKeys(a *Agent, pr *Problems) {
	var own keys.PublicKey
	switch {
	case a.PrivateKey != "" && a.PrivateKeyFile != "" && !a.keyRead:
		pr.add("private_key_file", "set together with private_key: give the key in one place only")
	case a.PrivateKeyFile != "" && !strings.HasPrefix(a.PrivateKeyFile, "/"):
		pr.add("private_key_file", "%q is not an absolute path", a.PrivateKeyFile)
	case a.PrivateKey != "":
		priv, err := keys.ParsePrivate(a.PrivateKey)
		if err != nil {
			pr.add("private_key", "%v", err)
			break
		}
		own = priv.Public()
	}
	encrypted := a.Encrypted()
	missingOwn := false
	for i, p := range a.Peers {
		field := fmt.Sprintf("peers[%d].public_key", i)
		switch {
		case p.PublicKey == "" && encrypted && !a.Trust.Enabled():
			pr.add(field, "missing: with a private key, every peer needs its public key (site %q)", p.Name)
		case p.PublicKey != "" && !encrypted:
			missingOwn = true
		case p.PublicKey != "":
			pub, err := keys.ParsePublic(p.PublicKey)
			if err != nil {
				pr.add(field, "%v", err)
			} else if pub == own {
				pr.add(field, "is this site's own public key, not site %q's", p.Name)
			}
		}
	}
	if missingOwn {
		pr.add("private_key", "missing: peers have public keys, so this site needs its private key (private_key_file, from detour genkey)")
	}
}

// Encrypted reports whether the overlay runs encrypted: the site has a
// private key, in the file or in a file it names.
func (a *Agent) Encrypted() bool { return a.PrivateKey != "" || a.PrivateKeyFile != "" }

func validateNetworks(ns []Network, pr *Problems) {
	ids := map[uint32]bool{}
	names := map[string]bool{}
	taps := map[string]bool{}
	for i, n := range ns {
		field := fmt.Sprintf("networks[%d]", i)
		if !nameRE.MatchString(n.Name) {
			pr.add(field+".name", "%q is not a valid network name", n.Name)
		} else if names[n.Name] {
			pr.add(field+".name", "duplicate network %q", n.Name)
		}
		if n.ID == 0 {
			pr.add(field+".id", "missing or zero: every network needs a non-zero identifier")
		} else if ids[n.ID] {
			pr.add(field+".id", "duplicate network id %d", n.ID)
		}
		switch {
		case n.TAP == "":
			pr.add(field+".tap", "missing: the TAP device name")
		case !ifnameRE.MatchString(n.TAP):
			pr.add(field+".tap", "%q is not a valid interface name (at most 15 characters)", n.TAP)
		case taps[n.TAP]:
			pr.add(field+".tap", "duplicate TAP device %q", n.TAP)
		}
		if n.Bridge != "" && !ifnameRE.MatchString(n.Bridge) {
			pr.add(field+".bridge", "%q is not a valid interface name", n.Bridge)
		}
		if n.MTU < 576 || n.MTU > 65000 {
			pr.add(field+".mtu", "%d is outside 576..65000", n.MTU)
		}
		if n.Subnet != "" && !n.prefix().IsValid() {
			pr.add(field+".subnet", "%q is not an IPv4 prefix of at most /30 (e.g. 10.20.0.0/16)", n.Subnet)
		}
		if n.FloodRate < 0 || n.FloodRate > MaxFloodRate {
			pr.add(field+".flood_rate", "%d frames/s is outside 0..%d (0: the default, %d)", n.FloodRate, MaxFloodRate, DefaultFloodRate)
		}
		if n.QueueLen != 0 && (n.QueueLen < MinQueueLen || n.QueueLen > MaxQueueLen) {
			pr.add(field+".queue_len", "%d frames is outside %d..%d (0 keeps the kernel's default)", n.QueueLen, MinQueueLen, MaxQueueLen)
		}
		names[n.Name], ids[n.ID], taps[n.TAP] = true, true, true
	}
}
