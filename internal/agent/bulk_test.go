package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/device"
)

// TestBulkConfigReachesDataPathAndRouting: the bulk section sets the data
// path's flow classes and the routing's bulk bounds at start, and a
// reload changes the threshold and DSCP marks live but refuses a new
// latency bound.
func TestBulkConfigReachesDataPathAndRouting(t *testing.T) {
	const base = "site: fujisawa\nlisten: 198.18.0.1:4800\napi: 127.0.0.1:0\nnetworks:\n  - {name: default, id: 1, tap: detour0}\n"
	a, write := agentFromFile(t, base+"bulk:\n  threshold: 2MB\n  latency_bound: 4ms\n", map[uint32]device.Device{1: device.NewFake("detour0", 1400, 64)})
	if fc := a.engine.FlowConfig(); !fc.Enabled || fc.Threshold != 2_000_000 || fc.DSCP != 0 || fc.Idle != config.DefaultBulkIdle {
		t.Errorf("data path flow config %+v", fc)
	}
	if rc := a.controlConfig().Routing.Bulk; !rc.Enabled || rc.Bound != 4*time.Millisecond || rc.BoundFraction != config.DefaultBulkBoundFraction || rc.MinGain != config.DefaultBulkMinGain {
		t.Errorf("routing bulk config %+v", rc)
	}
	write(base + "bulk:\n  threshold: 1MB\n  dscp: [8, 10]\n  latency_bound: 4ms\n")
	if _, err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if fc := a.engine.FlowConfig(); fc.Threshold != 1_000_000 || fc.DSCP != 1<<8|1<<10 {
		t.Errorf("after the reload: %+v", fc)
	}
	write(base + "bulk:\n  threshold: 1MB\n  dscp: [8, 10]\n  latency_bound: 9ms\n")
	if _, err := a.Reload(); err == nil || !strings.Contains(err.Error(), "bulk.enabled, latency_bound") || !strings.Contains(err.Error(), "restart") {
		t.Errorf("a new latency bound: %v", err)
	}
}
