package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/site"
	"github.com/detour-overlay/detour/internal/wire"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/edge"
	"github.com/detour-overlay/detour/internal/reload"
	"github.com/detour-overlay/detour/internal/runstate"
)

// Reload implements api.Backend (and SIGHUP): it reads the configuration
// file again and applies what changed without touching the rest. A file
// with an error, or a change that only a restart can make, is refused and
// the running configuration stays.
func (a *Agent) Reload() (api.Reload, error) {
	if a.cfgPath == "" {
		return api.Reload{}, fmt.Errorf("%w: the agent was started without a configuration file to read again", api.ErrBadRequest)
	}
	file, err := config.Load(a.cfgPath)
	if err != nil {
		return api.Reload{}, fmt.Errorf("%w: %v\nthe running configuration stays", api.ErrBadRequest, err)
	}
	var res api.Reload
	if !a.do(func() { res, err = a.reload(file) }) {
		return api.Reload{}, errStopped
	}
	return res, err
}

// reload applies a new configuration file on the control loop: the state
// cleaned of what the file now decides (runstate.Doc.Rebase) is saved
// first, then the plan from the configuration in force to the new one is
// carried out.
func (a *Agent) reload(file *config.Agent) (api.Reload, error) {
	res := api.Reload{Applied: []string{}}
	pre := reload.Diff(a.file, file)
	if err := pre.Err(); err != nil {
		return res, fmt.Errorf("%w: %v; the running configuration stays", api.ErrBadRequest, err)
	}
	for _, act := range pre.Actions {
		if act.Kind != reload.RotateKey {
			continue
		}
		if _, _, err := rotation(file); err != nil {
			return res, fmt.Errorf("%w: %v; the running configuration stays", api.ErrBadRequest, err)
		}
	}
	seeds, fp, err := a.kvReloadCheck(file)
	if err != nil {
		return res, fmt.Errorf("%w: %v; the running configuration stays", api.ErrBadRequest, err)
	}
	doc := a.state.Clone()
	res.Notes = doc.Rebase(a.file, file)
	eff, kept, notes := runstate.Merge(file, doc)
	res.Notes = append(res.Notes, notes...)
	if a.store != nil {
		if err := a.store.Save(kept); err != nil {
			return res, fmt.Errorf("the run-time state could not be stored, so nothing was reloaded: %w", err)
		}
	}
	plan := reload.Diff(a.inForce(), eff)
	a.file, a.state, a.cfg = file, kept, eff
	var errs []error
	for _, act := range plan.Actions {
		if err := a.apply(act); err != nil {
			errs = append(errs, fmt.Errorf("%v: %w", act, err))
			continue
		}
		res.Applied = append(res.Applied, act.String())
	}
	// A replaced network is closed in the first pass and opened in the
	// second, after every removal, so that networks may trade TAP names.
	for _, act := range plan.Actions {
		if act.Kind == reload.ReplaceNetwork {
			if err := a.openNetwork(act.New); err != nil {
				errs = append(errs, fmt.Errorf("%v: %w", act, err))
			}
		}
	}
	a.kvNetworksChanged()
	kvDone, err := a.kvReload(seeds, fp)
	res.Applied = append(res.Applied, kvDone...)
	if err != nil {
		errs = append(errs, err)
	}
	for _, n := range res.Notes {
		a.log.Warn("reload: " + n)
	}
	a.log.Info("configuration reloaded", "file", a.cfgPath, "applied", len(res.Applied), "failed", len(errs))
	for _, s := range res.Applied {
		a.log.Info("reload: " + s)
	}
	if err := errors.Join(errs...); err != nil {
		a.log.Error("reload: some changes failed", "err", err)
		return res, fmt.Errorf("the file is reloaded, but: %w", err)
	}
	return res, nil
}

// inForce is the configuration the agent runs now: the one in force with
// the networks as they are attached.
func (a *Agent) inForce() *config.Agent {
	c := *a.cfg
	c.Networks = nil
	for _, n := range a.netCfg {
		c.Networks = append(c.Networks, n)
	}
	sort.Slice(c.Networks, func(i, j int) bool { return c.Networks[i].ID < c.Networks[j].ID })
	return &c
}

