// Package reload compares two configurations of a site's agent and says
// what a reload must do: the actions that apply the new one to a running
// agent (networks added, removed or replaced, rate limits, the egress
// rate, the underlay MTU, the peers, the site's key under an overlay CA),
// and the fields that only a restart can change.
// It is pure: the agent carries out the plan.
package reload

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/detour-overlay/detour/internal/config"
)

// Kind is what an action does.
type Kind int

// The actions, in the order a plan lists them: removals first, so that a
// TAP name or an id freed by one network can be taken by another.
const (
	RemoveNetwork  Kind = iota // stop carrying Old and remove its device
	ReplaceNetwork             // Old and New differ in more than rates: reopen the device
	AddNetwork                 // open New's device and carry its frames
	SetLimits                  // New's max_rate, min_rate and flood_rate
	SetEgress                  // the site's egress rate
	SetUnderlayMTU             // the fallback underlay MTU
	RotateKey                  // a new private key with its certificate (trust.certificate_file)
	RemovePeer                 // OldPeer leaves the accepted set and the bootstrap addresses
	AddPeer                    // NewPeer joins them and is greeted at once
	SetBulk                    // the data path's flow classes: bulk.threshold, dscp, idle_timeout
)

var kindNames = [...]string{"remove network", "replace network", "add network", "set limits", "set egress_rate", "set underlay_mtu", "rotate key", "remove peer", "add peer", "set bulk"}

func (k Kind) String() string { return kindNames[k] }

// Action is one step of a plan.
type Action struct {
	Kind     Kind
	Old, New config.Network // the network's old and new settings
	Rate     config.Rate    // SetEgress
	MTU      int            // SetUnderlayMTU
	// Certificate is the file holding the new key's certificate
	// (RotateKey).
	Certificate string
	// OldPeer and NewPeer are the peer removed or added.
	OldPeer, NewPeer config.Peer
	// Bulk is the new bulk section (SetBulk).
	Bulk config.Bulk
}

// describePeer names a peer with what the plan does with it.
func describePeer(p config.Peer) string {
	s := p.Name
	if p.Address != "" {
		s += " at " + p.Address
	}
	if p.PublicKey != "" {
		s += " (key " + p.PublicKey[:min(8, len(p.PublicKey))] + "...)"
	}
	return s
}

// String describes the action for the log and the operator.
func (a Action) String() string {
	switch a.Kind {
	case RemoveNetwork:
		return fmt.Sprintf("remove network %s (id %d)", a.Old.Name, a.Old.ID)
	case ReplaceNetwork:
		return fmt.Sprintf("replace network %s (id %d, tap %s) with id %d, tap %s", a.Old.Name, a.Old.ID, a.Old.TAP, a.New.ID, a.New.TAP)
	case AddNetwork:
		return fmt.Sprintf("add network %s (id %d, tap %s)", a.New.Name, a.New.ID, a.New.TAP)
	case SetLimits:
		return fmt.Sprintf("set limits of network %s: max_rate %v, min_rate %v, flood_rate %d", a.New.Name, a.New.MaxRate, a.New.MinRate, a.New.FloodRate)
	case SetEgress:
		return fmt.Sprintf("set egress_rate %v", a.Rate)
	case SetUnderlayMTU:
		return fmt.Sprintf("set underlay_mtu %d", a.MTU)
	case RotateKey:
		return fmt.Sprintf("rotate the site's key (certificate %s)", a.Certificate)
	case RemovePeer:
		return "remove peer " + describePeer(a.OldPeer)
	case AddPeer:
		return "add peer " + describePeer(a.NewPeer)
	case SetBulk:
		return fmt.Sprintf("set bulk: threshold %v, dscp %v, idle_timeout %v", a.Bulk.Threshold, a.Bulk.DSCP, a.Bulk.IdleTimeout)
	}
	return "?"
}

// Plan is what a reload does.
type Plan struct {
	Actions []Action
	// Restart names the fields (as in the YAML file) that changed but
	// that the running agent cannot change; a plan with any is refused.
	Restart []string
}

