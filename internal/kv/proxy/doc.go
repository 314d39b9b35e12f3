// Package proxy is the protocol half of the key router's TCP terminator
// (issue 17, item 3): the state of one client connection to a pool's
// virtual address (Session) and of one pooled connection to a server
// (Upstream), without sockets, goroutines or clocks. The I/O shell
// (package tcpterm) feeds them bytes and writes what they return.
//
// # A client connection
//
// Session.Feed takes the client's bytes, parses every complete request
// (memcache.Parse: ASCII, meta and binary) and returns what to send to
// which server. Each request takes one slot in a queue of replies, in
// request order; replies are handed to the client strictly in that order,
// whichever server answers first:
//
//	client:   get a b c | set d | mg e v | mn
//	slots:    [1: get, 2 parts] [2: set] [3: mg] [4: MN, answered here]
//	servers:  S0 ◄─ get a c       S1 ◄─ get b      S1 ◄─ set d
//	          S0 ◄─ mg e v
//	replies:  S1: STORED (slot 2) arrives first and waits for slot 1;
//	          S0: VALUE a… VALUE c… END and S1: VALUE b… END complete
//	          slot 1 as VALUE a, VALUE c, VALUE b, END (one END);
//	          then slot 2, slot 3 and slot 4 leave in that order.
//
// A reply with a value is not held until it is whole: the Upstream hands
// out what has surely arrived of it (whole lines, and its data so far)
// and, while its slot is the first waiting, the Session passes each
// piece straight on, so a 1 MB value flows to the client while the
// server is still sending it. A slot behind another keeps its pieces
// until it is first. A server connection lost in the middle of a reply
// the client has begun to read closes the client's connection, as the
// server's own would have.
//
// A multi-key ASCII get whose keys live on several servers is split per
// server (memcache.Splitter) and merged back into one reply ending in a
// single END; the values come grouped by server, in the order of each
// server's first key (clients match values by key). A request without a
// key that only marks a point in the pipeline (mn, binary noop) is
// answered by the Session itself once every earlier reply has left;
// version goes to any usable server; quit closes the connection after
// the earlier replies (binary quit answers first, as memcached does).
// Malformed requests get memcached's own error (memcache.Error) in their
// slot, and the connection is closed where memcached closes it.
//
// # A pooled server connection
//
// Requests of many sessions share a server's connections; memcached
// answers the requests of one connection in order, so an Upstream keeps
// a FIFO of the slots waiting on it and frames the reply stream with
// memcache.ReplyEnd. A quiet request (ASCII noreply, meta q, binary
// getq, setq, …) may get no reply at all, so the Upstream sends a
// sentinel behind it (mn on a text connection, a binary noop on a binary
// one: memcached connections speak the protocol of their first byte, so
// each server has text and binary connections apart) and hands the slot
// everything the server said before the sentinel's reply:
//
//	sent:     set k 0 0 1 noreply\r\n x\r\n mn\r\n    (slot 7, quiet)
//	received: MN\r\n                                  → slot 7 gets nothing
//
// With a Router that is Replicated, a request that writes goes to every
// usable replica of its server, one part each; the client gets the
// first replica's reply once every replica has answered. With a Router
// that is a Reader, a read goes to the replica Read picks, and its Send
// is marked Read so that the shell can time the reply for the chooser.
//
// A server connection that fails answers each slot still waiting on it
// with SERVER_ERROR (binary status 0x0086, temporary failure); the
// request is not retried, since a write may or may not have been done.
//
// # Bounds
//
// A Session holds at most MaxPending slots, and takes no more requests
// while MaxOut bytes of replies wait (for the client to read them, or
// behind an earlier reply); past either it asks for no more input
// (WantInput), which the shell turns into TCP backpressure on the
// client. A request longer than MaxRequest closes the connection.
package proxy
