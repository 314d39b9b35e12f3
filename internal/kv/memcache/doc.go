// Package memcache parses memcached requests as they arrive at a gateway
// that routes them by key, and finds where replies end in a stream. It is
// pure: every function works on the caller's buffers, returns keys and
// lines as sub-slices of them, allocates nothing on the parse path and
// does no I/O. It does not parse Ethernet, IP or UDP; it takes the UDP
// payload or the TCP byte stream.
//
// The errors a malformed request gets are the ones memcached 1.6 itself
// sends (proto_text.c, proto_bin.c and memcached.c of 1.6.18, the version
// Debian 12 ships): the text of an ASCII or meta error line, or the status
// and message of a binary error reply, or silence where memcached drops
// the datagram or closes the connection.
//
// # UDP frame header
//
// Every memcached datagram starts with an 8-byte header, big-endian:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-------------------------------+-------------------------------+
//	|          request id           |        sequence number        |
//	+-------------------------------+-------------------------------+
//	|  total datagrams in message   |       reserved (zero)         |
//	+-------------------------------+-------------------------------+
//
// memcached ignores datagrams of 8 bytes or fewer and requests that say
// they span more than one datagram (total ≠ 1); ParseFrame reports both.
//
// # Binary protocol
//
// A binary request is a 24-byte header, extras, key and value:
//
//	 0       1       2       3       4       5       6       7
//	+-------+-------+-------+-------+-------+-------+-------+-------+
//	| magic |opcode |  key length   |extlen |dtype  |   vbucket     |
//	+-------+-------+-------+-------+-------+-------+-------+-------+
//	|         total body length     |            opaque             |
//	+-------+-------+-------+-------+-------+-------+-------+-------+
//	|                              cas                              |
//	+-------+-------+-------+-------+-------+-------+-------+-------+
//	| extras (extlen) | key (key length) | value (body − key − ext) |
//
// magic is 0x80 for a request and 0x81 for a reply; in a reply the
// vbucket field holds the status.
//
// # ASCII and meta protocols
//
// A request is a line ending in "\n" (memcached drops one "\r" before
// it) whose tokens are separated by single spaces; storage commands (set,
// add, replace, append, prepend, cas, ms) are followed by a data block of
// the announced length and "\r\n":
//
//	get <key>*                     gets <key>*
//	gat <exptime> <key>*           gats <exptime> <key>*
//	touch <key> <exptime> [noreply]
//	set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]
//	cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]
//	delete <key> [0] [noreply]     incr|decr <key> <value> [noreply]
//	version
//	mg <key> <flag>*               ms <key> <datalen> <flag>*
//	md <key> <flag>*               ma <key> <flag>*
//	mn                             me <key>
//
// A meta request with the flag b carries its key in base64; memcached
// decodes it before it hashes or stores it, so a router must hash the
// decoded key (DecodeKey).
//
// # Routing
//
// Parse gives a request's command, whether it writes, and its keys.
// Splitter cuts a multi-key get, or a pipeline of requests in one
// datagram, into one request per owning server. ReplyEnd finds the end of
// one reply in a stream so a TCP terminator can keep pipelined replies in
// order.
package memcache
