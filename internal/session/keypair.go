package session

import (
	"crypto/cipher"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/chacha20poly1305"
)

// keypair is one established session with a peer: the keys of both
// directions, derived from one Noise handshake, their send counters and
// receive replay windows.
//
// send and recv seal frames and control messages; hopSend and hopRecv,
// derived from them with a keyed BLAKE2s, compute the hop tags of relayed
// packets with their own counters, so the two uses never share a nonce.
type keypair struct {
	send, recv       cipher.AEAD
	hopSend, hopRecv cipher.AEAD
	local, remote    uint32 // key ids: ours (in packets to us), theirs
	created          time.Time
	rekeyAge         time.Duration // renew at this age (see Node.rekeyAge)
	initiator        bool

	sendCtr   atomic.Uint64
	hopCtr    atomic.Uint64
	received  atomic.Uint64 // authenticated packets received
	window    replayWindow
	hopWindow replayWindow
}

// hopLabel separates the hop-tag keys from the session keys.
const hopLabel = "detour hop tag v1"

// newKeypair builds a keypair from the two Noise transport keys.
func newKeypair(send, recv [32]byte, local, remote uint32, now time.Time, rekeyAge time.Duration, initiator bool) *keypair {
	return &keypair{
		send:      mustAEAD(send),
		recv:      mustAEAD(recv),
		hopSend:   mustAEAD(deriveHopKey(send)),
		hopRecv:   mustAEAD(deriveHopKey(recv)),
		local:     local,
		remote:    remote,
		created:   now,
		rekeyAge:  rekeyAge,
		initiator: initiator,
	}
}

// deriveHopKey returns BLAKE2s-256 keyed with k over hopLabel.
func deriveHopKey(k [32]byte) [32]byte {
	mac, err := blake2s.New256(k[:])
	if err != nil {
		panic(err) // only for a key longer than 32 bytes
	}
	mac.Write([]byte(hopLabel))
	var out [32]byte
	copy(out[:], mac.Sum(nil))
	return out
}

func mustAEAD(k [32]byte) cipher.AEAD {
	a, err := chacha20poly1305.New(k[:])
	if err != nil {
		panic(err) // only for a key of the wrong length
	}
	return a
}

// nextCounter reserves the next send counter.
func (k *keypair) nextCounter() (uint64, error) {
	c := k.sendCtr.Add(1) - 1
	if c >= RejectAfterMessages {
		return 0, ErrCounterExhausted
	}
	return c, nil
}

// nextHopCounter reserves the next hop-tag counter.
func (k *keypair) nextHopCounter() (uint64, error) {
	c := k.hopCtr.Add(1) - 1
	if c >= RejectAfterMessages {
		return 0, ErrCounterExhausted
	}
	return c, nil
}

// activity is a number that changes whenever the keypair is used.
func (k *keypair) activity() uint64 {
	return k.sendCtr.Load() + k.hopCtr.Load() + k.received.Load()
}
