package agent

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/edge"
	"github.com/detour-overlay/detour/internal/runstate"
	"github.com/detour-overlay/detour/internal/wire"
)

// mtuCheckInterval is how often the underlay MTU is read again, so that a
// drop is reflected in the MSS clamp within a few seconds.
const mtuCheckInterval = 2 * time.Second

// underlayMTU returns the MTU of the interface that holds the listen
// address, or the configured underlay_mtu (1500 by default) when the
// address is a wildcard or not found.
func (a *Agent) underlayMTU() int {
	fallback := a.cfg.UnderlayMTU
	if fallback == 0 {
		fallback = 1500
	}
	ap, err := netip.ParseAddrPort(a.cfg.Listen)
	if err != nil || ap.Addr().IsUnspecified() {
		return fallback
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return fallback
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, ad := range addrs {
			if pfx, err := netip.ParsePrefix(ad.String()); err == nil && pfx.Addr() == ap.Addr() {
				return ifc.MTU
			}
		}
	}
	return fallback
}

// innerMTU is the largest IP packet of a host that crosses the underlay
// unfragmented on the longest path (MaxHops sites), encrypted or not, over
// the listen address's IP version: wire.InnerMTU, whose comment draws
// the packet.
func (a *Agent) innerMTU(underlay int) int {
	return wire.InnerMTU(underlay, a.cfg.MaxHops, a.sec != nil, underlayIPv6(a.cfg))
}

// updateMSS sets the data path's MSS clamp from the current underlay MTU.
// Larger non-TCP packets are still carried: the kernel fragments the
// outer datagram. It runs in New and then on the control loop.
func (a *Agent) updateMSS() {
	under := a.underlayMTU()
	v4, v6 := edge.MSSForMTU(a.innerMTU(under))
	changed := v4 != a.mssV4
	a.mssV4, a.mssV6 = v4, v6
	if changed {
		a.engine.SetInnerMTU(a.innerMTU(under))
		a.log.Info("MSS clamp", "underlay_mtu", under, "mss4", v4, "mss6", v6)
	}
}

