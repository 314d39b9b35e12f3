package agent

import (
	"context"
	"encoding/binary"
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/detour-overlay/detour/internal/config"
	"github.com/detour-overlay/detour/internal/datapath"
	"github.com/detour-overlay/detour/internal/device"
	"github.com/detour-overlay/detour/internal/frame"
	"github.com/detour-overlay/detour/internal/kv/memcache"
	"github.com/detour-overlay/detour/internal/kv/router"
	"github.com/detour-overlay/detour/internal/wire"
)

// The key router's agent side (issue 17): it builds each network's
// router table from the pools the site core holds (distributed over the
// control plane, kvdist.go), learns the MACs of this site's servers,
// checks their health and watches the others passively. Changes made
// through the API (kv_api.go) are distributed to every gateway.

// Timing of the key router's checks.
const (
	// kvTick is how often passive detection and site health are looked at.
	kvTick = 25 * time.Millisecond
	// kvProbeEvery is how often a local server gets a health check (in
	// ticks: 100 ms).
	kvProbeEvery = 4
	// kvARPRefresh is how often a known server MAC is asked for again.
	kvARPRefresh = 10 * time.Second
	// kvMinPassive is the shortest wait for a reply before a server
	// counts as dead (kvPassiveWait).
	kvMinPassive = 50 * time.Millisecond
	// kvPaceFactor is how many times its usual wait for a reply
	// (router.Server.Pace) a server is given before it counts as dead,
	// and kvMaxPassive the longest wait that gives.
	kvPaceFactor = 3
	kvMaxPassive = 2 * time.Second
	// kvPassiveMin is how many requests must go unanswered: one lost
	// datagram takes no server out.
	kvPassiveMin = 2
	// kvRetryMin and kvRetryMax bound the wait before a remote server
	// that passive detection took out is tried again; the wait doubles
	// each time it fails again within kvStable.
	kvRetryMin = time.Second
	kvRetryMax = 30 * time.Second
	kvStable   = 10 * time.Second
	// kvTrialWait is the least time a trial request is given to be
	// answered: the passive wait follows the path's delay estimate,
	// which trails a path that just slowed by seconds (docs/kv.md).
	// Waiting longer costs nothing: the server's other requests keep
	// going to the failover meanwhile.
	kvTrialWait = time.Second
)

// kvServer is the agent's view of one server's health.
type kvServer struct {
	s         *router.Server
	port      *datapath.Port
	pool      *router.Pool
	health    router.Health
	probeAt   int64 // when the last health check left (ns)
	arpAt     int64 // when the last ARP request left
	downAt    int64 // when passive detection took it out
	upAt      int64 // when it was last readmitted
	trialAt   int64 // when a trial request was armed (0: none), for a remote server out
	takenAt   int64 // when the loop first saw the armed trial taken (0: not yet)
	retry     time.Duration
	probe     [128]byte
	passiveDn bool
	siteDown  bool

	// For the API (kv_api.go): the state shown, since when and how often
	// it changed, errors
	// (unanswered health checks and passive detections) and the last
	// health-check round trips.
	state   string
	since   int64
	changes uint64 // times state changed since the server was first seen
	errors  uint64
	drained bool
	// probeSent is whether the check of probeAt left (it needs the MAC).
	probeSent bool
	rtt       [kvRTTSamples]time.Duration
	nrtt      int // samples taken; the last kvRTTSamples are kept
}

// kvRTTSamples is how many health-check round trips a server keeps (at
// one per 100 ms: the last 25.6 s).
const kvRTTSamples = 256

// kvNet is a network with pools: its name and its port, whose KV pointer
// holds the table in force (written only by the kv loop).
type kvNet struct {
	name string
	port *datapath.Port
}

// kvState is the key router's loop's own state: the networks with pools,
// the servers it watches, the pools in force and the networks of the
// site (kvdist.go), and the additions waiting for their server's site to
// confirm them (kv_api.go).
type kvState struct {
	nets    []kvNet
	servers []*kvServer
	pending []*kvPending
	netcfg  []config.Network
	records map[string]wire.KVPool
	names   map[wire.SiteID]string
	// failed is the last error building each network's table, logged once.
	failed map[string]string
	// joinSeen is when a joining server of this site was first seen, and
	// confirmed the version last confirmed or refused, by "pool addr".
	joinSeen  map[string]int64
	confirmed map[string]uint64
}

func newKVState() *kvState {
	return &kvState{records: map[string]wire.KVPool{}, names: map[wire.SiteID]string{}, failed: map[string]string{},
		joinSeen: map[string]int64{}, confirmed: map[string]uint64{}}
}

