// Package frame parses and builds the headers of the Ethernet frames that
// hosts hand to a gateway: Ethernet II with at most one 802.1Q VLAN tag,
// ARP for IPv4 over Ethernet, IPv4, IPv6 with its common extension
// headers, UDP and TCP, and the Internet checksum with its pseudo headers
// and incremental updates (RFC 1071, RFC 1624).
//
// Everything is a view over the caller's bytes. Parse fills a Frame with
// offsets into the frame; IPv4, IPv6, TCP, UDP and ARP are byte slices
// aliasing the frame, with accessor methods. Nothing here copies a frame,
// allocates or panics: every length is checked before a byte is read, and
// a frame that does not parse gives ErrTruncated, ErrMalformed or
// ErrNotIP.
//
// The package states what a frame is, not what to do with it: which
// frames the MSS clamp, the ICMP "too big" answer, the offload's splitting
// and coalescing or the key router accept (fragments, IP options,
// extension headers, a TCP header that does not parse) is decided by the
// callers, with the Frame's fields.
//
// # What is parsed
//
//   - Ethernet II, and one 802.1Q tag (TPID 0x8100). An 802.1ad outer tag
//     (0x88a8) or a second tag is not unwrapped: its EtherType is reported
//     as the frame's.
//   - IPv4: header length and options, total length (a frame may carry
//     padding after it), flags and fragment offset, protocol.
//   - IPv6: the fixed header, then the extension headers hop-by-hop
//     options (0), routing (43), fragment (44) and destination options
//     (60) are walked to the upper-layer header. Any other next header
//     ends the walk and is reported as the protocol: AH (51), ESP (50),
//     mobility (135), HIP (139), shim6 (140) and experimental headers are
//     not walked. A fragment header with a non-zero offset ends the walk
//     too (the upper-layer header is in the first fragment). Jumbograms
//     (RFC 2675, payload length 0) are not parsed.
//   - TCP: ports, sequence and acknowledgment numbers, data offset,
//     flags, window, checksum, and a walk of the options to the MSS.
//   - UDP: ports, length, checksum.
//   - ARP requests and replies for IPv4 over Ethernet, and the reply to a
//     request.
//   - The 5-tuple and DSCP of an unfragmented TCP or UDP packet
//     (ParseFlow), which the data path keeps its flow classes by.
//
// # Who uses it
//
// internal/edge (MSS clamping, ICMP "fragmentation needed" and "packet
// too big"), internal/offload (TSO/GSO splitting, GRO coalescing) and the
// memcached key router (answering ARP for a virtual address, rewriting a
// request's destination MAC, address and port), and internal/datapath
// (flow classes: bulk or latency, per 5-tuple; docs/bulk.md). See docs/frames.md.
package frame

import "errors"

// Errors of the parsers.
var (
	// ErrTruncated: the frame ends before a header, or before the end of
	// the IP packet that its length field gives.
	ErrTruncated = errors.New("frame: truncated")
	// ErrMalformed: a version, a header length or an extension header
	// contradicts the rest of the packet.
	ErrMalformed = errors.New("frame: malformed")
	// ErrNotIP: the EtherType is neither IPv4 nor IPv6 (ARP, for
	// example); the link fields of the Frame are filled in.
	ErrNotIP = errors.New("frame: not IP")
)
