package control

import (
	"time"

	"github.com/detour-overlay/detour/internal/measure"
	"github.com/detour-overlay/detour/internal/wire"
)

// Available throughput (docs/throughput.md). Each site estimates the rate
// of every link into it (measure.RateEstimator): passively from the data
// bytes the data path counts per previous hop (OnDataBytes) and from the
// queueing its members' probes show, and from the packet trains its
// members send it, which it answers with a train report. It reports the
// estimates in its link state (the rate section), so that every site
// knows the rate of every directed link and can choose bulk paths.
//
// A site sends a train to a member only when the estimate of its link to
// the member, as the member last reported it (in its link state or a
// train report), is missing, only a lower bound, or older than Refresh;
// at most one train per member every TrainInterval, and within the site's
// probe budget: a token bucket of ProbeBudget bytes a second holding up
// to trainBurst trains.

// ThroughputConfig tunes the estimation of available throughput.
type ThroughputConfig struct {
	// ProbeBudget is the most train bytes a second (IP and UDP headers
	// included) this site sends on average; zero sends no trains (the
	// passive estimates still work).
	ProbeBudget int
	// TrainPackets datagrams of TrainSize bytes (detour payload) make a
	// train.
	TrainPackets int
	TrainSize    int
	// TrainInterval is the shortest time between two trains to one
	// member.
	TrainInterval time.Duration
	// Refresh is the age at which an estimate is measured again.
	Refresh time.Duration
	Rate    measure.RateConfig
}

// trainBurst is how many trains the probe budget's bucket holds, so that
// the links of a site that just started are measured within seconds.
const trainBurst = 4

// DefaultThroughputConfig sends trains of 24 datagrams of 1200 bytes
// (29.5 kB) within a budget of 32 kB/s, at most every 10 s to a member,
// and measures again what is a minute old: the trains of a site with 20
// members cost 10 kB/s when no data flows, under a third of the budget.
func DefaultThroughputConfig() ThroughputConfig {
	return ThroughputConfig{
		ProbeBudget:   32000,
		TrainPackets:  24,
		TrainSize:     1200,
		TrainInterval: 10 * time.Second,
		Refresh:       time.Minute,
		Rate:          measure.DefaultRateConfig(),
	}
}

// trainBytes is what one train costs the budget.
func (c *ThroughputConfig) trainBytes() int {
	return c.TrainPackets * (c.TrainSize + measure.IPUDPOverhead)
}

// validate checks the configuration.
func (c *ThroughputConfig) validate() error {
	switch {
	case c.ProbeBudget < 0:
		return configErr("probe budget must be non-negative")
	case c.ProbeBudget > 0 && (c.TrainPackets < 2 || c.TrainPackets > wire.MaxTrainPackets || c.TrainSize < wire.TrainHeaderLen || c.TrainSize > 1400):
		return configErr("trains must have 2 to %d packets of %d to 1400 bytes", wire.MaxTrainPackets, wire.TrainHeaderLen)
	case c.ProbeBudget > 0 && (c.TrainInterval <= 0 || c.Refresh <= 0):
		return configErr("train interval and refresh must be positive")
	case c.Rate.Window <= 0 || c.Rate.BaseWindow <= 0 || c.Rate.MaxAge <= 0:
		return configErr("rate estimator windows must be positive")
	}
	return nil
}

// rateOf returns the estimator of the link from m to this site.
func (n *Node) rateOf(m *member) *measure.RateEstimator {
	if m.rate == nil {
		m.rate = measure.NewRateEstimator(n.cfg.Throughput.Rate)
	}
	return m.rate
}

// OnDataBytes feeds the count of data bytes received so far from the
// member with ID from as previous hop (a total that only grows), read by
// the shell from the data path at now, every 100 ms or so.
func (n *Node) OnDataBytes(now time.Time, from wire.SiteID, total uint64) {
	n.observe(now)
	if m := n.members[from]; m != nil && m.state != StateLeft {
		n.rateOf(m).OnBytes(now, total)
	}
}

// onProbeDelay feeds the offset-shifted delay of a probe from m read at rx
// and handled at now, for the queueing its link shows.
func (n *Node) onProbeDelay(now, rx time.Time, m *member, sendTime int64) {
	n.rateOf(m).OnDelay(now, time.Duration(rx.UnixNano()-sendTime))
}

// outRate is what this site knows of the rate of its link to m: the
// newer of m's last train report and m's link state.
func (n *Node) outRate(now time.Time, m *member) measure.RateEstimate {
	e := m.outRate
	if rate, kind, age, ok := n.db.Rate(now, n.self, m.id); ok {
		if at := now.Add(-age); !e.Valid() || at.After(e.At) {
			e = measure.RateEstimate{Rate: rate, Kind: measure.RateKind(kind), At: at}
		}
	}
	return e
}

// trains sends the trains that are due within the budget.
func (n *Node) trains(now time.Time) {
	c := &n.cfg.Throughput
	if c.ProbeBudget <= 0 {
		return
	}
	cost := float64(c.trainBytes())
	burst := trainBurst * cost
	if n.tokensAt.IsZero() {
		n.tokens = burst
	} else if dt := now.Sub(n.tokensAt); dt > 0 {
		n.tokens = min(burst, n.tokens+dt.Seconds()*float64(c.ProbeBudget))
	}
	n.tokensAt = now
	for _, m := range n.sortedMembers() {
		if n.tokens < cost {
			return
		}
		if m.state != StateAlive || !m.link.Up(now) || (!m.lastTrain.IsZero() && now.Sub(m.lastTrain) < c.TrainInterval) {
			continue
		}
		if !n.outRate(now, m).Stale(now, c.Refresh) {
			continue
		}
		n.tokens -= float64(n.trainLen(now, m) * (c.TrainSize + measure.IPUDPOverhead))
		n.sendTrain(now, m)
	}
}

