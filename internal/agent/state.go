package agent

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/runstate"
)

// The run-time state: every change the API makes (networks, limits, the
// egress rate, pins, forbidden relays) is recorded in a runstate.Doc,
// which is saved to the state file before the API answers. The document
// belongs to the control loop.

// loadState reads the state file and merges it with the configuration
// file: a.file keeps the file's configuration, a.cfg becomes the one in
// force. Pins and forbidden relays wait in a.pendPins and a.pendForbid
// until the sites they name are members.
func (a *Agent) loadState(path string) error {
	a.file = a.cfg
	if path == "" {
		a.state = runstate.New(a.cfg.Site)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("run-time state: %w (give --state a writable place)", err)
	}
	a.store = runstate.NewStore(path)
	doc, err := a.store.Load(a.cfg.Site)
	if err != nil {
		return fmt.Errorf("run-time state: %w (move the file away to start from the configuration alone)", err)
	}
	eff, kept, notes := runstate.Merge(a.cfg, doc)
	for _, n := range notes {
		a.log.Warn("run-time state: " + n)
	}
	if len(notes) > 0 {
		if err := a.store.Save(kept); err != nil {
			return err
		}
	}
	a.state, a.cfg = kept, eff
	a.pendPins = maps.Clone(kept.Pins)
	a.pendForbid = slices.Clone(kept.Forbidden)
	a.log.Info("run-time state", "file", path, "networks", len(kept.Attached), "detached", len(kept.Detached),
		"limits", len(kept.Limits), "pins", len(kept.Pins), "forbidden", len(kept.Forbidden))
	return nil
}

// record applies change to a copy of the run-time state and saves it; the
// copy becomes the state only once it is on disk, so that an answer to
// the API always follows a durable write. It runs on the control loop.
func (a *Agent) record(change func(d *runstate.Doc)) error {
	if change == nil {
		return nil // a change the state file does not hold (yet)
	}
	d := a.state.Clone()
	change(d)
	if a.store != nil {
		if err := a.store.Save(d); err != nil {
			a.log.Error("run-time state not saved", "file", a.store.Path, "err", err)
			return fmt.Errorf("the change is in force but could not be stored, so a restart would lose it: %w", err)
		}
	}
	a.state = d
	return nil
}

// applyPending applies the pins and forbidden relays of the state file
// whose sites have joined. It runs on the control loop, and is cheap when
// nothing is pending.
func (a *Agent) applyPending(now time.Time) {
	if len(a.pendPins) == 0 && len(a.pendForbid) == 0 {
		return
	}
	a.pendForbid = slices.DeleteFunc(a.pendForbid, func(s string) bool {
		return a.core.ForbidRelay(now, s) == nil
	})
	for dest, path := range a.pendPins {
		if a.core.Pin(now, dest, path) == nil {
			delete(a.pendPins, dest)
		}
	}
}

// pending lists the overrides still waiting for their sites, for status.
func (a *Agent) pending() []string {
	var out []string
	for dest := range a.pendPins {
		out = append(out, "pin "+dest)
	}
	for _, s := range a.pendForbid {
		out = append(out, "forbid "+s)
	}
	sort.Strings(out)
	return out
}

// limitsOf is the state's form of a network's limits.
func limitsOf(n config.Network) runstate.Limits {
	return runstate.Limits{MaxRate: n.MaxRate, MinRate: n.MinRate}
}
