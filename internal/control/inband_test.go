package control

import (
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/wire"
)

// TestOnInbandPlacesStampsByTheLastProbe: the stamps of a member's data
// packets are sent back to it as delays on the scale of its probes (the
// last probe's t2 − t1, with the clocks 5 s apart); before any probe from
// it, or when its last probe is too old, they cannot be placed and are
// counted.
func TestOnInbandPlacesStampsByTheLastProbe(t *testing.T) {
	n := newNode(t)
	peer := addPeer(t, n, "seoul", netip.MustParseAddrPort("10.0.0.2:4789"))
	const offset = -5 * time.Second // the member's clock less ours
	now := t0.Add(time.Second)
	// Stamps of packets sent at 'sent' on the member's clock and received
	// at now on ours, 20 ms and 45 ms later.
	sent := now.Add(offset - 20*time.Millisecond)
	rels := []uint16{
		wire.StampOf(now.UnixNano()) - wire.StampOf(sent.UnixNano()),
		wire.StampOf(now.UnixNano()) - wire.StampOf(sent.Add(-25*time.Millisecond).UnixNano()),
	}
	n.OnInband(now, peer.ID, rels)
	if c := n.Counters(); c.InbandUnplaced != 2 || c.InbandReportsSent != 0 {
		t.Fatalf("before any probe: %d unplaced, %d reports; want 2 and 0", c.InbandUnplaced, c.InbandReportsSent)
	}
	probe := wire.AppendProbe(nil, &wire.Probe{Sender: peer.ID, Receiver: n.ID(), Seq: 1,
		SendTime: now.Add(offset - 20*time.Millisecond).UnixNano()})
	if err := n.Receive(now, peer.Addr, probe); err != nil {
		t.Fatal(err)
	}
	n.Outbox()
	n.OnInband(now, peer.ID, rels)
	var got []int64
	for _, o := range n.Outbox() {
		var r wire.Inband
		if wire.ParseInband(o.Payload, &r) == nil && o.To == peer.Addr && r.Receiver == peer.ID {
			got = append(got, r.Values()...)
		}
	}
	want := []time.Duration{20 * time.Millisecond, 45 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("reported %v, want %d samples", got, len(want))
	}
	for i, w := range want {
		// The stamps' units are 32.8 µs.
		if d := time.Duration(got[i]) + offset - w; d.Abs() > 66*time.Microsecond {
			t.Errorf("sample %d: %v off the %v delay", i, d, w)
		}
	}
	n.OnInband(now.Add(inbandNear+time.Second), peer.ID, rels)
	if c := n.Counters(); c.InbandUnplaced != 4 {
		t.Errorf("with the last probe %v old: %d unplaced, want 4", inbandNear+time.Second, c.InbandUnplaced)
	}
}
