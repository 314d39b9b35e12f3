// Package tcpterm is the I/O shell of the key router's TCP terminator
// (issue 17, item 3; docs/kv.md): it terminates clients' TCP connections
// to a network's pool virtual addresses at their own gateway and sends
// their requests over pooled connections to the servers that own the
// keys. The protocol is package proxy's; this package holds the sockets,
// goroutines, limits and timeouts.
//
// The TCP endpoint is gVisor's user-space TCP/IP stack (no capability
// beyond the agent's CAP_NET_ADMIN, nothing left behind by a crash). It
// has a TAP device of its own on the site's bridge, with the MAC
// router.TermMAC(site), through which its frames to servers at other
// sites reach the data path and their replies come back; the frames of
// clients and of this site's servers are handed over by the router in the
// process (Terminator.Input) and written straight to the network's TAP
// device. The router is its link layer: it has no ARP.
//
//	client ──► router ──Input──► gVisor ──► client reader ──► proxy.Session
//	                                                           │ requests
//	client ◄── network TAP ◄── gVisor ◄── client writer        ▼
//	                                          ▲        pooled connection
//	                                          │ replies (proxy.Upstream)
//	                                          └────── server reader ◄── server
//
// Per client connection: a reader (feeds the session, writes its requests
// to the server connections the client is pinned to) and a writer (hands
// the client its replies in order). Per pooled connection: a reader
// (frames replies and hands them to their sessions). Locks are taken in
// one order (a pooled connection's, then a session's) and none is held
// across a socket write.
package tcpterm