// apply carries out one action of a reload plan (a replacement's first
// half: the old network goes).
func (a *Agent) apply(act reload.Action) error {
	switch act.Kind {
	case reload.RemoveNetwork, reload.ReplaceNetwork:
		delete(a.netCfg, act.Old.ID)
		a.closeNetwork(act.Old)
	case reload.AddNetwork:
		return a.openNetwork(act.New)
	case reload.SetLimits:
		a.netCfg[act.New.ID] = act.New
		a.shaper.Set(act.New.ID, edge.Limits{MaxBps: float64(act.New.MaxRate), MinBps: float64(act.New.MinRate)})
		if p := a.engine.Port(act.New.ID); p != nil && p.Flood != nil {
			p.Flood.SetRate(act.New.FloodRate)
		}
	case reload.SetEgress:
		a.shaper.SetSite(float64(act.Rate))
	case reload.SetUnderlayMTU:
		a.updateMSS()
	case reload.RotateKey:
		return a.rotateFromFiles()
	case reload.AddPeer, reload.RemovePeer:
		return a.changePeer(act)
	case reload.SetBulk:
		a.engine.SetFlowConfig(flowConfig(act.Bulk))
	}
	return nil
}

// changePeer admits or removes a peer of the configuration, on the
// control loop: a site added to the file joins without a restart, and one
// removed from it is refused from now on (when listed with its key).
func (a *Agent) changePeer(act reload.Action) error {
	cp := act.NewPeer
	if act.Kind == reload.RemovePeer {
		cp = act.OldPeer
	}
	p := site.Peer{ID: wire.SiteIDFromName(cp.Name)}
	if cp.Address != "" {
		addr, err := netip.ParseAddrPort(cp.Address)
		if err != nil {
			return fmt.Errorf("peer %s: %w", cp.Name, err)
		}
		p.Addr = addr
	}
	if cp.PublicKey != "" && a.sec != nil {
		key, err := keys.ParsePublic(cp.PublicKey)
		if err != nil {
			return fmt.Errorf("peer %s: %w", cp.Name, err)
		}
		p.Key = key
	}
	now := a.clock.Now()
	var err error
	if act.Kind == reload.AddPeer {
		err = a.core.AddPeer(now, p)
	} else {
		err = a.core.RemovePeer(now, p)
	}
	a.flush()
	return err
}

// rotateFromFiles gives the site the private key of the configuration in
// force and the certificate in its trust.certificate_file (both read
// again by the reload, which checked them first), on the control loop.
func (a *Agent) rotateFromFiles() error {
	priv, cert, err := rotation(a.cfg)
	if err != nil {
		return err
	}
	if err := a.core.Rotate(a.clock.Now(), priv, cert); err != nil {
		return fmt.Errorf("trust.certificate_file: %w", err)
	}
	a.flush()
	a.log.Info("key rotated", "public_key", priv.Public().String())
	return nil
}

// rotation reads the private key and the certificate a configuration
// names and checks that the certificate is the CA's, unexpired, and for
// this site and this key.
func rotation(cfg *config.Agent) (keys.PrivateKey, []byte, error) {
	priv, err := keys.ParsePrivate(cfg.PrivateKey)
	if err != nil {
		return priv, nil, fmt.Errorf("private key: %w", err)
	}
	sec := site.Secure{Private: priv}
	if err := addTrust(cfg, &sec, time.Now()); err != nil {
		return priv, nil, err
	}
	return priv, sec.Certificate, nil
}

// openNetwork opens a network's device and starts carrying its frames.
func (a *Agent) openNetwork(n config.Network) error {
	p, err := a.openPort(n)
	if err != nil {
		return err
	}
	if err := a.engine.AddPort(p); err != nil {
		p.Dev.Close()
		return err
	}
	a.shaper.Set(n.ID, edge.Limits{MaxBps: float64(n.MaxRate), MinBps: float64(n.MinRate)})
	a.netCfg[n.ID] = n
	a.log.Info("network attached", "name", n.Name, "id", n.ID, "tap", n.TAP)
	return nil
}
