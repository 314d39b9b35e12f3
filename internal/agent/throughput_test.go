package agent

import (
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/transport"
)

// TestAgentsMeasureThroughput: agents send packet trains at once (their
// probe bytes show in the status), answer them with reports, report the
// rates in the link matrix, and count the data received per previous hop
// for the passive estimates.
func TestAgentsMeasureThroughput(t *testing.T) {
	nw := transport.NewFakeNetwork()
	sites := startAgents(t, nw, false, "alpha", "beta")
	waitMembers(t, sites)
	deadline := time.Now().Add(15 * time.Second) // a second train, if the first was lost, goes 10 s later
	for {
		st := sites[0].a.Status()
		rated := 0
		for _, l := range sites[1].a.Links() {
			if l.RateMbps > 0 && l.RateKind == "train" {
				rated++
			}
		}
		if st.ProbeBytes > 0 && st.Counters["train_reports"] > 0 && rated == 2 {
			if st.ProbeBudgetBytesPerSecond != 32000 || st.Counters["probe_bytes"] != st.ProbeBytes {
				t.Fatalf("status: budget %d, probe bytes %d and %d", st.ProbeBudgetBytesPerSecond, st.ProbeBytes, st.Counters["probe_bytes"])
			}
			break
		}
		if time.Now().After(deadline) {
			for _, l := range sites[0].a.Links() {
				t.Logf("at alpha: %s→%s %.0f %s", l.From, l.To, l.RateMbps, l.RateKind)
			}
			t.Fatalf("after 15 s: alpha's probe bytes %d, reports %d; beta knows the rate of %d links: %+v", st.ProbeBytes,
				st.Counters["train_reports"], rated, sites[1].a.Links())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A frame from alpha to beta's host is counted at beta under alpha.
	uni := ethernet(0xb, 0xa, "to beta")
	sites[1].dev.Inject(ethernet(0xff, 0xb, "beta's host is here"))
	receive(t, sites[0], ethernet(0xff, 0xb, "beta's host is here"))
	sites[0].dev.Inject(uni)
	receive(t, sites[1], uni)
	alpha := sites[0].a.core.Control().ID()
	for _, c := range sites[1].a.engine.Stats().Peers.Snapshot(nil) {
		if c.Site == alpha && c.Bytes > 0 && c.Packets > 0 {
			return
		}
	}
	t.Fatalf("beta counted nothing from alpha: %+v", sites[1].a.engine.Stats().Peers.Snapshot(nil))
}