// trainTarget is how long a train should keep a link busy: on a link
// whose rate is already known, a train has just enough packets for that
// (at least minTrainPackets, at most TrainPackets), so that it delays the
// traffic behind it by about that much and no more. A link of 20 Mbit/s
// gets 10 packets, one of 200 Mbit/s or more the whole train.
const (
	trainTarget     = 5 * time.Millisecond
	minTrainPackets = 8
)

// trainLen returns the packets of the next train to m.
func (n *Node) trainLen(now time.Time, m *member) int {
	c := &n.cfg.Throughput
	e := n.outRate(now, m)
	if !e.Valid() {
		return c.TrainPackets
	}
	k := int(e.Rate*trainTarget.Seconds()/float64(8*(c.TrainSize+measure.IPUDPOverhead))) + 1
	return min(max(k, minTrainPackets, n.cfg.Throughput.Rate.TrainMinPackets), c.TrainPackets)
}

// sendTrain emits a train to m, its packets back to back in the outbox
// (the shell sends an outbox in one batch).
func (n *Node) sendTrain(now time.Time, m *member) {
	c := &n.cfg.Throughput
	k := n.trainLen(now, m)
	m.lastTrain = now
	n.trainSeq++
	t := wire.Train{Sender: n.self, Receiver: m.id, ID: n.trainSeq, Count: uint16(k)}
	for i := range k {
		t.Index = uint16(i)
		n.emit(m.addr, wire.AppendTrainPacket(nil, &t, c.TrainSize))
	}
	n.counters.TrainsSent++
	n.counters.ProbeBytes += uint64(k * (c.TrainSize + measure.IPUDPOverhead))
}

// onTrain handles a train packet or report, read at rx and handled at
// now.
func (n *Node) onTrain(now, rx time.Time, pkt []byte) error {
	var t wire.Train
	if err := wire.ParseTrain(pkt, &t); err != nil {
		return err
	}
	m, err := n.sender(t.Sender, t.Receiver)
	if err != nil {
		return err
	}
	if t.Report {
		n.counters.TrainReports++
		if t.Rate > 0 {
			m.outRate = measure.RateEstimate{Rate: float64(t.Rate) * 1e3, Kind: measure.RateTrain, At: now}
		}
		return nil
	}
	n.counters.TrainPacketsIn++
	r := n.rateOf(m)
	id := t.ID
	if prev, active := r.TrainID(); active && prev != t.ID {
		id = prev // the packet starts a new train and ends the previous one
	}
	if e, ok := r.OnTrain(rx, t.ID, int(t.Index), int(t.Count), len(pkt)+measure.IPUDPOverhead); ok {
		n.reportTrain(now, m, id, e)
	}
	return nil
}

// reportTrain tells m the rate of train id and puts it in the next link
// state.
func (n *Node) reportTrain(now time.Time, m *member, id uint32, e measure.RateEstimate) {
	got, sent := m.rate.LastTrain()
	n.emit(m.addr, wire.AppendTrainReport(nil, &wire.Train{Sender: n.self, Receiver: m.id, ID: id,
		Index: uint16(min(got, sent)), Count: uint16(max(sent, 1)), Rate: uint32(min(e.Rate/1e3+0.5, float64(^uint32(0))))}))
	n.refreshSoon(now)
}

// expireTrains ends the trains whose last packets did not come.
func (n *Node) expireTrains(now time.Time) {
	for _, m := range n.sortedMembers() {
		if m.rate == nil {
			continue
		}
		id, active := m.rate.TrainID()
		if !active {
			continue
		}
		if e, ok := m.rate.Expire(now); ok && m.state == StateAlive {
			n.reportTrain(now, m, id, e)
		}
	}
}

// RateView is a link's available throughput for the views.
type RateView struct {
	// Rate is in bits per second, zero when nothing is known.
	Rate float64
	Kind string
	Age  time.Duration
}

// ProbeBudget returns the configured probe budget in bytes a second.
func (n *Node) ProbeBudget() int { return n.cfg.Throughput.ProbeBudget }

// PathRate returns the bottleneck rate of path p from this site (bits per
// second) on the matrix of the last route computation.
func (n *Node) PathRate(p []wire.SiteID) (float64, bool) {
	m := n.router.Matrix()
	if m == nil {
		return 0, false
	}
	return m.PathRate(n.self, p)
}

// RateKindName names a rate kind of the wire (wire.RateKind*).
func RateKindName(k uint8) string { return measure.RateKind(k).String() }

// OnBulkMoved tells the node that its data path moved a flow to dst into
// the bulk class at now (datapath.Stats.BulkMoves): a path to dst that
// collapsed under that flow's queue may be taken again as soon as the
// queue drains (routing.Router.BulkMoved).
func (n *Node) OnBulkMoved(now time.Time, dst wire.SiteID) {
	n.observe(now)
	n.router.BulkMoved(now, dst)
}
