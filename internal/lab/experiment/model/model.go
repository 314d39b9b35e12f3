// Package model predicts the latency of ZooKeeper (and etcd) operations
// from the one-way delays between sites.
//
// Both systems commit a write once a quorum has logged it: with three
// servers, the leader and its fastest follower. A write sent by a client to
// server F is forwarded to the leader L, proposed to every follower,
// committed when the first follower's acknowledgement returns, and the
// commit travels back to F, which answers the client:
//
//	write(F) = RTT(client, F) + RTT(F, L) + min over followers f of RTT(L, f)
//
// (RTT(F, L) is zero when F is the leader). A plain ZooKeeper read (and an
// etcd serializable read) is served by F alone: read(F) = RTT(client, F).
//
// On slow links the 1 KB value also takes time to transmit: a Net may add
// the transmission time of the messages that carry it (the request from
// the client to F and F's forward to L for a write, L's proposals to the
// followers, F's answer to a read); the acknowledgements and commits are
// small.
// Every RTT here is a sum of two one-way path delays, so offsets between
// unsynchronised clocks cancel and the offset-shifted delays detour
// measures can be used as they are.
package model

import (
	"fmt"
	"math"
)

// Delays gives the one-way delay in milliseconds of the path currently
// used from one site to another; a site to itself is zero.
type Delays func(from, to string) (float64, bool)

// RTT is the round trip between a and b: zero for a == b.
func RTT(d Delays, a, b string) (float64, error) {
	if a == b {
		return 0, nil
	}
	ab, ok1 := d(a, b)
	ba, ok2 := d(b, a)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("model: no delay between %s and %s", a, b)
	}
	return ab + ba, nil
}

// Quorum describes a replicated store: where its leader is and who its
// followers are.
type Quorum struct {
	Leader    string
	Followers []string
}

// Net is what the model knows of the network: the one-way delay of every
// path and, optionally, the time to transmit a message carrying the value
// along it (Tx, in ms; nil for none).
type Net struct {
	Delay Delays
	Tx    func(from, to string) float64
}

func (n Net) tx(from, to string) float64 {
	if n.Tx == nil || from == to {
		return 0
	}
	return n.Tx(from, to)
}

// Read predicts a local read through server F by a client at site c.
func Read(n Net, c, f string) (float64, error) {
	r, err := RTT(n.Delay, c, f)
	return r + n.tx(f, c), err
}

// Write predicts a write through server F by a client at site c.
func Write(n Net, q Quorum, c, f string) (float64, error) {
	d := n.Delay
	client, err := RTT(d, c, f)
	if err != nil {
		return 0, err
	}
	client += n.tx(c, f)
	forward, err := RTT(d, f, q.Leader)
	if err != nil {
		return 0, err
	}
	forward += n.tx(f, q.Leader)
	commit := math.Inf(1)
	for _, fol := range q.Followers {
		r, err := RTT(d, q.Leader, fol)
		if err != nil {
			return 0, err
		}
		commit = math.Min(commit, r+n.tx(q.Leader, fol))
	}
	if math.IsInf(commit, 1) {
		return 0, fmt.Errorf("model: quorum without followers")
	}
	return client + forward + commit, nil
}

// Matrix is a table of one-way delays usable as Delays.
type Matrix map[[2]string]float64

// Delays returns the matrix as a Delays function.
func (m Matrix) Delays() Delays {
	return func(from, to string) (float64, bool) {
		if from == to {
			return 0, true
		}
		v, ok := m[[2]string{from, to}]
		return v, ok
	}
}

// PathDelays turns per-link delays and the path each site uses to each
// other site into path delays: the delay from a to b is the sum of the
// links along path(a, b) (a list of sites starting at a and ending at b).
// It sums any per-link quantity the same way, e.g. transmission times.
func PathDelays(links Matrix, path func(from, to string) []string) Matrix {
	out := Matrix{}
	sites := map[string]bool{}
	for k := range links {
		sites[k[0]], sites[k[1]] = true, true
	}
	for a := range sites {
		for b := range sites {
			if a == b {
				continue
			}
			p := path(a, b)
			if len(p) < 2 {
				p = []string{a, b}
			}
			sum, ok := 0.0, true
			for i := 0; i+1 < len(p); i++ {
				v, found := links[[2]string{p[i], p[i+1]}]
				ok = ok && found
				sum += v
			}
			if ok {
				out[[2]string{a, b}] = sum
			}
		}
	}
	return out
}

// TransmitMs is the time in ms to send size bytes at rate bits per second
// (zero for an unlimited link).
func TransmitMs(size int, rateBPS uint64) float64 {
	if rateBPS == 0 {
		return 0
	}
	return float64(size) * 8 / float64(rateBPS) * 1000
}
