// Package store holds what the replicated stores of the experiments
// (package zoo for ZooKeeper, package etcd) share: a member of the
// ensemble (Server), how its process is run (Runner) and how it is
// reached (Dialer), and the timed operations (Op, Sample) with the two
// loops that time them (Run, Alternate).
//
// The stores know nothing about the testbed: the experiment gives them a
// Runner that places each server in a network namespace and a Dialer that
// opens sockets in the client's.
package store

import (
	"context"
	"net"
	"time"

	"github.com/detour-overlay/detour/internal/lab/proc"
)

// Server is one member of a replicated store.
type Server struct {
	// Name identifies the server (a site name in the experiment).
	Name string
	// ID is the server's number in the ensemble (ZooKeeper's myid; with
	// equal data the highest ID is elected leader).
	ID int
	// Addr is the IP address the server binds and the others reach it at.
	Addr string
}

// Dialer opens a TCP connection; it has the signature of the ZooKeeper
// client's dialer so that one value serves both stores.
type Dialer func(network, address string, timeout time.Duration) (net.Conn, error)

// Runner builds the command that runs argv on one server's machine (for
// the testbed, inside that site's host namespace). It must not start it.
type Runner = proc.Runner

// Op is a kind of operation the experiment times.
type Op string

// The operations: a plain (local) read of an item and an overwrite of it.
const (
	Read  Op = "read"
	Write Op = "write"
)

// Sample is the outcome of one timed operation.
type Sample struct {
	Server  string
	Op      Op
	Seq     int
	Start   time.Time
	Latency time.Duration
	// Err is empty when the operation succeeded.
	Err string
}

// Doer runs one timed operation against one server.
type Doer interface {
	Do(op Op) Sample
}

// Run performs warmup untimed operations of each kind in ops and then n
// timed ones of each kind, one kind after the other, and returns the timed
// samples. It stops early when ctx ends.
func Run(ctx context.Context, d Doer, ops []Op, n, warmup int) []Sample {
	var out []Sample
	for _, op := range ops {
		for i := 0; i < warmup && ctx.Err() == nil; i++ {
			d.Do(op)
		}
		for i := 0; i < n && ctx.Err() == nil; i++ {
			s := d.Do(op)
			s.Seq = i
			out = append(out, s)
		}
	}
	return out
}

// Alternate performs read, write, read, write, … until ctx ends or dur
// has passed, calling each(sample) after every operation (the continuous
// run of the LANMAN paper's Figure 7).
func Alternate(ctx context.Context, d Doer, dur time.Duration, each func(Sample)) {
	end := time.Now().Add(dur)
	for i := 0; ctx.Err() == nil && time.Now().Before(end); i++ {
		op := Read
		if i%2 == 1 {
			op = Write
		}
		s := d.Do(op)
		s.Seq = i
		each(s)
	}
}