// runKV routes the pools in force and watches their servers until ctx
// is done; it takes the pools and networks the control loop hands over
// (kvdist.go) and carries out the API's requests (kv_api.go).
func (a *Agent) runKV(ctx context.Context) {
	st := newKVState()
	a.kvTake(st)
	tt := &tcpTerms{}
	a.kvTCPSync(ctx, st, tt) // tcpterm.go
	defer tt.stopAll()
	tick := time.NewTicker(kvTick)
	defer tick.Stop()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			st.failPending()
			return
		case req := <-a.kvReqs:
			req(st, a.clock.Mono())
			continue
		case <-a.kvBox.wake:
			a.kvTake(st)
			a.kvTCPSync(ctx, st, tt)
			continue
		case <-tick.C:
			n++
		}
		now := a.clock.Mono()
		routes := a.engine.Routes()
		for _, ks := range st.servers {
			a.kvWatch(ks, routes, now, n%kvProbeEvery == 1)
			kvPathRTT(ks.s, routes)
		}
		if n%kvTCPEvery == 0 {
			a.kvTCPSync(ctx, st, tt) // pools created through the API
		}
		st.kvExpire(now)
		st.track(now)
		a.kvActivate(st, now)
		a.kvFinishPending(st, now)
	}
}

// kvTake applies what the control loop handed over.
func (a *Agent) kvTake(st *kvState) {
	pools, nets, names := a.kvBox.take()
	maps.Copy(st.names, names)
	now := a.clock.Mono()
	a.kvApply(st, pools, nets, now)
	a.kvActivate(st, now)
	a.kvFinishPending(st, now)
}

// kvWatch updates one server's health: the overlay's view of its site,
// passive detection, and for a server of this site its ARP and health
// checks.
func (a *Agent) kvWatch(ks *kvServer, routes datapath.Routes, now int64, probe bool) {
	s := ks.s
	if !s.Local {
		_, ok := routes.Lookup(s.Site)
		if !ok != ks.siteDown {
			ks.siteDown = !ok
			s.SetSiteDown(!ok)
			a.log.Info("kv server's site", "pool", ks.pool.Name, "server", s.Addr, "site", s.SiteName, "reachable", ok)
		}
	}
	a.kvPassive(ks, routes, now)
	if need := s.TakeNeedARP(); s.Local && (probe || need) {
		a.kvProbe(ks, now, probe, need)
	}
}

// kvPassive takes a server out when requests to it (at least two) went
// unanswered for max(3 × path RTT, 50 ms, 3 × its usual wait), and tries
// a remote one again later.
func (a *Agent) kvPassive(ks *kvServer, routes datapath.Routes, now int64) {
	s := ks.s
	wait := kvPassiveWait(s, routes)
	if p := s.PendingSince(); p != 0 && s.Unanswered() >= kvPassiveMin && !s.Down() && now-p > int64(wait) {
		ks.health.ForceDown()
		s.SetDown(true)
		s.ClearPending()
		if ks.upAt != 0 && now-ks.upAt < int64(kvStable) {
			ks.retry = min(2*ks.retry, kvRetryMax)
		} else {
			ks.retry = kvRetryMin
		}
		ks.downAt, ks.passiveDn = now, true
		ks.errors++
		a.log.Warn("kv server out: no reply", "pool", ks.pool.Name, "server", s.Addr, "waited", time.Duration(now-p))
		return
	}
	if !s.Local && ks.passiveDn && s.Down() {
		a.kvTrial(ks, now, max(wait, kvTrialWait))
	}
}

// kvPassiveWait is how long a server's requests may go unanswered
// before passive detection takes it out: max(3 × path RTT, 50 ms), or
// longer for a server whose replies usually take longer than that (a
// slow disk serving large values), up to kvMaxPassive.
func kvPassiveWait(s *router.Server, routes datapath.Routes) time.Duration {
	wait := kvMinPassive
	if rt, ok := routes.Lookup(s.Site); ok && 6*rt.OneWayEstimate > wait {
		wait = 6 * rt.OneWayEstimate
	}
	if p := min(kvPaceFactor*s.Pace(), kvMaxPassive); p > wait {
		wait = p
	}
	return wait
}