// Err is nil when the plan can be carried out live, or says which fields
// need a restart.
func (p Plan) Err() error {
	if len(p.Restart) == 0 {
		return nil
	}
	var why []string
	for _, f := range p.Restart {
		if r, ok := restartWhy[strings.Fields(f)[0]]; ok {
			why = append(why, f+": "+r)
		}
	}
	msg := fmt.Sprintf("%s changed: the running agent cannot change %s; restart it (systemctl restart detour) to apply the file, or undo the change and reload",
		strings.Join(p.Restart, ", "), plural(len(p.Restart)))
	if len(why) > 0 {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	return errors.New(msg)
}

// restartWhy explains the fields an operator most expects a reload to
// apply.
var restartWhy = map[string]string{
	"probe_interval":   "failure detection is set up at start",
	"max_probe_rate":   "failure detection is set up at start",
	"measurement":      "every site of an overlay must use the same scheme: change it on all of them and restart them",
	"private_key_file": rotateWhy,
	"private_key":      rotateWhy,
	"bulk.enabled,": "the control plane's routing is configured at start; " +
		"bulk.threshold, dscp and idle_timeout are applied live",
}

// rotateWhy says when a reload can change the site's key.
const rotateWhy = "the members hold this site's key in their peer lists; " +
	"with an overlay CA (trust) a reload rotates the key, given a certificate for the new one"

func plural(n int) string {
	if n == 1 {
		return "this field"
	}
	return "these fields"
}

// live are the fields a reload applies: compared action by action, not as
// a whole.
var live = map[string]bool{"networks": true, "egress_rate": true, "underlay_mtu": true, "peers": true,
	// The agent distributes the pools the file changed as new versions
	// (docs/kv.md), so kv_pools are applied live too.
	"kv_pools": true,
	// The data path's part of bulk is live; its routing part is checked
	// in Diff.
	"bulk": true}

// Diff returns the plan that takes a running agent from old to new. Both
// must be valid configurations with defaults applied.
func Diff(old, new *config.Agent) Plan {
	var p Plan
	p.Restart = restartFields(old, new)
	p.Actions = networkActions(old.Networks, new.Networks)
	if old.EgressRate != new.EgressRate {
		p.Actions = append(p.Actions, Action{Kind: SetEgress, Rate: new.EgressRate})
	}
	if old.UnderlayMTU != new.UnderlayMTU {
		p.Actions = append(p.Actions, Action{Kind: SetUnderlayMTU, MTU: new.UnderlayMTU})
	}
	if rotates(old, new) {
		p.Actions = append(p.Actions, Action{Kind: RotateKey, Certificate: new.Trust.CertificateFile})
	}
	p.Actions = append(p.Actions, peerActions(old.Peers, new.Peers)...)
	if !old.Bulk.SameRouting(&new.Bulk) {
		p.Restart = append(p.Restart, "bulk.enabled, latency_bound, latency_bound_fraction or min_gain")
	}
	if !reflect.DeepEqual(old.Bulk, new.Bulk) {
		p.Actions = append(p.Actions, Action{Kind: SetBulk, Bulk: new.Bulk})
	}
	sort.SliceStable(p.Actions, func(i, j int) bool { return p.Actions[i].Kind < p.Actions[j].Kind })
	return p
}

// restartFields lists the top-level fields, other than the live ones,
// that differ. Peers are among them: the accepted keys are fixed for a
// session node's life, and the control node's bootstrap list for the
// control node's.
func restartFields(old, new *config.Agent) []string {
	var out []string
	ov, nv := reflect.ValueOf(*old), reflect.ValueOf(*new)
	t := ov.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || live[name] {
			continue
		}
		if name == "private_key" && rotates(old, new) {
			continue
		}
		if name == "private_key" && old.PrivateKeyFile != "" {
			name = "private_key_file (its contents)"
		}
		if !reflect.DeepEqual(ov.Field(i).Interface(), nv.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	return out
}

// rotates reports whether a reload from old to new is a key rotation: the
// private key changed while the site is admitted by certificate under the
// same CA, with the same trust section, so the members accept the new key
// on the new certificate. Without a CA the other sites hold the old key in
// their peer lists, and a new key needs their configurations changed too.
func rotates(old, new *config.Agent) bool {
	return old.PrivateKey != new.PrivateKey && old.PrivateKey != "" && new.PrivateKey != "" &&
		old.Trust.Enabled() && old.Trust == new.Trust
}

// peerActions compares the peers by name: a peer whose address or key
// changed is removed and added again.
func peerActions(old, new []config.Peer) []Action {
	var out []Action
	byName := map[string]config.Peer{}
	for _, p := range old {
		byName[p.Name] = p
	}
	seen := map[string]bool{}
	for _, p := range new {
		seen[p.Name] = true
		o, ok := byName[p.Name]
		switch {
		case !ok:
			out = append(out, Action{Kind: AddPeer, NewPeer: p})
		case o != p:
			out = append(out, Action{Kind: RemovePeer, OldPeer: o}, Action{Kind: AddPeer, NewPeer: p})
		}
	}
	for _, o := range old {
		if !seen[o.Name] {
			out = append(out, Action{Kind: RemovePeer, OldPeer: o})
		}
	}
	return out
}

// networkActions compares the networks by name.
func networkActions(old, new []config.Network) []Action {
	var out []Action
	byName := map[string]config.Network{}
	for _, n := range old {
		byName[n.Name] = n
	}
	seen := map[string]bool{}
	for _, n := range new {
		seen[n.Name] = true
		o, ok := byName[n.Name]
		switch {
		case !ok:
			out = append(out, Action{Kind: AddNetwork, New: n})
		case o == n:
		case sameButRates(o, n):
			out = append(out, Action{Kind: SetLimits, Old: o, New: n})
		default:
			out = append(out, Action{Kind: ReplaceNetwork, Old: o, New: n})
		}
	}
	for _, o := range old {
		if !seen[o.Name] {
			out = append(out, Action{Kind: RemoveNetwork, Old: o})
		}
	}
	return out
}

// sameButRates reports whether two settings of a network differ only in
// what the shaper changes live.
func sameButRates(a, b config.Network) bool {
	a.MaxRate, a.MinRate, a.FloodRate = b.MaxRate, b.MinRate, b.FloodRate
	return a == b
}
