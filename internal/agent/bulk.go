package agent

import (
	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/routing"
)

// bulkRouting is the routing's part of the bulk section: how the bulk
// path per destination is chosen.
func bulkRouting(b config.Bulk) routing.BulkConfig {
	return routing.BulkConfig{Enabled: b.On(), Bound: b.LatencyBound, BoundFraction: b.LatencyBoundFraction, MinGain: b.MinGain}
}

// flowConfig is the data path's part of the bulk section: which flows
// are bulk.
func flowConfig(b config.Bulk) datapath.FlowConfig {
	c := datapath.FlowConfig{Enabled: b.On(), Threshold: uint64(max(b.Threshold, 0)), Idle: b.IdleTimeout}
	for _, d := range b.DSCP {
		c.DSCP |= 1 << uint(d&63)
	}
	return c
}