// kvTrial readmits a remote server that passive detection took out. It
// is not checked from here, so after the retry interval one real request
// for its keys goes to it (router.Server.ArmTrial) while the others keep
// going to the failover. Any reply from it since then readmits it, once;
// a trial request unanswered for wait (the passive wait, at least
// kvTrialWait) doubles the interval (up to kvRetryMax), as a readmitted
// server that fails again soon does.
func (a *Agent) kvTrial(ks *kvServer, now int64, wait time.Duration) {
	s := ks.s
	switch {
	case ks.trialAt == 0:
		if now-ks.downAt > int64(ks.retry) {
			s.ArmTrial()
			ks.trialAt, ks.takenAt = now, 0
		}
	case s.LastReply() >= ks.trialAt:
		s.EndTrial()
		s.ClearPending()
		s.SetDown(false)
		ks.health = router.Health{}
		ks.upAt, ks.passiveDn, ks.trialAt, ks.takenAt = now, false, 0, 0
		a.log.Info("kv server readmitted: a trial request was answered", "pool", ks.pool.Name, "server", s.Addr)
	case !s.TrialTaken():
		// Armed, and no request for the server's keys has come yet.
	case ks.takenAt == 0:
		ks.takenAt = now
	case now-ks.takenAt > int64(wait):
		s.EndTrial()
		s.ClearPending()
		ks.downAt, ks.trialAt, ks.takenAt = now, 0, 0
		ks.retry = min(2*ks.retry, kvRetryMax)
		ks.errors++
		a.log.Info("kv server still out: its trial request was not answered", "pool", ks.pool.Name, "server", s.Addr, "next", ks.retry)
	}
}

// kvProbe sends a local server an ARP request (when its MAC is unknown,
// asked for, or due a refresh) and, on a probe tick, a binary noop from
// the virtual address, judging the previous one.
func (a *Agent) kvProbe(ks *kvServer, now int64, probe, need bool) {
	s := ks.s
	mac, known := s.MAC()
	if (!known || need || now-ks.arpAt > int64(kvARPRefresh)) && now-ks.arpAt > int64(10*time.Millisecond) {
		ks.arpAt = now
		a.kvWrite(ks.port, kvARP(ks.probe[:], ks.pool, s))
	}
	if !probe {
		return
	}
	if ks.probeAt != 0 {
		ok := s.LastReply() >= ks.probeAt
		if at := s.HealthReplyAt(); ks.probeSent && at >= ks.probeAt {
			ks.rtt[ks.nrtt%kvRTTSamples] = time.Duration(at - ks.probeAt)
			ks.nrtt++
		} else if ks.probeSent {
			ks.errors++
		}
		if ks.health.Observe(ok) {
			s.SetDown(ks.health.Down())
			s.ClearPending()
			ks.passiveDn = false
			a.log.Info("kv server health", "pool", ks.pool.Name, "server", s.Addr, "down", ks.health.Down())
		}
	}
	ks.probeAt, ks.probeSent = now, known
	if known {
		a.kvWrite(ks.port, kvNoop(ks.probe[:], ks.pool, s, mac))
	}
}

// kvWrite writes a frame to a network's bridge.
func (a *Agent) kvWrite(p *datapath.Port, b []byte) {
	if _, err := p.Dev.Write(b); err != nil {
		return
	}
	if f, ok := p.Dev.(device.Flusher); ok {
		_ = f.Flush()
	}
}

// kvARP builds in b an ARP request from the pool's virtual address for
// the server's.
func kvARP(b []byte, p *router.Pool, s *router.Server) []byte {
	vmac, vip, sip := p.MAC(), p.VIP.Addr().As4(), s.IP()
	bcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	l := frame.PutEthernet(b, bcast, vmac[:], false, 0, frame.EtherTypeARP)
	frame.PutARP(b[l:], frame.ARPRequest, vmac[:], vip[:], make([]byte, 6), sip[:])
	return b[:l+frame.ARPLen]
}

// kvNoop builds in b a memcached UDP datagram holding a binary noop, from
// the virtual address's health port to the server:
//
//	Ethernet | IPv4 | UDP (VIP:39999 → server) | frame header | 24-byte noop
func kvNoop(b []byte, p *router.Pool, s *router.Server, mac [6]byte) []byte {
	vmac, vip, sip := p.MAC(), p.VIP.Addr().As4(), s.IP()
	const udpLen = frame.UDPHeaderLen + memcache.FrameHeaderLen + memcache.HeaderLen
	l := frame.PutEthernet(b, mac[:], vmac[:], false, 0, frame.EtherTypeIPv4)
	frame.PutIPv4(b[l:], 0, frame.IPv4HeaderLen+udpLen, 0, frame.IPv4FlagDF, 64, frame.ProtoUDP, vip[:], sip[:])
	u := frame.UDP(b[l+frame.IPv4HeaderLen : l+frame.IPv4HeaderLen+udpLen])
	clear(u)
	binary.BigEndian.PutUint16(u[0:], router.HealthPort)
	binary.BigEndian.PutUint16(u[2:], s.Port())
	u.SetLen(udpLen)
	memcache.FrameHeader{RequestID: 1, Total: 1}.Put(u[frame.UDPHeaderLen:])
	req := u[frame.UDPHeaderLen+memcache.FrameHeaderLen:]
	req[0], req[1] = memcache.MagicRequest, memcache.OpNoop
	u.SetChecksum(frame.UDPChecksum(frame.Checksum(u, frame.PseudoSum(vip[:], sip[:], frame.ProtoUDP, udpLen))))
	return b[:l+frame.IPv4HeaderLen+udpLen]
}

