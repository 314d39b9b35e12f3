package agent

import (
	"net"
	"sort"

	"github.com/detour-overlay/detour/internal/api"
)

// floodLoops lists the networks with a flooding loop now, for status.
func (a *Agent) floodLoops() []api.FloodLoop {
	var out []api.FloodLoop
	now := a.clock.Mono()
	for _, p := range a.engine.Ports() {
		if p.Flood == nil {
			continue
		}
		active, n, src := p.Flood.LoopReport(now)
		if active {
			out = append(out, api.FloodLoop{Network: a.netCfg[p.Network].Name, Source: net.HardwareAddr(src[:]).String(), Loops: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Network < out[j].Network })
	return out
}

// reportLoops logs each loop that began since the last call. It runs on
// the control loop.
func (a *Agent) reportLoops() {
	if a.loopsSeen == nil {
		a.loopsSeen = map[uint32]uint64{}
	}
	for _, l := range a.floodLoops() {
		id := a.networkID(l.Network)
		if l.Loops == a.loopsSeen[id] {
			continue
		}
		a.loopsSeen[id] = l.Loops
		a.log.Error("flooding loop: frames flooded to the overlay come back through this site's bridge; the looping frames are no longer flooded (check the bridge for a second path to another site's segment)",
			"network", l.Network, "source", l.Source, "loops", l.Loops)
	}
}

func (a *Agent) networkID(name string) uint32 {
	n, _ := a.networkByName(name)
	return n.ID
}