// Networks implements api.Backend.
func (a *Agent) Networks() []api.Network {
	out := []api.Network{}
	a.do(func() {
		for _, n := range a.netCfg {
			l := a.shaper.Get(n.ID)
			out = append(out, api.Network{Name: n.Name, ID: n.ID, TAP: n.TAP, Bridge: n.Bridge, MTU: n.MTU, QueueLen: n.QueueLen,
				MaxRate: nonZero(config.Rate(l.MaxBps)), MinRate: nonZero(config.Rate(l.MinBps)), Subnet: n.Subnet})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Attach implements api.Backend: it opens the network's TAP device and
// starts carrying its frames.
func (a *Agent) Attach(r api.Network) (api.Network, error) {
	n := config.Network{Name: r.Name, ID: r.ID, TAP: r.TAP, Bridge: r.Bridge, MTU: r.MTU, QueueLen: r.QueueLen, Subnet: r.Subnet}
	if n.MTU == 0 {
		n.MTU = config.DefaultMTU
	}
	lim, err := parseLimits(r.MaxRate, r.MinRate)
	if err != nil {
		return api.Network{}, err
	}
	n.MaxRate, n.MinRate = config.Rate(lim.MaxBps), config.Rate(lim.MinBps)
	// The device is opened outside the control loop, which only checks
	// and records the network.
	if !a.do(func() {
		all := []config.Network{n}
		for _, have := range a.netCfg {
			all = append(all, have)
		}
		trial := *a.cfg
		trial.Networks = all
		err = trial.Validate()
	}) {
		return api.Network{}, errStopped
	}
	if err != nil {
		return api.Network{}, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	p, err := a.openPort(n)
	if err != nil {
		return api.Network{}, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	if err := a.engine.AddPort(p); err != nil {
		p.Dev.Close()
		return api.Network{}, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	a.shaper.Set(n.ID, lim)
	a.do(func() {
		a.netCfg[n.ID] = n
		a.kvNetworksChanged() // a pool may serve it
		err = a.record(func(d *runstate.Doc) { d.Attach(n, a.file) })
	})
	if err != nil {
		return api.Network{}, err
	}
	a.log.Info("network attached", "name", n.Name, "id", n.ID, "tap", n.TAP)
	r.MTU = n.MTU
	return r, nil
}

// Detach implements api.Backend: frames of the network are no longer
// carried to or from this site, and its TAP device is removed.
func (a *Agent) Detach(name string) error {
	var n config.Network
	ok := false
	var err error
	a.do(func() {
		if n, ok = a.networkByName(name); ok {
			delete(a.netCfg, n.ID)
			a.kvNetworksChanged()
			err = a.record(func(d *runstate.Doc) { d.Detach(name, a.file) })
		}
	})
	if !ok {
		return fmt.Errorf("%w: network %q is not attached here", api.ErrNotFound, name)
	}
	a.closeNetwork(n)
	return err
}

// closeNetwork stops carrying a network's frames and removes its device.
func (a *Agent) closeNetwork(n config.Network) {
	if p := a.engine.RemovePort(n.ID); p != nil {
		p.Dev.Close()
	}
	a.shaper.Set(n.ID, edge.Limits{})
	a.log.Info("network detached", "name", n.Name, "id", n.ID)
}

// SetLimits implements api.Backend.
func (a *Agent) SetLimits(name string, maxRate, minRate string) error {
	lim, err := parseLimits(maxRate, minRate)
	if err != nil {
		return err
	}
	if !a.do(func() { err = a.setLimits(name, lim) }) {
		return errStopped
	}
	return err
}

// setLimits checks and applies a network's rate limits on the control
// loop.
func (a *Agent) setLimits(name string, lim edge.Limits) error {
	n, ok := a.networkByName(name)
	if !ok {
		return fmt.Errorf("%w: network %q is not attached here", api.ErrNotFound, name)
	}
	trial := *a.cfg
	trial.Networks = nil
	for _, have := range a.netCfg {
		if have.ID == n.ID {
			have.MaxRate, have.MinRate = config.Rate(lim.MaxBps), config.Rate(lim.MinBps)
		}
		trial.Networks = append(trial.Networks, have)
	}
	if err := trial.Validate(); err != nil {
		return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	n.MaxRate, n.MinRate = config.Rate(lim.MaxBps), config.Rate(lim.MinBps)
	a.netCfg[n.ID] = n
	a.shaper.Set(n.ID, lim)
	return a.record(func(d *runstate.Doc) { d.SetLimits(name, limitsOf(n)) })
}

// SetEgress implements api.Backend: the site's total egress capacity.
func (a *Agent) SetEgress(rate string) error {
	r, err := parseRate(rate)
	if err != nil {
		return err
	}
	if !a.do(func() { err = a.setEgress(r) }) {
		return errStopped
	}
	return err
}

// setEgress checks and applies the site's egress capacity on the control
// loop.
func (a *Agent) setEgress(r config.Rate) error {
	trial := *a.cfg
	trial.EgressRate = r
	trial.Networks = nil
	for _, n := range a.netCfg {
		trial.Networks = append(trial.Networks, n)
	}
	if err := trial.Validate(); err != nil {
		return fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	a.cfg.EgressRate = r
	a.shaper.SetSite(float64(r))
	return a.record(func(d *runstate.Doc) { d.SetEgress(r) })
}

func (a *Agent) networkByName(name string) (config.Network, bool) {
	for _, n := range a.netCfg {
		if n.Name == name {
			return n, true
		}
	}
	return config.Network{}, false
}

func parseRate(s string) (config.Rate, error) {
	if s == "" {
		return 0, nil
	}
	r, err := config.ParseRate(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", api.ErrBadRequest, err)
	}
	return r, nil
}

func parseLimits(maxRate, minRate string) (edge.Limits, error) {
	mx, err := parseRate(maxRate)
	if err != nil {
		return edge.Limits{}, err
	}
	mn, err := parseRate(minRate)
	if err != nil {
		return edge.Limits{}, err
	}
	if mx > 0 && mn > mx {
		return edge.Limits{}, fmt.Errorf("%w: min_rate %v exceeds max_rate %v", api.ErrBadRequest, mn, mx)
	}
	return edge.Limits{MaxBps: float64(mx), MinBps: float64(mn)}, nil
}
