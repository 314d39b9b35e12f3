// Package session is detour's secure channel between sites: Noise IK
// handshakes between site keys, end-to-end sealing of frames, hop-by-hop
// authentication of relayed packets, and sealing of control messages.
//
// # Model
//
// Every site has a Curve25519 key pair (package keys) and a configured
// accepted set: the public key of each site it talks to. A Node holds this
// site's key, the accepted set and, per peer, up to three keypairs
// (current, previous, next) as in WireGuard. Sessions come from a
// Noise_IK_25519_ChaChaPoly_BLAKE2s handshake (mutual authentication,
// forward secrecy): the initiation carries the sender's site ID and key
// id in the prologue and a TAI64N timestamp in its payload, so a replayed
// initiation cannot reset a session; the responder accepts only an
// initiator whose static key is the one listed for the site ID it claims.
// When both sites initiate at once, the higher site ID's initiation wins
// and the lower site answers it. Initiations are retried after 0.5, 1, 2,
// 4, 8, 8... s, for 90 s at most. The initiator of a session rekeys after
// 120 s (the responder after 130 s) or 2^60 messages; the keypair it
// replaces stays valid for receiving until the next rotation or 180 s, so
// nothing in flight is lost. Keypairs expire after 180 s, and all of a
// peer's after 60 s without traffic.
//
// Data packets are sealed end to end between source and destination with
// ChaCha20-Poly1305 under their session, with a 64-bit counter carried in
// the packet (wire.SealedData) and the whole header but the hop index as
// associated data; a relay can neither read nor alter the frame. Packets
// that cross relays also carry a hop tag: a Poly1305 tag over the header
// and the counters, under a key derived from the session of the link being
// crossed, with its own per-link counter. A relay checks it (and its own
// replay window) before forwarding, so it relays only for authenticated
// neighbours, and re-tags for the next relay. Receivers keep a sliding
// replay window of 8128 counters per key (as wireguard-go).
//
// # Floods of handshakes
//
// A Diffie-Hellman costs a responder about 130 µs, so handshakes are
// screened first, as in WireGuard (paper §5.4). Both handshake messages end
// with mac1, keyed by a hash of the receiver's public key, which
// HandleHandshake checks before anything else: a sender who does not know
// the key costs one BLAKE2s. A Guard (guard.go, pure: time and queue
// length passed in) also measures the rate of handshake work (messages
// with a valid mac1) and, above GuardConfig.LoadRate or with a long queue,
// puts the site under load for a second: an initiation then needs mac2,
// keyed by a cookie bound to its source address and a secret renewed
// every two minutes, or it gets a cookie reply (XChaCha20-Poly1305 under a
// hash of the responder's key, bound to the initiation's mac1) and no
// work; the initiator's next retry carries mac2. A token bucket per source
// address (a bounded table, trusted addresses apart) limits the work that
// remains and the cookie replies; cookie replies to untrusted sources are
// capped as a whole.
//
// # Per-packet overhead
//
//	data, direct path:      28 bytes (12 e2e key id + counter, 16 tag)
//	data, through relays:   56 bytes (28 + 4 hop key id, 8 hop counter, 16 hop tag)
//	sealed control message: 36 bytes (type 10: 16 header, 16 tag + the inner datagram)
//	handshake:              152-byte initiation, 96-byte response, 36-byte keepalive,
//	                        68-byte cookie reply (only under load)
//
// These come on top of the data header (20 + 4 per path entry) and the
// UDP/IP headers; wire's layout.go draws the whole packet, and
// wire.InnerMTU gives the largest host packet that fits.
//
// # Integration: agent configuration
//
// Add `private_key` (parse with keys.ParsePrivate, or a keys.PrivateKey
// field, which implements encoding.TextUnmarshaler) and a `public_key` per
// peer (keys.ParsePublic); both give one error wrapping keys.ErrBadKey.
// Build the node once: NewNode(Config{Self, Private, Peers: site -> key}).
// Sites learned at run time through membership must be in Peers to be
// talked to (the accepted set is fixed for the Node's life).
//
// # Integration: data path (all calls allocation-free, safe concurrently)
//
// Egress (device loop), per destination copy:
//
//	// Read the frame at buf[wire.Headroom:]; keep wire.Tailroom bytes
//	// after it. With h filled by Routes.Path (Source = self, Hop = 0):
//	start := wire.Headroom - wire.FrameOffset(int(h.PathLen), true)
//	n, err := node.SealData(buf[start:], &h, frameLen) // writes header too
//	// send buf[start:start+n] to the first hop; on ErrNoSession count and
//	// drop (the next Tick starts the handshake).
//
// Ingress (underlay loop), after wire.ParseData(pkt, &h) returned off and
// h.Receiver() == self:
//
//	if h.Flags&wire.DataFlagSealed == 0 { drop } // when keys are configured
//	if int(h.Hop) < int(h.PathLen)-1 {
//		next, err := node.Relay(pkt, &h, off) // checks hop tag, sets hop, re-tags
//		// on success send pkt (same length) to Routes.Addr(next);
//		// this replaces wire.SetHop.
//	} else {
//		frame, err := node.OpenData(pkt, &h, off) // decrypts in place, replay check
//		// deliver frame (it aliases pkt); h.Source is authenticated.
//	}
//
// Errors are values to count (errors.Is): ErrReplay, ErrAuth, ErrNoSession,
// ErrUnknownPeer, ErrMisdirected, ErrNotSealed, wire.ErrTruncated. The Node
// counts them too (Stats), for metrics: Replays, AuthFailures,
// HopAuthFailures, ...
//
// # Integration: control plane
//
// Datagrams of type wire.TypeHandshakeInit and wire.TypeHandshakeResponse
// go to HandleHandshake(now, pkt); its Result.Reply is sent back to the
// address the message came from. wire.TypeSealed datagrams go to
// OpenControl(pkt), which returns the authenticated sender and the inner
// control datagram (a probe, link state, hello...) to parse as before; an
// empty inner datagram is a keepalive. Every control message is sent
// sealed: SealControl(buf[:0], dst, encodedProbe). Unsealed control
// datagrams (types 2-7) are dropped when keys are configured, so a forged
// probe cannot move routes, and probe timestamps cannot be replayed.
//
// Call Tick(now) every 100 ms (at least every second) and send what it
// returns to the addresses of the named sites: retries, rekeys, handshakes
// for sites a send found without a session. Keypair expiry is enforced by
// Tick, so its period bounds how long past 180 s a key may be used.
//
// Bootstrap: a joining site knows one member's address and the public keys
// of all sites it accepts. It calls Connect(now, member) and sends the
// initiation; once HandleHandshake reports Established it sends its hello
// sealed; the member answers with the members list, sealed. The joining
// site then calls Connect for every member it learns (and members for it,
// when its hello reaches them) before probing them; probes to a site that
// is not Ready yet are skipped, not sent in clear. Sessions between all
// pairs are needed: every relay needs one with its neighbours on the path
// (hop tags) and every source one with every destination (end to end);
// probing every pair keeps them all alive.
//
// All time arguments are time.Time values from time.Now(): timers use
// their monotonic reading, initiation timestamps their wall clock.
package session
