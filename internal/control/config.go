package control

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/detour-overlay/detour/internal/linkstate"
	"github.com/detour-overlay/detour/internal/measure"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// Config configures a Node. Start from DefaultConfig.
type Config struct {
	// Name is this site's name; its wire ID is wire.SiteIDFromName(Name).
	Name string
	// Advertise is the underlay address other sites send to; an
	// unspecified address (0.0.0.0 or ::) says the site does not know its
	// own, as behind NAT.
	Advertise netip.AddrPort
	// Bootstrap lists addresses of sites to join through; any one live
	// member is enough. Empty for the first site.
	Bootstrap []netip.AddrPort
	// Incarnation distinguishes restarts of the same site; it must grow
	// from one start to the next. Zero means the start time in ns.
	Incarnation uint64
	// ProbeInterval is the time between probes to each live member.
	ProbeInterval time.Duration
	// MaxProbeRate caps the probes per second this site sends to all
	// members together (0: no cap). With more members than
	// MaxProbeRate × ProbeInterval the interval grows to members /
	// MaxProbeRate, and SuspectAfter and DownAfter grow in proportion, so
	// failure detection still waits for the same number of missed probes.
	// This keeps the probe load of a full mesh linear in the number of
	// sites per site instead of growing without bound.
	MaxProbeRate int
	// DownProbeInterval is the time between probes to a member that is
	// down, to notice its return.
	DownProbeInterval time.Duration
	// DownAfter declares a link down when no probe reply arrived for this
	// long, and a member down when nothing was heard from it and no live
	// member reports a working link to it.
	DownAfter time.Duration
	// SuspectAfter marks an own link suspect when no probe reply arrived
	// for this long (a few missed probes) although it is not down yet:
	// routes over it then get a backup path and the data path sends on
	// both until the link is confirmed or declared down. Zero disables.
	SuspectAfter time.Duration
	// JoinTimeout declares a member learned from a list, but never heard
	// from, down.
	JoinTimeout time.Duration
	// GossipInterval is the time between two member lists sent to one
	// member (round robin).
	GossipInterval time.Duration
	// BootstrapInterval is the time between hellos to the bootstrap
	// addresses while no member is alive.
	BootstrapInterval time.Duration
	// ExpireAfter drops the link state of an origin not heard from for
	// this long.
	ExpireAfter time.Duration
	// ForgetAfter removes members that have been down or gone for this
	// long.
	ForgetAfter time.Duration
	// Economy selects the measurement whose control traffic grows slower
	// than the number of pairs (docs/scaling.md): link-state reports that
	// carry only the links that changed, and links probed at full rate
	// only where a failure must be covered at once. False keeps the
	// earlier scheme: every link probed alike, every report the whole
	// row.
	Economy bool
	// Stopwatch, if set, reads the wall clock. The node then times its
	// route computations with it and spaces them so that they take at
	// most 1/refreshShare of the time (timers.go): a computation costs
	// O(N²) and more, and on a busy machine it also waits for the CPU.
	// Nil (the simulator, tests): the spacing depends on the member
	// count alone, so runs stay deterministic.
	Stopwatch func() time.Time
	// Throughput tunes the estimation of available throughput and its
	// packet trains (throughput.go).
	Throughput ThroughputConfig
	LinkState  linkstate.OriginatorConfig
	Routing    routing.Config
	Filter     measure.FilterConfig
	Loss       measure.LossConfig
}

// DefaultMaxProbeRate is the default cap on probes per second per site:
// up to 20 other members are probed every 100 ms; at 54 sites (53
// members) the interval is 265 ms.
const DefaultMaxProbeRate = 200

