package datapath

import (
	"sync/atomic"
	"testing"
	"time"

	ethframe "github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// arpRequest is a host's broadcast ARP request for 10.0.0.9.
func arpRequest(host byte) []byte {
	b := make([]byte, ethframe.EtherHeaderLen+ethframe.ARPLen)
	mac := []byte{2, 0, 0, 0, 0, host}
	l := ethframe.PutEthernet(b, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, mac, false, 0, ethframe.EtherTypeARP)
	ethframe.PutARP(b[l:], ethframe.ARPRequest, mac, []byte{10, 0, 0, host}, make([]byte, 6), []byte{10, 0, 0, 9})
	return b
}

// startingSites builds sites 1, 2 and 3 on a fake network, all three with
// routes to one another but site 1, which has none yet (it has just
// started) and whose clock is now.
func startingSites(t *testing.T, now *atomic.Int64) (a, b, c *site, routes func(dsts ...wire.SiteID)) {
	t.Helper()
	nw := transport.NewFakeNetwork()
	ids, addrs := threeAddrs()
	sites := make([]*site, 3)
	for i, id := range ids {
		if id == 1 {
			sites[i] = runSite(t, nw, addrs, id, nil, now.Load, nil)
			continue
		}
		sites[i] = runSite(t, nw, addrs, id, nil, func() int64 { return time.Now().UnixNano() }, staticRoutes(id, addrs, directPaths(id, ids)))
	}
	routes = func(dsts ...wire.SiteID) {
		paths := map[wire.SiteID][]wire.SiteID{}
		for _, d := range dsts {
			paths[d] = []wire.SiteID{d}
		}
		sites[0].eng.SetRoutes(staticRoutes(1, addrs, paths))
	}
	return sites[0], sites[1], sites[2], routes
}

// TestNeighbourQueryReachesSitesReachableLater: an ARP request a host of a
// site sends before the site has routes reaches every site as its route
// appears, each once, within stashAge of the request; a broadcast that
// is no neighbour query does not, nor a query older than stashAge.
func TestNeighbourQueryReachesSitesReachableLater(t *testing.T) {
	var now atomic.Int64
	now.Store(1e9)
	a, b, c, routes := startingSites(t, &now)
	arp := arpRequest(0xa)
	other := frame(0xff, 0xa, "not a neighbour query")
	a.dev.Inject(arp)
	a.dev.Inject(other)
	time.Sleep(50 * time.Millisecond) // both read and flooded to nobody
	expectNone(t, b)

	routes(2)
	expect(t, b, arp)
	expectNone(t, b)
	expectNone(t, c)

	now.Add(stashAge / 2)
	routes(2, 3)
	expect(t, c, arp)
	expectNone(t, b) // it had it
	expectNone(t, c)
	if n := a.eng.Stats().FloodReplayed.Load(); n != 2 {
		t.Errorf("%d copies replayed, want 2", n)
	}

	// A second request, forgotten once older than stashAge.
	arp2 := arpRequest(0xb)
	routes()
	a.dev.Inject(arp2)
	time.Sleep(50 * time.Millisecond)
	now.Add(stashAge)
	routes(2, 3)
	expectNone(t, b)
	expectNone(t, c)
	if n := a.eng.Port(testNet).stashed.Load(); n != 0 {
		t.Errorf("%d queries still stashed", n)
	}
}

// arpReply is a host's ARP reply to the request of arpRequest(asker).
func arpReply(host, asker byte) []byte {
	b := make([]byte, ethframe.EtherHeaderLen+ethframe.ARPLen)
	mac, to := []byte{2, 0, 0, 0, 0, host}, []byte{2, 0, 0, 0, 0, asker}
	l := ethframe.PutEthernet(b, to, mac, false, 0, ethframe.EtherTypeARP)
	ethframe.PutARP(b[l:], ethframe.ARPReply, mac, []byte{10, 0, 0, 9}, to, []byte{10, 0, 0, asker})
	return b
}

// TestNeighbourAnswerWaitsForItsRoute: the answer of a host at a site
// without a route to the asking site yet reaches it when the route
// appears, within stashAge; other unicast frames are not kept.
func TestNeighbourAnswerWaitsForItsRoute(t *testing.T) {
	var now atomic.Int64
	now.Store(1e9)
	a, b, _, routes := startingSites(t, &now)
	ask := arpRequest(0xb)
	b.dev.Inject(ask) // a learns where 02:00:00:00:00:0b lives
	expect(t, a, ask)
	reply := arpReply(0xa, 0xb)
	data := frame(0xb, 0xa, "not a neighbour answer")
	data[0], data[5] = 2, 0xb // to the same host
	a.dev.Inject(reply)
	a.dev.Inject(data)
	time.Sleep(50 * time.Millisecond)
	expectNone(t, b)
	routes(2)
	expect(t, b, reply)
	expectNone(t, b)
	if n := a.eng.Port(testNet).stashed.Load(); n != 0 {
		t.Errorf("%d frames still stashed after the answer went", n)
	}
}
