package runstate

import (
	"fmt"
	"slices"

	"github.com/detour-overlay/detour/internal/config"
)

// Merge applies a document to the configuration file's settings and
// returns the configuration in force, the document cleaned of what no
// longer applies, and a note for each thing dropped (for the log). The
// rules, which keep the more recent act:
//
//   - a document of another site is ignored whole;
//   - a network attached at run time replaces the file's network of the
//     same name; one whose id is a file network's under another name is
//     dropped (the file names that id now);
//   - a detached network the file no longer has is forgotten;
//   - limits of a network that is not in force are forgotten;
//   - when the merged configuration is not valid (a TAP device or a
//     guaranteed rate in conflict with the file), the document's networks,
//     limits and egress rate are dropped and the file's stand.
//
// Pins and forbidden relays are kept as they are: the sites they name may
// join later, and the agent applies them as they do.
func Merge(file *config.Agent, d *Doc) (*config.Agent, *Doc, []string) {
	var notes []string
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	kept := d.Clone()
	if kept.Site != file.Site {
		note("the run-time state is site %q's, not %q's: ignored", kept.Site, file.Site)
		kept = New(file.Site)
	}
	eff, kept := mergeNetworks(file, kept, note)
	if err := eff.Validate(); err != nil {
		note("the run-time networks, limits and egress rate conflict with the file and are dropped: %v", err)
		kept.Attached, kept.Detached, kept.Limits, kept.Egress = nil, nil, nil, nil
		eff, kept = mergeNetworks(file, kept, note)
	}
	return eff, kept, notes
}

// mergeNetworks builds the configuration in force from file and d,
// dropping from d what does not apply.
func mergeNetworks(file *config.Agent, d *Doc, note func(string, ...any)) (*config.Agent, *Doc) {
	eff := *file
	eff.Networks = nil
	fileNames := map[string]bool{}
	for _, n := range file.Networks {
		fileNames[n.Name] = true
	}
	d.Detached = slices.DeleteFunc(d.Detached, func(name string) bool {
		if !fileNames[name] {
			note("network %q was detached at run time and is no longer in the file: forgotten", name)
			return true
		}
		return false
	})
	replaced := map[string]bool{}
	for _, n := range d.Attached {
		replaced[n.Name] = true
	}
	for _, n := range file.Networks {
		if !slices.Contains(d.Detached, n.Name) && !replaced[n.Name] {
			eff.Networks = append(eff.Networks, n)
		}
	}
	d.Attached = slices.DeleteFunc(d.Attached, func(a Network) bool {
		for _, n := range file.Networks {
			if n.ID == a.ID && n.Name != a.Name && !slices.Contains(d.Detached, n.Name) {
				note("network %q (id %d) attached at run time: the file now gives id %d to network %q; dropped", a.Name, a.ID, a.ID, n.Name)
				return true
			}
		}
		return false
	})
	for _, a := range d.Attached {
		eff.Networks = append(eff.Networks, a.Config())
	}
	for name, l := range d.Limits {
		i := slices.IndexFunc(eff.Networks, func(n config.Network) bool { return n.Name == name })
		if i < 0 || replaced[name] {
			note("rate limits of network %q, which is not in force: forgotten", name)
			delete(d.Limits, name)
			continue
		}
		eff.Networks[i].MaxRate, eff.Networks[i].MinRate = l.MaxRate, l.MinRate
	}
	if d.Egress != nil {
		eff.EgressRate = *d.Egress
	}
	return &eff, d
}

// Rebase keeps the more recent act after a reload from file old to file
// new: what the new file changes about a network (added, removed or
// altered), or about the egress rate, replaces what the document said
// about it. It returns a note for each thing dropped.
func (d *Doc) Rebase(old, new *config.Agent) []string {
	var notes []string
	names := map[string]bool{}
	for _, n := range old.Networks {
		names[n.Name] = true
	}
	for _, n := range new.Networks {
		names[n.Name] = true
	}
	for name := range names {
		o, inOld := fileNetwork(old, name)
		n, inNew := fileNetwork(new, name)
		if inOld == inNew && o == n {
			continue
		}
		if d.mentions(name) {
			notes = append(notes, fmt.Sprintf("network %q changed in the file: its run-time changes are replaced by the file", name))
			d.drop(name)
		}
	}
	if old.EgressRate != new.EgressRate && d.Egress != nil {
		notes = append(notes, "egress_rate changed in the file: the run-time egress rate is replaced by the file")
		d.Egress = nil
	}
	slices.Sort(notes)
	return notes
}

// mentions reports whether the document says anything about a network.
func (d *Doc) mentions(name string) bool {
	_, lim := d.Limits[name]
	return lim || slices.Contains(d.Detached, name) ||
		slices.ContainsFunc(d.Attached, func(n Network) bool { return n.Name == name })
}
