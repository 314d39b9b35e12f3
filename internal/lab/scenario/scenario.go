// Package scenario defines the YAML format of a scenario of detour's testbed:
// the sites of an emulated WAN, the hosts at each site, the properties of
// every directed link between sites (a default plus overrides), optional
// per-site access capacity, the underlay MTU, named cross-traffic flows and
// a timeline of events. Parse decodes a file strictly and Validate reports
// the first problem as a *FieldError naming the field and its YAML line.
//
// Shipped scenarios (leon-japan, lanman2017 and the generated azure-N) are
// embedded in the binary; Load resolves a name or a file path.
package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/yamlpath"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Limits and defaults of the format.
const (
	DefaultMTU       = 1500
	MinMTU           = 576
	MaxMTU           = 9000
	MaxSites         = 250
	MaxHosts         = 16
	MaxDelay         = 10 * time.Second
	DefaultQueueTime = 100 * time.Millisecond
	MinQueueBytes    = 3000
)

// Sentinel errors; every validation error matches ErrInvalid and one of
// the more specific kinds below (errors.Is).
var (
	ErrInvalid     = errors.New("invalid scenario")
	ErrMalformed   = errors.New("malformed value")
	ErrNegative    = errors.New("negative value")
	ErrUnknownSite = errors.New("unknown site")
	ErrDuplicate   = errors.New("duplicate")
	ErrMissing     = errors.New("missing field")
	ErrRange       = errors.New("value out of range")
	ErrUnknown     = errors.New("unknown scenario")
)

// FieldError is a validation error that names the field at fault (a
// dotted path such as "links.overrides[2].rate") and its line in the file.
type FieldError struct {
	Field string
	Line  int
	Msg   string
	// Err is the kind of problem, one of the sentinel errors.
	Err error
	col int
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the kind of problem.
func (e *FieldError) Unwrap() error { return e.Err }

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldErr(kind error, field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Err: kind, Msg: fmt.Sprintf(format, args...)}
}

// Scenario is a whole emulated WAN.
type Scenario struct {
	Name        string  `yaml:"name"`
	Description string  `yaml:"description,omitempty"`
	UnderlayMTU int     `yaml:"underlay_mtu,omitempty"`
	Seed        uint64  `yaml:"seed,omitempty"`
	Sites       []Site  `yaml:"sites"`
	Links       Links   `yaml:"links"`
	Traffic     []Flow  `yaml:"traffic,omitempty"`
	Timeline    []Event `yaml:"timeline,omitempty"`
	// KVPools are memcached pools the testbed runs (see KVPool).
	KVPools []KVPool `yaml:"kv_pools,omitempty"`
	// KVDisk sets up the disk tier of kv servers with tier disk.
	KVDisk *KVDisk `yaml:"kv_disk,omitempty"`
	// Bulk, when set, is the bulk section of every detour agent's
	// configuration (flow classes, docs/bulk.md); unset fields keep
	// their defaults, and the agent's validation checks them at
	// `testbed up`.
	Bulk  *config.Bulk `yaml:"bulk,omitempty"`
	lines lineInfo     `yaml:"-"`
}

// Site is one data centre: a gateway and its hosts.
type Site struct {
	Name  string `yaml:"name"`
	Hosts int    `yaml:"hosts,omitempty"`
	// Access, when set, is the site's own connection to the WAN, shared by
	// all its paths (a relay uses it twice: in and out).
	Access *Access `yaml:"access,omitempty"`
	// ClockOffset is a test-only knob passed to the site's detour agent.
	ClockOffset Duration `yaml:"clock_offset,omitempty"`
	// NAT puts the site's gateway behind a NAT (the testbed's nat.go):
	// its agent's datagrams leave from another port, and only those it
	// sent to can reach it.
	NAT bool `yaml:"nat,omitempty"`
}

// Access is a site's access capacity in each direction; zero is unlimited.
type Access struct {
	Up    Rate  `yaml:"up,omitempty"`
	Down  Rate  `yaml:"down,omitempty"`
	Queue Queue `yaml:"queue,omitempty"`
}

// Links holds the default properties of every directed link and the
// overrides of particular links.
type Links struct {
	Default   Patch      `yaml:"default"`
	Overrides []Override `yaml:"overrides,omitempty"`
}

