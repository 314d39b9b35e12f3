package site

import "github.com/detour-overlay/detour/internal/wire"

// Counters returns the core's counters by name: route switches and
// computations, control messages and bytes by type and direction, the
// control node's drops by kind and, when sealed, the session node's and
// the sealing layer's counters.
func (c *Core) Counters() map[string]uint64 {
	cc := c.node.Counters()
	out := map[string]uint64{"route_switches": cc.Switches, "route_computations": cc.Refreshes, "route_computation_us": cc.RefreshMicros,
		"probe_bytes": cc.ProbeBytes, "trains_sent": cc.TrainsSent, "train_packets_in": cc.TrainPacketsIn, "train_reports": cc.TrainReports,
		"late_wakes": cc.LateWakes, "late_wake_ms": cc.LateWakeMs,
		"inband_reports_sent": cc.InbandReportsSent, "inband_unplaced": cc.InbandUnplaced, "inband_samples": cc.InbandSamples,
		"confirm_probes": cc.ConfirmProbes}
	for t := range cc.In {
		name := wire.Type(t).String()
		if cc.In[t].Packets > 0 || cc.Out[t].Packets > 0 {
			out["control_in_packets_"+name] = cc.In[t].Packets
			out["control_in_bytes_"+name] = cc.In[t].Bytes
			out["control_out_packets_"+name] = cc.Out[t].Packets
			out["control_out_bytes_"+name] = cc.Out[t].Bytes
		}
	}
	for kind, v := range cc.DroppedByKind() {
		out["control_drop_"+kind] = v
	}
	c.kv.counters(out)
	if c.sec != nil {
		for k, v := range c.sec.counters() {
			out[k] = v
		}
	}
	return out
}