// kvCollector exports the pools' counters per pool and server, from the
// tables in force.
type kvCollector struct{ a *Agent }

var (
	kvRequestsDesc = prometheus.NewDesc("detour_kv_requests_total", "Requests routed to a pool's server by this gateway.", []string{"pool", "server"}, nil)
	kvRepliesDesc  = prometheus.NewDesc("detour_kv_replies_total", "Replies of a pool's server seen by this gateway.", []string{"pool", "server"}, nil)
	kvUpDesc       = prometheus.NewDesc("detour_kv_server_up", "1 while requests may go to the server (its health and its site's, and not drained).", []string{"pool", "server"}, nil)
	kvVersionDesc  = prometheus.NewDesc("detour_kv_pool_version", "The pool's version in force at this gateway (distributed: the same at every gateway once a change has spread).", []string{"pool"}, nil)
	kvPoolDesc     = prometheus.NewDesc("detour_kv_pool_total", "A pool's counters by name (errors answered, drops by reason, splits, failovers).", []string{"pool", "counter"}, nil)
)

func (c kvCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- kvRequestsDesc
	ch <- kvRepliesDesc
	ch <- kvUpDesc
	ch <- kvPoolDesc
	ch <- kvVersionDesc
	ch <- kvReadsDesc
	ch <- kvHedgesDesc
}

func (c kvCollector) Collect(ch chan<- prometheus.Metric) {
	nets := c.a.kvNets.Load()
	if nets == nil {
		return
	}
	for _, n := range *nets {
		if t := n.port.KV.Load(); t != nil {
			for _, p := range t.Pools() {
				collectPool(ch, p)
			}
		}
	}
}

// collectPool exports one pool's counters.
func collectPool(ch chan<- prometheus.Metric, p *router.Pool) {
	for i, s := range p.Servers {
		name := s.Addr.String()
		ch <- prometheus.MustNewConstMetric(kvRequestsDesc, prometheus.CounterValue, float64(s.Requests.Load()), p.Name, name)
		ch <- prometheus.MustNewConstMetric(kvRepliesDesc, prometheus.CounterValue, float64(s.Replies.Load()), p.Name, name)
		up := 0.0
		if s.Usable() && !p.Drained[i] {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(kvUpDesc, prometheus.GaugeValue, up, p.Name, name)
	}
	ch <- prometheus.MustNewConstMetric(kvVersionDesc, prometheus.GaugeValue, float64(p.Version), p.Name)
	for counter, v := range kvPoolCounters(p) {
		ch <- prometheus.MustNewConstMetric(kvPoolDesc, prometheus.CounterValue, float64(v), p.Name, counter)
	}
	collectReplicas(ch, p)
}

// kvPoolCounters returns a pool's counters by name.
func kvPoolCounters(p *router.Pool) map[string]uint64 {
	st := p.Stats
	return map[string]uint64{
		"requests":          st.Requests.Load(),
		"replies":           st.Replies.Load(),
		"errors":            st.Errors.Load(),
		"split":             st.Split.Load(),
		"arp_replies":       st.ARPReplies.Load(),
		"failed_over":       st.FailedOver.Load(),
		"health_replies":    st.HealthReplies.Load(),
		"dropped_foreign":   st.DropForeign.Load(),
		"dropped_rate":      st.DropRate.Load(),
		"dropped_malformed": st.DropMalformed.Load(),
		"dropped_no_server": st.DropNoServer.Load(),
		"dropped_no_mac":    st.DropNoMAC.Load(),
		"dropped_flows":     st.DropFlows.Load(),
		"dropped_other":     st.DropOther.Load(),
		"reads_local":       st.ReadsLocal.Load(),
		"reads_nearby":      st.ReadsNearby.Load(),
		"reads_remote":      st.ReadsRemote.Load(),
		"explorations":      st.Explorations.Load(),
		"hedges_sent":       st.HedgesSent.Load(),
		"hedges_won":        st.HedgesWon.Load(),
		"write_copies":      st.WritesReplicas.Load(),
		"dup_replies":       st.DupReplies.Load(),
		"pending_evicted":   st.PendingEvicted.Load(),
		"pending_expired":   st.PendingExpired.Load(),
	}
}