// Patch is a set of link properties, each optional: unset fields keep the
// value they had (the default, or the current value for `link set`).
type Patch struct {
	Delay   *Duration `yaml:"delay,omitempty" json:"delay,omitempty"`
	Jitter  *Duration `yaml:"jitter,omitempty" json:"jitter,omitempty"`
	Loss    *Percent  `yaml:"loss,omitempty" json:"loss,omitempty"`
	Rate    *Rate     `yaml:"rate,omitempty" json:"rate,omitempty"`
	Queue   *Queue    `yaml:"queue,omitempty" json:"queue,omitempty"`
	Reorder *bool     `yaml:"reorder,omitempty" json:"reorder,omitempty"`
}

// Override sets properties of the directed link From->To, or of both
// directions when Both is true.
type Override struct {
	From  string `yaml:"from"`
	To    string `yaml:"to"`
	Both  bool   `yaml:"both,omitempty"`
	Patch `yaml:",inline"`
	// Note documents where the figures come from.
	Note string `yaml:"note,omitempty"`
}

// Flow is a named cross-traffic flow between two gateways over the
// underlay (outside any overlay), started and stopped by the timeline or
// by `detour-lab testbed traffic`.
type Flow struct {
	Name string `yaml:"name"`
	From string `yaml:"from"`
	To   string `yaml:"to"`
	// Both adds the same flow in the reverse direction.
	Both bool `yaml:"both,omitempty"`
	// Rate caps the flow (iperf3 -b); zero lets TCP fill the link.
	Rate Rate `yaml:"rate,omitempty"`
}

// Event is one timeline entry: at At after the testbed is up, change a
// link (Set), start a flow (Start) or stop one (Stop). Exactly one is set.
type Event struct {
	At    Duration  `yaml:"at"`
	Set   *Override `yaml:"set,omitempty"`
	Start string    `yaml:"start,omitempty"`
	Stop  string    `yaml:"stop,omitempty"`
}

// LinkProps are the resolved properties of one directed link.
type LinkProps struct {
	Delay   time.Duration `json:"delay"`
	Jitter  time.Duration `json:"jitter"`
	Loss    float64       `json:"loss"` // probability, 0..1
	Rate    Rate          `json:"rate"` // bits per second, 0 = unlimited
	Queue   Queue         `json:"queue"`
	Reorder bool          `json:"reorder"`
}

// Apply returns p with the fields set in the patch replaced.
func (pt Patch) Apply(p LinkProps) LinkProps {
	if pt.Delay != nil {
		p.Delay = pt.Delay.D()
	}
	if pt.Jitter != nil {
		p.Jitter = pt.Jitter.D()
	}
	if pt.Loss != nil {
		p.Loss = pt.Loss.Fraction()
	}
	if pt.Rate != nil {
		p.Rate = *pt.Rate
	}
	if pt.Queue != nil {
		p.Queue = *pt.Queue
	}
	if pt.Reorder != nil {
		p.Reorder = *pt.Reorder
	}
	return p
}

// IsEmpty reports whether the patch sets nothing.
func (pt Patch) IsEmpty() bool {
	return pt.Delay == nil && pt.Jitter == nil && pt.Loss == nil && pt.Rate == nil && pt.Queue == nil && pt.Reorder == nil
}

// Parse decodes a scenario strictly (unknown keys are errors), fills in
// defaults and validates it. Errors carry the YAML line and field.
func Parse(b []byte) (*Scenario, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, &FieldError{Field: "yaml", Err: ErrMalformed, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, decodeError(&root, err)
	}
	s.lines = lineInfo{root: &root}
	s.ApplyDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// decodeError turns a decoder error into a *FieldError with a line and,
// for value errors, the field's path.
func decodeError(root *yaml.Node, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		fe.Field = yamlpath.PathAt(root, fe.Line, fe.col)
		return fe
	}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		return &FieldError{Err: ErrMalformed, Msg: te.Errors[0]}
	}
	return &FieldError{Field: "yaml", Err: ErrMalformed, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
}

