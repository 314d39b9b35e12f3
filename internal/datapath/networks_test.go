package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/transport"
	"github.com/detour-overlay/detour/internal/wire"
)

// twoSitesTwoNetworks builds sites 1 and 2, each attached to networks 10
// and 20, with overlapping host addresses in both networks.
func twoSitesTwoNetworks(t *testing.T) (engines [2]*Engine, devs [2]map[uint32]*device.Fake) {
	t.Helper()
	nw := transport.NewFakeNetwork()
	addrs := map[wire.SiteID]netip.AddrPort{1: netip.MustParseAddrPort("198.18.0.1:1"), 2: netip.MustParseAddrPort("198.18.0.2:1")}
	for i, id := range []wire.SiteID{1, 2} {
		devs[i] = map[uint32]*device.Fake{}
		var ports []*Port
		for _, n := range []uint32{10, 20} {
			devs[i][n] = device.NewFake("tap", 1400, 64)
			ports = append(ports, &Port{Network: n, Dev: devs[i][n], FDB: fdb.New(time.Minute)})
		}
		conn := nw.Listen(addrs[id])
		e := New(Config{Self: id, Conn: conn, Ports: ports, Now: func() int64 { return time.Now().UnixNano() }})
		other := 3 - id
		e.SetRoutes(staticRoutes(id, addrs, map[wire.SiteID][]wire.SiteID{other: {other}}))
		done := make(chan error, 1)
		go func() { done <- e.Run() }()
		d := devs[i]
		t.Cleanup(func() {
			conn.Close()
			for _, dev := range d {
				dev.Close()
			}
			<-done
		})
		engines[i] = e
	}
	return engines, devs
}

func expectOn(t *testing.T, d *device.Fake, want []byte) {
	t.Helper()
	select {
	case got := <-d.Out():
		if string(got) != string(want) {
			t.Fatalf("got %x, want %x", got, want)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("frame not delivered")
	}
}

func expectNothingOn(t *testing.T, d *device.Fake) {
	t.Helper()
	select {
	case got := <-d.Out():
		t.Fatalf("frame crossed networks: %x", got)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestNetworksAreIsolated(t *testing.T) {
	e, devs := twoSitesTwoNetworks(t)
	// The same host MAC (same IP, too, in a real overlap) in both networks.
	f10 := frame(0xff, 0xa, "network 10")
	f20 := frame(0xff, 0xa, "network 20")
	devs[0][10].Inject(f10)
	expectOn(t, devs[1][10], f10)
	expectNothingOn(t, devs[1][20])
	devs[0][20].Inject(f20)
	expectOn(t, devs[1][20], f20)
	expectNothingOn(t, devs[1][10])
	if s, ok := e[1].Port(10).FDB.Lookup(fdb.MAC{0xa, 0, 0, 0, 0, 0xa}, time.Now().UnixNano()); !ok || s != 1 {
		t.Errorf("network 10's FDB did not learn the host")
	}
}

func TestDetachAndAttachAtRunTime(t *testing.T) {
	e, devs := twoSitesTwoNetworks(t)
	p := e[1].RemovePort(20)
	if p == nil {
		t.Fatal("RemovePort found no port")
	}
	p.Dev.Close()
	devs[0][20].Inject(frame(0xff, 0xa, "to a detached network"))
	waitCount(t, &e[1].Stats().DropUnknownNetwork, 1)

	dev := device.NewFake("tap", 1400, 64)
	if err := e[1].AddPort(&Port{Network: 30, Dev: dev, FDB: fdb.New(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := e[1].AddPort(&Port{Network: 30, Dev: dev, FDB: fdb.New(time.Minute)}); err != ErrPortExists {
		t.Errorf("second AddPort: %v, want ErrPortExists", err)
	}
	dev30 := device.NewFake("tap", 1400, 64)
	if err := e[0].AddPort(&Port{Network: 30, Dev: dev30, FDB: fdb.New(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close(); dev30.Close() })
	f := frame(0xff, 0xa, "new network")
	dev30.Inject(f)
	expectOn(t, dev, f)
}