// DefaultConfig returns the defaults: probes every 100 ms (at most 200 a
// second in all), a link suspect after 250 ms without a reply (two missed
// probes and a margin) and down after 500 ms (so a silent site is down
// within 1 s), link state refreshed every second and expired after 3.5 s, H = 3, hysteresis max(0.5 ms, 2 %) held
// 300 ms.
func DefaultConfig(name string, advertise netip.AddrPort, bootstrap ...netip.AddrPort) Config {
	return Config{
		Name:              name,
		Advertise:         advertise,
		Bootstrap:         bootstrap,
		ProbeInterval:     100 * time.Millisecond,
		MaxProbeRate:      DefaultMaxProbeRate,
		DownProbeInterval: time.Second,
		DownAfter:         500 * time.Millisecond,
		SuspectAfter:      250 * time.Millisecond,
		JoinTimeout:       3 * time.Second,
		GossipInterval:    time.Second,
		BootstrapInterval: time.Second,
		ExpireAfter:       3500 * time.Millisecond,
		ForgetAfter:       5 * time.Minute,
		Throughput:        DefaultThroughputConfig(),
		LinkState:         linkstate.DefaultOriginatorConfig(),
		Routing:           routing.DefaultConfig(),
		Filter:            measure.DefaultFilterConfig(),
		Loss:              measure.DefaultLossConfig(),
	}
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("control: invalid configuration")

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
}

// Validate checks the configuration and returns one clear error.
func (c *Config) Validate() error {
	switch {
	case c.Name == "" || len(c.Name) > wire.MaxNameLen:
		return configErr("site name must have 1 to %d bytes, got %q", wire.MaxNameLen, c.Name)
	case !c.Advertise.IsValid() || c.Advertise.Port() == 0:
		// (An unspecified address is allowed: a site behind NAT does not
		// know its own, and sealed sites follow the source of its
		// datagrams; the site core never sends to an unspecified one.)
		return configErr("advertise address %v is not a usable address:port", c.Advertise)
	case c.ProbeInterval <= 0 || c.DownProbeInterval <= 0:
		return configErr("probe intervals must be positive")
	case c.MaxProbeRate < 0 || (c.MaxProbeRate > 0 && time.Duration(c.MaxProbeRate)*c.ProbeInterval < time.Second):
		return configErr("max probe rate %d/s must be zero (no cap) or allow at least one member at the probe interval %v",
			c.MaxProbeRate, c.ProbeInterval)
	case c.DownAfter < 2*c.ProbeInterval:
		return configErr("down-after %v must be at least two probe intervals (%v)", c.DownAfter, 2*c.ProbeInterval)
	case c.SuspectAfter < 0 || (c.SuspectAfter > 0 && (c.SuspectAfter <= c.ProbeInterval || c.SuspectAfter >= c.DownAfter)):
		return configErr("suspect-after %v must be zero or between the probe interval %v and down-after %v",
			c.SuspectAfter, c.ProbeInterval, c.DownAfter)
	case c.GossipInterval <= 0 || c.BootstrapInterval <= 0 || c.JoinTimeout <= 0:
		return configErr("gossip, bootstrap and join intervals must be positive")
	case c.ExpireAfter <= c.LinkState.Refresh || c.LinkState.Refresh <= 0:
		return configErr("link-state expiry %v must exceed the refresh interval %v", c.ExpireAfter, c.LinkState.Refresh)
	case c.ForgetAfter <= 0:
		return configErr("forget-after must be positive")
	}
	for _, b := range c.Bootstrap {
		if !b.IsValid() || b.Port() == 0 {
			return configErr("bootstrap address %v is not a usable address:port", b)
		}
	}
	if err := c.Throughput.validate(); err != nil {
		return err
	}
	if err := c.Routing.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	f := c.Filter
	if f.Window < 1 || f.StepCount < 1 || f.StepCount > f.Window || f.TrimLow < 0 || f.KeepTo <= f.TrimLow || f.KeepTo > 1 || f.MaxAge <= 0 {
		return configErr("measurement filter: window, step count, trimmed band or max age out of range")
	}
	return nil
}

// ValidateSites checks a list of site names for duplicates and for
// distinct names whose IDs collide; config loaders call it on every name
// they know.
func ValidateSites(names []string) error {
	seen := map[wire.SiteID]string{}
	for _, n := range names {
		id := wire.SiteIDFromName(n)
		if prev, ok := seen[id]; ok {
			if prev == n {
				return configErr("duplicate site name %q", n)
			}
			return configErr("site names %q and %q have the same ID %v; rename one", prev, n, id)
		}
		seen[id] = n
	}
	return nil
}