// ApplyDefaults fills in the fields a file may leave out.
func (s *Scenario) ApplyDefaults() {
	if s.UnderlayMTU == 0 {
		s.UnderlayMTU = DefaultMTU
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	for i := range s.Sites {
		if s.Sites[i].Hosts == 0 {
			s.Sites[i].Hosts = 1
		}
	}
	s.applyKVDefaults()
}

// Validate checks the whole scenario and returns the first problem as a
// *FieldError (with its line when the scenario was parsed from a file).
func (s *Scenario) Validate() error {
	err := s.validate()
	var fe *FieldError
	if errors.As(err, &fe) && fe.Line == 0 && s.lines.root != nil {
		fe.Line = yamlpath.Line(s.lines.root, fe.Field)
	}
	return err
}

func (s *Scenario) validate() error {
	if s.Name != "" && !nameRE.MatchString(s.Name) {
		return fieldErr(ErrMalformed, "name", "%q is not a valid scenario name (letters, digits, '_', '-')", s.Name)
	}
	if s.UnderlayMTU < MinMTU || s.UnderlayMTU > MaxMTU {
		return fieldErr(ErrRange, "underlay_mtu", "%d is outside %d..%d", s.UnderlayMTU, MinMTU, MaxMTU)
	}
	if err := s.validateSites(); err != nil {
		return err
	}
	if err := validateProps("links.default", s.Links.Default); err != nil {
		return err
	}
	if err := s.validateOverrides(); err != nil {
		return err
	}
	if err := s.validateTraffic(); err != nil {
		return err
	}
	if err := s.validateKVDisk(); err != nil {
		return err
	}
	if err := s.validateKV(); err != nil {
		return err
	}
	return s.validateTimeline()
}

var nameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,31}$`)

func (s *Scenario) validateSites() error {
	if len(s.Sites) < 2 {
		return fieldErr(ErrMissing, "sites", "a scenario needs at least two sites, it has %d", len(s.Sites))
	}
	if len(s.Sites) > MaxSites {
		return fieldErr(ErrRange, "sites", "%d sites, at most %d", len(s.Sites), MaxSites)
	}
	seen := map[string]int{}
	for i, site := range s.Sites {
		f := fmt.Sprintf("sites[%d]", i)
		if site.Name == "" {
			return fieldErr(ErrMissing, f+".name", "missing: every site needs a name")
		}
		if !nameRE.MatchString(site.Name) {
			return fieldErr(ErrMalformed, f+".name", "%q is not a valid site name (a letter, then letters, digits, '_', '-'; at most 32)", site.Name)
		}
		key := strings.ToLower(site.Name)
		if j, dup := seen[key]; dup {
			return fieldErr(ErrDuplicate, f+".name", "duplicate site %q (sites[%d] has the same name, ignoring case)", site.Name, j)
		}
		seen[key] = i
		if site.Hosts < 1 || site.Hosts > MaxHosts {
			return fieldErr(ErrRange, f+".hosts", "%d is outside 1..%d", site.Hosts, MaxHosts)
		}
		if err := validateAccess(f+".access", site.Access); err != nil {
			return err
		}
	}
	return nil
}

func validateAccess(f string, a *Access) error {
	if a == nil {
		return nil
	}
	if a.Up == 0 && a.Down == 0 {
		return fieldErr(ErrMissing, f, "sets neither up nor down: remove it, or give a rate")
	}
	return nil
}

// validateProps checks the values of a patch that are set.
func validateProps(f string, p Patch) error {
	if p.Delay != nil && *p.Delay < 0 {
		return fieldErr(ErrNegative, f+".delay", "%v is negative", *p.Delay)
	}
	if p.Delay != nil && p.Delay.D() > MaxDelay {
		return fieldErr(ErrRange, f+".delay", "%v is longer than %v", *p.Delay, MaxDelay)
	}
	if p.Jitter != nil && *p.Jitter < 0 {
		return fieldErr(ErrNegative, f+".jitter", "%v is negative", *p.Jitter)
	}
	if p.Jitter != nil && p.Jitter.D() > MaxDelay {
		return fieldErr(ErrRange, f+".jitter", "%v is longer than %v", *p.Jitter, MaxDelay)
	}
	if p.Loss != nil && (*p.Loss < 0 || *p.Loss > 100) {
		kind := ErrRange
		if *p.Loss < 0 {
			kind = ErrNegative
		}
		return fieldErr(kind, f+".loss", "%v is outside 0..100%%", *p.Loss)
	}
	return nil
}

// ValidatePatch checks a patch given outside a file (e.g. `link set`).
func ValidatePatch(p Patch) error { return validateProps("link", p) }

func (s *Scenario) validateOverrides() error {
	setBy := map[[2]int]int{}
	for i, o := range s.Links.Overrides {
		f := fmt.Sprintf("links.overrides[%d]", i)
		a, b, err := s.pair(f, o.From, o.To)
		if err != nil {
			return err
		}
		if err := validateProps(f, o.Patch); err != nil {
			return err
		}
		dirs := [][2]int{{a, b}}
		if o.Both {
			dirs = append(dirs, [2]int{b, a})
		}
		for _, d := range dirs {
			if j, dup := setBy[d]; dup {
				return fieldErr(ErrDuplicate, f, "duplicate link %s->%s (already set by links.overrides[%d])", s.Sites[d[0]].Name, s.Sites[d[1]].Name, j)
			}
			setBy[d] = i
		}
	}
	return nil
}

// pair resolves two site names of a directed link.
func (s *Scenario) pair(f, from, to string) (int, int, error) {
	if from == "" {
		return 0, 0, fieldErr(ErrMissing, f+".from", "missing: the link's source site")
	}
	if to == "" {
		return 0, 0, fieldErr(ErrMissing, f+".to", "missing: the link's destination site")
	}
	a := s.SiteIndex(from)
	if a < 0 {
		return 0, 0, fieldErr(ErrUnknownSite, f+".from", "unknown site %q (sites: %s)", from, s.siteList())
	}
	b := s.SiteIndex(to)
	if b < 0 {
		return 0, 0, fieldErr(ErrUnknownSite, f+".to", "unknown site %q (sites: %s)", to, s.siteList())
	}
	if a == b {
		return 0, 0, fieldErr(ErrRange, f+".to", "a link from %q to itself", to)
	}
	return a, b, nil
}

func (s *Scenario) siteList() string {
	names := make([]string, len(s.Sites))
	for i, site := range s.Sites {
		names[i] = site.Name
	}
	return strings.Join(names, ", ")
}

func (s *Scenario) validateTraffic() error {
	seen := map[string]int{}
	for i, fl := range s.Traffic {
		f := fmt.Sprintf("traffic[%d]", i)
		if !nameRE.MatchString(fl.Name) {
			return fieldErr(ErrMalformed, f+".name", "%q is not a valid flow name", fl.Name)
		}
		if j, dup := seen[fl.Name]; dup {
			return fieldErr(ErrDuplicate, f+".name", "duplicate flow %q (traffic[%d])", fl.Name, j)
		}
		seen[fl.Name] = i
		if _, _, err := s.pair(f, fl.From, fl.To); err != nil {
			return err
		}
	}
	return nil
}

func (s *Scenario) validateTimeline() error {
	for i, ev := range s.Timeline {
		f := fmt.Sprintf("timeline[%d]", i)
		if ev.At < 0 {
			return fieldErr(ErrNegative, f+".at", "%v is negative", ev.At)
		}
		n := 0
		if ev.Set != nil {
			n++
		}
		if ev.Start != "" {
			n++
		}
		if ev.Stop != "" {
			n++
		}
		if n != 1 {
			return fieldErr(ErrMissing, f, "an event has exactly one of set, start, stop (it has %d)", n)
		}
		if err := s.validateEvent(f, ev); err != nil {
			return err
		}
	}
	return nil
}

func (s *Scenario) validateEvent(f string, ev Event) error {
	switch {
	case ev.Set != nil:
		if _, _, err := s.pair(f+".set", ev.Set.From, ev.Set.To); err != nil {
			return err
		}
		if ev.Set.Patch.IsEmpty() {
			return fieldErr(ErrMissing, f+".set", "changes nothing: give delay, jitter, loss, rate, queue or reorder")
		}
		return validateProps(f+".set", ev.Set.Patch)
	case ev.Start != "" && s.FlowIndex(ev.Start) < 0:
		return fieldErr(ErrUnknown, f+".start", "unknown flow %q (define it under traffic)", ev.Start)
	case ev.Stop != "" && s.FlowIndex(ev.Stop) < 0:
		return fieldErr(ErrUnknown, f+".stop", "unknown flow %q (define it under traffic)", ev.Stop)
	}
	return nil
}

// SiteIndex returns the index of the named site (case-insensitive), or -1.
func (s *Scenario) SiteIndex(name string) int {
	for i, site := range s.Sites {
		if strings.EqualFold(site.Name, name) {
			return i
		}
	}
	return -1
}

// FlowIndex returns the index of the named traffic flow, or -1.
func (s *Scenario) FlowIndex(name string) int {
	for i, f := range s.Traffic {
		if f.Name == name {
			return i
		}
	}
	return -1
}

// Link returns the resolved properties of the directed link from site a
// to site b (indices): the default with the matching override applied.
func (s *Scenario) Link(a, b int) LinkProps {
	p := s.Links.Default.Apply(LinkProps{})
	for _, o := range s.Links.Overrides {
		fa, fb := s.SiteIndex(o.From), s.SiteIndex(o.To)
		if (fa == a && fb == b) || (o.Both && fa == b && fb == a) {
			return o.Patch.Apply(p)
		}
	}
	return p
}

// RTT returns the configured round-trip propagation delay between two
// sites: d(a,b) + d(b,a).
func (s *Scenario) RTT(a, b int) time.Duration {
	return s.Link(a, b).Delay + s.Link(b, a).Delay
}

// Marshal encodes the scenario as YAML.
func (s *Scenario) Marshal() ([]byte, error) { return yaml.Marshal(s) }
