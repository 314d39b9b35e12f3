package agent

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/fdb"
	"github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/replica"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/routing"
	"github.com/detour-overlay/detour/internal/wire"
)

// kvRoutes is a routing snapshot in which the sites of up are reachable.
type kvRoutes struct{ up map[wire.SiteID]bool }

func (r kvRoutes) Lookup(dst wire.SiteID) (*routing.Route, bool) {
	if !r.up[dst] {
		return nil, false
	}
	return &routing.Route{Dest: dst, Path: []wire.SiteID{dst}, OneWayEstimate: 5 * time.Millisecond}, true
}
func (kvRoutes) Addr(wire.SiteID) (netip.AddrPort, bool) { return netip.AddrPort{}, false }
func (kvRoutes) Sites() []wire.SiteID                    { return nil }

func kvTestServers(t *testing.T) (*router.Table, *device.Fake, []*kvServer) {
	t.Helper()
	lan, man := wire.SiteIDFromName("lan"), wire.SiteIDFromName("man")
	tb, err := router.New(router.Spec{Self: lan, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []router.PoolSpec{{
		Name: "cache", VIP: netip.MustParseAddrPort("10.20.0.250:11211"), Servers: []router.ServerSpec{
			{Addr: netip.MustParseAddrPort("10.20.0.11:11211"), Site: lan},
			{Addr: netip.MustParseAddrPort("10.20.0.12:11211"), Site: man},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	dev := device.NewFake("tap", 1400, 64)
	port := &datapath.Port{Network: 1, Dev: dev, FDB: fdb.New(time.Minute)}
	port.KV.Store(tb)
	var out []*kvServer
	p := tb.Pools()[0]
	for _, s := range p.Servers {
		out = append(out, &kvServer{s: s, port: port, pool: p, retry: kvRetryMin})
	}
	return tb, dev, out
}

func written(t *testing.T, dev *device.Fake) []byte {
	t.Helper()
	select {
	case b := <-dev.Out():
		return b
	case <-time.After(time.Second):
		t.Fatal("nothing written to the device")
		return nil
	}
}

// TestKVHealthChecks follows a local server through ARP, health checks,
// its death and its return.
func TestKVHealthChecks(t *testing.T) {
	tb, dev, servers := kvTestServers(t)
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	ks := servers[0]
	s := ks.s
	routes := kvRoutes{up: map[wire.SiteID]bool{wire.SiteIDFromName("man"): true}}
	now := int64(time.Second)
	a.kvWatch(ks, routes, now, true)
	arp := written(t, dev)
	req, err := frame.ParseARP(arp[14:])
	sip := s.IP()
	if err != nil || req.Op() != frame.ARPRequest || !bytes.Equal(req.TargetIP(), sip[:]) {
		t.Fatalf("ARP request % x", arp)
	}
	// The server answers; the data path learns its MAC.
	smac := [6]byte{0x52, 0, 0, 0, 0, 0x11}
	vmac := router.VirtualMAC(netip.MustParseAddr("10.20.0.250"))
	reply := make([]byte, 42)
	frame.PutEthernet(reply, vmac[:], smac[:], false, 0, frame.EtherTypeARP)
	frame.PutARP(reply[14:], frame.ARPReply, smac[:], sip[:], vmac[:], req.SenderIP())
	w := router.NewWorker()
	w.Egress(tb, reply, now)
	if m, ok := s.MAC(); !ok || m != smac {
		t.Fatal("MAC not learned from the ARP reply")
	}

	// answer turns the last noop written into the server's reply.
	answer := func(now int64) {
		noop := written(t, dev)
		var f frame.Frame
		if err := frame.Parse(noop, &f); err != nil {
			t.Fatal(err)
		}
		u := frame.UDP(noop[f.L4:f.End])
		ip := f.IPv4(noop)
		if frame.Checksum(u, frame.PseudoSum(ip.Src(), ip.Dst(), frame.ProtoUDP, len(u))) != 0 ||
			u.SrcPort() != router.HealthPort || u.Payload()[8+1] != memcache.OpNoop || !bytes.Equal(noop[0:6], smac[:]) {
			t.Fatalf("bad health check % x", noop)
		}
		// The reply swaps addresses and ports.
		rep := append([]byte(nil), noop...)
		copy(rep[0:6], vmac[:])
		copy(rep[6:12], smac[:])
		var f2 frame.Frame
		frame.Parse(rep, &f2)
		s4, d4 := ip.Dst(), ip.Src()
		frame.PutIPv4(rep[14:], 0, ip.TotalLen(), 0, 0, 64, frame.ProtoUDP, s4, d4)
		u2 := frame.UDP(rep[f2.L4:f2.End])
		binary.BigEndian.PutUint16(u2[0:], u.DstPort())
		binary.BigEndian.PutUint16(u2[2:], router.HealthPort)
		u2[8+8] = memcache.MagicResponse
		u2.SetChecksum(0)
		w.Egress(tb, rep, now)
	}
	step := int64(100 * time.Millisecond)
	for i := 0; i < 5; i++ {
		now += step
		a.kvWatch(ks, routes, now, true)
		answer(now + 1)
		if !s.Usable() {
			t.Fatalf("check %d: server down while answering", i)
		}
	}
	// Each answered check gave its round trip (the first check left
	// before the MAC was known, so it counts neither way).
	if ks.nrtt != 4 || ks.rtt[3] != 1 || ks.errors != 0 {
		t.Fatalf("%d round trips (last %v), %d errors; want 4 of 1ns, 0", ks.nrtt, ks.rtt[3], ks.errors)
	}
	// It stops answering: down after two missed checks, not one.
	for i := 0; i < 2; i++ {
		now += step
		a.kvWatch(ks, routes, now, true)
		written(t, dev)
		if i == 0 && !s.Usable() {
			t.Fatal("down after one missed check")
		}
	}
	now += step
	a.kvWatch(ks, routes, now, true)
	if s.Usable() {
		t.Fatal("still up after two missed checks")
	}
	if ks.errors != 2 || ks.nrtt != 5 { // the fifth answered check is judged at the first missed one
		t.Fatalf("%d errors, %d round trips after two missed checks", ks.errors, ks.nrtt)
	}
	// It answers again: readmitted after five good checks.
	for i := 0; i < router.UpAfter+1; i++ {
		answer(now + 1)
		now += step
		a.kvWatch(ks, routes, now, true)
		if up := s.Usable(); up != (i >= router.UpAfter-1) {
			t.Fatalf("after %d good checks: up %v", i+1, up)
		}
	}
}

// TestKVPassiveAndSiteDown: a remote server whose requests go
// unanswered leaves after max(3 × RTT, 50 ms). After the retry interval
// one request for its keys goes to it while the others go to the
// failover; unanswered, the next trial waits twice as long; answered, the
// server is readmitted. A site the overlay loses takes its servers out at
// once.
func TestKVPassiveAndSiteDown(t *testing.T) {
	tb, _, servers := kvTestServers(t)
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	ks := servers[1]
	s := ks.s
	man := wire.SiteIDFromName("man")
	routes := kvRoutes{up: map[wire.SiteID]bool{man: true}}

	// A request for a key of the remote server leaves at t = 1 s.
	var key string
	for i := 0; ; i++ {
		key = string(rune('a'+i%26)) + string(rune('a'+i/26))
		if tb.Pools()[0].RingOwner([]byte(key)) == 1 {
			break
		}
	}
	w := router.NewWorker()
	b := kvGet(key, 1)
	sec := int64(time.Second)
	tmpl := append([]byte(nil), b...)
	if _, outs := w.Egress(tb, b, sec); len(outs) != 1 {
		t.Fatal("request not routed")
	}
	a.kvWatch(ks, routes, sec+int64(60*time.Millisecond), false)
	if !s.Usable() {
		t.Fatal("down after one lost request")
	}
	copy(b, tmpl)
	if _, outs := w.Egress(tb, b, sec+int64(10*time.Millisecond)); len(outs) != 1 {
		t.Fatal("request not routed")
	}
	a.kvWatch(ks, routes, sec+int64(40*time.Millisecond), false)
	if !s.Usable() {
		t.Fatal("down before 50 ms")
	}
	a.kvWatch(ks, routes, sec+int64(60*time.Millisecond), false)
	if s.Usable() {
		t.Fatal("up after 60 ms without a reply")
	}
	// egress sends the request again at now and returns the site it went
	// to (the failover is the local server: site 0).
	egress := func(now int64) wire.SiteID {
		t.Helper()
		copy(b, tmpl)
		_, outs := w.Egress(tb, b, now)
		if len(outs) != 1 {
			t.Fatalf("request at %v not routed", time.Duration(now))
		}
		return outs[0].Site
	}
	servers[0].s.SetMAC([6]byte{0x52, 0, 0, 0, 0, 0x11})
	if egress(sec+int64(100*time.Millisecond)) != 0 {
		t.Fatal("request for the down server's key not sent to the failover")
	}
	out := sec + int64(60*time.Millisecond)
	trial1 := out + int64(kvRetryMin) + 1
	a.kvWatch(ks, routes, trial1, false)
	if s.Usable() {
		t.Fatal("readmitted without a reply")
	}
	if egress(trial1+1) != man || egress(trial1+2) != 0 || egress(trial1+3) != 0 {
		t.Fatal("after the retry interval, not exactly one request went to the server")
	}
	a.kvWatch(ks, routes, trial1+int64(10*time.Millisecond), false)
	a.kvWatch(ks, routes, trial1+int64(kvTrialWait)-int64(10*time.Millisecond), false)
	if ks.retry != kvRetryMin || ks.errors != 1 {
		t.Fatalf("trial judged before kvTrialWait: next retry %v, errors %d", ks.retry, ks.errors)
	}
	failed := trial1 + int64(kvTrialWait) + int64(20*time.Millisecond)
	a.kvWatch(ks, routes, failed, false)
	if s.Usable() || ks.retry != 2*kvRetryMin || ks.errors != 2 {
		t.Fatalf("unanswered trial: usable %v, next retry %v, errors %d", s.Usable(), ks.retry, ks.errors)
	}
	a.kvWatch(ks, routes, failed+int64(kvRetryMin)+1, false)
	if egress(failed+int64(kvRetryMin)+2) != 0 {
		t.Fatal("second trial before twice the interval")
	}
	trial2 := failed + int64(2*kvRetryMin) + 1
	a.kvWatch(ks, routes, trial2, false)
	if egress(trial2+1) != man {
		t.Fatal("no second trial after twice the interval")
	}
	// The server answers the trial request: readmitted, and every request
	// for its keys goes to it again.
	rep := kvReplyFrom(t, netip.MustParseAddrPort("10.20.0.12:11211"), netip.MustParseAddrPort("10.20.0.5:5000"), 1)
	var in router.Inbound
	if !in.Deliver(tb, rep, trial2+int64(20*time.Millisecond)) {
		t.Fatal("the trial's reply was not delivered")
	}
	a.kvWatch(ks, routes, trial2+int64(25*time.Millisecond), false)
	if !s.Usable() || egress(trial2+int64(30*time.Millisecond)) != man || egress(trial2+int64(31*time.Millisecond)) != man {
		t.Fatal("not readmitted after its trial request was answered")
	}
	routes.up[man] = false
	a.kvWatch(ks, routes, 3*sec, false)
	if s.Usable() {
		t.Fatal("server of a lost site still used")
	}
	routes.up[man] = true
	a.kvWatch(ks, routes, 3*sec+1, false)
	if !s.Usable() {
		t.Fatal("server not back with its site")
	}
}

// kvGet builds a memcached UDP get of key with request id id from the
// client 10.20.0.5:5000 to the virtual address 10.20.0.250:11211.
func kvGet(key string, id uint16) []byte {
	vmac := router.VirtualMAC(netip.MustParseAddr("10.20.0.250"))
	req := []byte("\x00\x00\x00\x00\x00\x01\x00\x00get " + key + "\r\n")
	binary.BigEndian.PutUint16(req, id)
	b := make([]byte, 42+len(req))
	frame.PutEthernet(b, vmac[:], []byte{0x52, 0, 0, 0, 0, 5}, false, 0, frame.EtherTypeIPv4)
	frame.PutIPv4(b[14:], 0, 28+len(req), 0, 0, 64, frame.ProtoUDP, []byte{10, 20, 0, 5}, []byte{10, 20, 0, 250})
	binary.BigEndian.PutUint16(b[34:], 5000)
	binary.BigEndian.PutUint16(b[36:], 11211)
	binary.BigEndian.PutUint16(b[38:], uint16(8+len(req)))
	copy(b[42:], req)
	return b
}

// kvReplyFrom builds a memcached UDP reply to request id from server to
// client, as it arrives over the overlay.
func kvReplyFrom(t *testing.T, server, client netip.AddrPort, id uint16) []byte {
	t.Helper()
	payload := []byte("\x00\x00\x00\x00\x00\x01\x00\x00END\r\n")
	binary.BigEndian.PutUint16(payload, id)
	b := make([]byte, 42+len(payload))
	frame.PutEthernet(b, []byte{0x52, 0, 0, 0, 0, 5}, []byte{0x52, 0, 0, 0, 0, 0x12}, false, 0, frame.EtherTypeIPv4)
	s4, c4 := server.Addr().As4(), client.Addr().As4()
	frame.PutIPv4(b[14:], 0, 28+len(payload), 0, 0, 64, frame.ProtoUDP, s4[:], c4[:])
	binary.BigEndian.PutUint16(b[34:], server.Port())
	binary.BigEndian.PutUint16(b[36:], client.Port())
	binary.BigEndian.PutUint16(b[38:], uint16(8+len(payload)))
	copy(b[42:], payload)
	return b
}

// A replica of a replicated shard that passive detection took out is
// readmitted as a server of its own is, but by a copy: after the retry
// interval the next read still goes to the replica that serves it, and
// a copy to the one on trial, whose answer readmits it. (Before, such a
// replica stayed out for good: its trial waited for a request that the
// shard's chooser never sent it.)
func TestKVReplicaReadmittedByTrialCopy(t *testing.T) {
	lan, man := wire.SiteIDFromName("lan"), wire.SiteIDFromName("man")
	local, remote := netip.MustParseAddrPort("10.20.0.11:11211"), netip.MustParseAddrPort("10.20.0.12:11211")
	tb, err := router.New(router.Spec{Self: lan, Subnet: netip.MustParsePrefix("10.20.0.0/24"), Pools: []router.PoolSpec{{
		Name: "objects", VIP: netip.MustParseAddrPort("10.20.0.250:11211"), Policy: replica.LocalFirst,
		Shards: []router.ShardSpec{{Name: "s0", Weight: 1}},
		Servers: []router.ServerSpec{
			{Addr: local, Site: lan, Shard: 0},
			{Addr: remote, Site: man, Shard: 0},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := tb.Pools()[0]
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	ks := &kvServer{s: p.Servers[1], pool: p, retry: kvRetryMin}
	routes := kvRoutes{up: map[wire.SiteID]bool{man: true}}
	w := router.NewWorker()
	// read sends get id at now and returns the sites its copies went to.
	read := func(id uint16, now int64) []wire.SiteID {
		t.Helper()
		_, outs := w.Egress(tb, kvGet("photo", id), now)
		var sites []wire.SiteID
		for _, o := range outs {
			sites = append(sites, o.Site)
		}
		return sites
	}
	// The local replica's MAC is not known yet: reads go to man, which
	// does not answer; passive detection takes it out.
	sec := int64(time.Second)
	read(1, sec)
	read(2, sec+int64(10*time.Millisecond))
	a.kvWatch(ks, routes, sec+int64(60*time.Millisecond), false)
	if ks.s.Usable() {
		t.Fatal("the remote replica is still in after two reads unanswered for 60 ms")
	}
	p.Servers[0].SetMAC([6]byte{0x52, 0, 0, 0, 0, 0x11})
	if got := read(3, sec+int64(100*time.Millisecond)); len(got) != 1 || got[0] != 0 {
		t.Fatalf("with the remote replica out, a read went to %v, want only this site", got)
	}
	trial := sec + int64(60*time.Millisecond) + int64(kvRetryMin) + 1
	a.kvWatch(ks, routes, trial, false)
	got := read(4, trial+1)
	if len(got) != 2 || !slices.Contains(got, man) || !slices.Contains(got, 0) {
		t.Fatalf("after the retry interval a read went to %v, want this site and a copy to man", got)
	}
	if again := read(5, trial+2); len(again) != 1 || again[0] != 0 {
		t.Fatalf("a second trial copy: %v", again)
	}
	a.kvWatch(ks, routes, trial+int64(10*time.Millisecond), false)
	var in router.Inbound
	in.Deliver(tb, kvReplyFrom(t, remote, netip.MustParseAddrPort("10.20.0.5:5000"), 4), trial+int64(20*time.Millisecond))
	a.kvWatch(ks, routes, trial+int64(25*time.Millisecond), false)
	if !ks.s.Usable() {
		t.Fatal("not readmitted after the trial copy was answered")
	}
}

// Over TCP, a reply still arriving is no silence: a server whose large
// value takes longer than the passive wait to arrive stays in, and is
// taken out only once the wait has passed since its last bytes.
func TestKVPassiveWaitsForAReplyInProgress(t *testing.T) {
	_, _, servers := kvTestServers(t)
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	ks := servers[1]
	routes := kvRoutes{up: map[wire.SiteID]bool{wire.SiteIDFromName("man"): true}}
	sec := int64(time.Second)
	ks.s.TCPRequest(sec)
	ks.s.TCPRequest(sec + int64(time.Millisecond))
	for i := int64(1); i <= 10; i++ { // the first reply's bytes, every 20 ms for 200 ms
		now := sec + i*int64(20*time.Millisecond)
		ks.s.TCPProgress(now)
		a.kvWatch(ks, routes, now+int64(10*time.Millisecond), false)
		if !ks.s.Usable() {
			t.Fatalf("taken out %v into a reply that is arriving", time.Duration(now-sec))
		}
	}
	last := sec + 10*int64(20*time.Millisecond)
	a.kvWatch(ks, routes, last+int64(60*time.Millisecond), false)
	if ks.s.Usable() {
		t.Fatal("still in 60 ms after the server's last bytes, with two requests unanswered")
	}
}

// A server that always answers slowly (a capped disk serving large
// values) is not taken for dead: passive detection waits three times its
// usual wait for a reply, and still takes it out once it goes silent.
func TestKVPassiveFollowsTheServersPace(t *testing.T) {
	_, _, servers := kvTestServers(t)
	a := &Agent{log: slog.New(slog.DiscardHandler)}
	ks := servers[0] // this site's: the path adds nothing to the wait
	ks.s.SetMAC([6]byte{0x52, 0, 0, 0, 0, 0x11})
	routes := kvRoutes{up: map[wire.SiteID]bool{}}
	ms := int64(time.Millisecond)
	now := int64(time.Second)
	// Two requests at a time, each answered after 120 ms; the first has
	// only the usual 50 ms, as its pace is not known yet.
	for i := 0; i < 20; i++ {
		ks.s.TCPRequest(now)
		ks.s.TCPRequest(now + ms)
		a.kvWatch(ks, routes, now+100*ms, false)
		if i == 0 && ks.s.Usable() {
			t.Fatal("a server of unknown pace not taken out after 100 ms")
		}
		if i > 0 && !ks.s.Usable() {
			t.Fatalf("request %d: taken out 100 ms into a wait of 120 ms", i)
		}
		ks.s.TCPReply(now + 120*ms)
		ks.s.TCPReply(now + 121*ms)
		ks.s.SetDown(false) // the first time, readmitted by its health checks
		now += 130 * ms
	}
	if p := ks.s.Pace(); p < 100*time.Millisecond || p > 125*time.Millisecond {
		t.Fatalf("pace %v after replies at 120 ms", p)
	}
	ks.s.TCPRequest(now)
	ks.s.TCPRequest(now + ms)
	a.kvWatch(ks, routes, now+300*ms, false)
	if !ks.s.Usable() {
		t.Fatal("taken out 300 ms into a wait, three times 120 ms not passed")
	}
	a.kvWatch(ks, routes, now+400*ms, false)
	if ks.s.Usable() {
		t.Fatal("still in after 400 ms of silence, more than three times its pace")
	}
}
