package session

import "sync/atomic"

// Stats counts what the node did and dropped, for metrics and status.
type Stats struct {
	Initiations        uint64 // initiations sent (including retries)
	Responses          uint64 // initiations answered
	Resent             uint64 // initiations and responses sent again unchanged (no Diffie-Hellman)
	Established        uint64 // handshakes completed as initiator
	Collisions         uint64 // initiations dropped because ours won
	HandshakeMalformed uint64 // unparseable handshake messages
	HandshakeRejected  uint64 // failed authentication, unknown key, rate limit, no matching initiation
	InitiationReplays  uint64 // initiations whose timestamp was not newer
	UnknownPeer        uint64 // messages from sites not in the accepted set
	NoSession          uint64 // packets to or from a site without a matching session
	AuthFailures       uint64 // sealed packets that failed authentication (end to end)
	HopAuthFailures    uint64 // relayed packets whose hop tag failed
	Replays            uint64 // authenticated packets dropped as replays (or too old)
	Malformed          uint64 // sealed packets that do not parse or are misdirected
	Expired            uint64 // keypairs dropped for age or disuse
	GaveUp             uint64 // handshakes abandoned after RekeyAttemptTime
	BadMAC1            uint64 // handshake messages without a valid mac1 (no Diffie-Hellman spent)
	CookiesReceived    uint64 // cookie replies taken for a pending initiation
	BadCookieReplies   uint64 // cookie replies that matched no initiation or did not open
	Forgotten          uint64 // peers whose sessions were dropped by Forget
	Admitted           uint64 // sites admitted or given a new key at run time (Admit)
	Removed            uint64 // sites taken out of the accepted set (Remove)
}

type counters struct {
	initiations, responses, established, collisions, resent        atomic.Uint64
	handshakeMalformed, handshakeRejected, initiationReplays       atomic.Uint64
	unknownPeer, noSession, authFailures, hopAuthFailures, replays atomic.Uint64
	malformed, expired, gaveUp                                     atomic.Uint64
	badMAC1, cookiesReceived, badCookieReplies, forgotten          atomic.Uint64
	admitted, removed                                              atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (n *Node) Stats() Stats {
	c := &n.stats
	return Stats{
		Initiations: c.initiations.Load(), Responses: c.responses.Load(), Resent: c.resent.Load(),
		Established: c.established.Load(), Collisions: c.collisions.Load(),
		HandshakeMalformed: c.handshakeMalformed.Load(), HandshakeRejected: c.handshakeRejected.Load(),
		InitiationReplays: c.initiationReplays.Load(), UnknownPeer: c.unknownPeer.Load(),
		NoSession: c.noSession.Load(), AuthFailures: c.authFailures.Load(),
		HopAuthFailures: c.hopAuthFailures.Load(), Replays: c.replays.Load(),
		Malformed: c.malformed.Load(), Expired: c.expired.Load(), GaveUp: c.gaveUp.Load(),
		BadMAC1: c.badMAC1.Load(), CookiesReceived: c.cookiesReceived.Load(), BadCookieReplies: c.badCookieReplies.Load(),
		Forgotten: c.forgotten.Load(), Admitted: c.admitted.Load(), Removed: c.removed.Load(),
	}
}
