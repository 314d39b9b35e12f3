// Package router decides, for one Ethernet frame at a time, what a gateway
// does with memcached traffic to a pool's virtual address: it is the key
// router of issue 17 without any I/O. The data path hands it the frames it
// reads from a network's TAP device (Worker.Egress) and the frames it is
// about to deliver to it from the overlay (Table.Ingress); the router
// rewrites them in place or builds new ones and says where each goes. Time
// is an argument (monotonic nanoseconds), and after its first calls a
// Worker allocates nothing per packet.
//
// # What the gateways do
//
// A client at site A sends a UDP datagram to the pool's virtual address
// VIP:port. A's gateway answers the client's ARP for the VIP with the
// pool's virtual MAC (VirtualMAC), so the datagram reaches the TAP device:
//
//	client ──► A's gateway (Egress)
//	           parse the request, owner = ring owner, or ring.Next when
//	           the owner is down; rewrite dst IP:port to the server's
//
//	owner at site B:   dst MAC = virtual MAC (B sets the real one) ──► overlay ──►
//	                   B's gateway (Ingress): dst MAC = the server's MAC
//	                   ──► server; the server replies to the client
//	                   (whose address it saw) ──► overlay ──►
//	                   A's gateway (Ingress): src IP:port = VIP:port,
//	                   src MAC = virtual MAC ──► client
//
//	owner at site A:   dst MAC = the server's MAC, src = VIP:slot (a flow
//	                   slot), src MAC = virtual MAC ──► back to the TAP ──►
//	                   bridge ──► server; the server replies to VIP:slot
//	                   ──► bridge ──► A's gateway (Egress): dst = the
//	                   client of the slot, src = VIP:port ──► client
//
// A multi-key ASCII get whose keys live on several servers, and a
// datagram holding a pipeline of requests, are split into one datagram per
// server under the same request id (memcache.Splitter): the client gets
// one reply datagram per server, each ending in its own END (or MN).
//
// TCP to a virtual address is terminated at the client's gateway by the
// TCP terminator (package tcpterm), whose link layer the router is; the
// frames and the addressing are drawn in tcp.go.
//
// # State
//
// The Table is immutable but for per-server atomics written by the
// agent (health, the server's MAC) and by the router (counters, the time
// of the last reply and of the first unanswered request, for passive
// failure detection). Two bounded tables of soft state exist:
//
//   - Flow slots (Worker, one per TAP device loop): for pools with a
//     server at this site, a request routed to a local server gets the
//     source VIP:FlowPortBase+slot, the slot remembering the client's IP,
//     port and MAC. One slot per client socket (not per request), at most
//     FlowSlots (4096) of them, each freed 30 s after its last request; a
//     client that finds no free slot among the 8 its address hashes to
//     is dropped and counted (kv_dropped_flows).
//   - Client marks (Table, shared): the egress stamps hash(client IP,
//     port) in a table of 65,536 32-bit times when it sends a request to a
//     remote server, and the ingress rewrites a pool server's datagram
//     back to VIP:port only when its destination was stamped within the
//     last minute. A host that talks to a server directly (client-side
//     hashing) therefore keeps getting the server's own address, except
//     in the rare collision with a VIP client's hash within that minute.
//
// A pool whose shards have several replicas (issue 18, replicas.go) keeps
// a third: per request in flight, the replicas it went to and what came
// back (PendingSlots entries, given up after PendingTTL), and per key hash
// the value size last seen, under one mutex per pool with the choosers
// of package replica. It sends a read to one replica and a write to all,
// and forwards the first reply only. A Worker also holds up to 32 read
// frames for hedging.
//
// # Safety
//
// Only hosts of the network's subnet are answered or routed; frames
// arriving from the underlay reach the router only through the overlay's
// authenticated data path, never as raw UDP. Each source address draws
// from a token bucket (RateLimit requests per second, a burst of one
// fifth of a second), hashed into 1024 buckets per Worker.
package router
