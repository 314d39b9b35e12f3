package site

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/keys"
	"github.com/detour-overlay/detour/internal/session"
	"github.com/detour-overlay/detour/internal/wire"
)

// trust admits sites by certificate (package ca) on top of the configured
// accepted set, and applies and floods revocations. A site presents its
// certificate, in the clear, to an address it has a message for but whose
// site it cannot handshake with (a bootstrap address known by address
// only, or a member whose key it lacks), asking for the other's in reply;
// a verified certificate admits its site's key into the session node, and
// the handshake follows as with a configured peer. Nothing else of the
// overlay changes when a site joins.
//
// Either certificate can be lost (the other site not listening yet, loss
// on the path), and the site that received the other's certificate then
// has no reason of its own to present again: it holds the key it needs,
// and its handshakes are refused by a site that lacks its key. So a site
// that receives a handshake from a site it does not know presents its
// certificate to the sender and asks for the sender's (Handshaken), and
// the answers to such requests are rate-limited apart from the requests,
// so that a request of this site's own that was lost does not silence
// its answer.
type trust struct {
	auth *ca.Authority
	// cert is this site's certificate message (nil: it has none and can
	// only be admitted by configured keys).
	cert, certReply []byte
	// issued is when the certificate each admitted site presented was
	// issued, to tell which of them a revocation covers.
	issued map[wire.SiteID]time.Time
	// presented rate-limits certificates sent to an address, requests
	// and answers apart.
	presented map[presentation]time.Time
	// revocations are the accepted revocation messages, given to every
	// site admitted later, so a site that was away learns them.
	revocations [][]byte
	// verified remembers the certificates verified, by their bytes, so
	// that one presented again costs no signature check; budget and
	// budgetAt bound the signature checks of certificates not seen before
	// to maxVerifyRate a second, so a flood of forged certificates in the
	// clear cannot take the control loop's time.
	verified map[string]time.Time
	budget   int
	budgetAt time.Time
	// Counters.
	certsAccepted, certsRefused, certsThrottled, revocationsApplied, revocationsRefused uint64
}

// maxVerifyRate is the most certificates not seen before whose signature
// a site checks in a second.
const maxVerifyRate = 100

// verify checks a certificate, from the cache when its bytes were
// verified before (and are still valid at now), within the budget
// otherwise; ok is false when the budget is spent.
func (t *trust) verify(body []byte, now time.Time) (cert ca.Certificate, ok bool, err error) {
	if exp, hit := t.verified[string(body)]; hit && now.Before(exp) {
		c, err := ca.ParseCertificate(body)
		if err == nil && t.auth.Revoked(c.Name, c.Issued) {
			err = ca.ErrRevoked
		}
		return c, true, err
	}
	if now.Sub(t.budgetAt) >= time.Second {
		t.budget, t.budgetAt = maxVerifyRate, now
	}
	if t.budget <= 0 {
		t.certsThrottled++
		return cert, false, nil
	}
	t.budget--
	cert, err = t.auth.Verify(body, now)
	if err == nil {
		if len(t.verified) >= 4096 {
			clear(t.verified)
		}
		t.verified[string(body)] = cert.Expires
	}
	return cert, true, err
}

// presentInterval is the least time between two certificates sent to one
// address.
const presentInterval = 500 * time.Millisecond

// newTrust returns the trust state of a site with the given authority and
// certificate (either may be missing).
func newTrust(self wire.SiteID, auth *ca.Authority, cert []byte) (*trust, error) {
	t := &trust{auth: auth, issued: map[wire.SiteID]time.Time{}, presented: map[presentation]time.Time{},
		verified: map[string]time.Time{}}
	if len(cert) > 0 {
		var err error
		if t.cert, err = wire.AppendTrust(nil, wire.TypeCertificate, 0, self, cert); err != nil {
			return nil, err
		}
		t.certReply, _ = wire.AppendTrust(nil, wire.TypeCertificate, wire.CertFlagReply, self, cert)
	}
	return t, nil
}

// presentation is what the rate limit of presented certificates counts:
// the address, and whether the certificate asked for one in reply.
type presentation struct {
	to  netip.AddrPort
	ask bool
}

// present sends this site's certificate to an address, asking for its
// certificate in return when reply is set, at most once per
// presentInterval for each address and kind.
func (t *trust) present(now time.Time, to netip.AddrPort, reply bool, send func(netip.AddrPort, []byte)) {
	if t.cert == nil {
		return
	}
	key := presentation{to: to, ask: reply}
	if last, ok := t.presented[key]; ok && now.Sub(last) < presentInterval {
		return
	}
	if len(t.presented) > 4096 { // bound what forged traffic can claim
		clear(t.presented)
	}
	t.presented[key] = now
	if reply {
		send(to, t.certReply)
	} else {
		send(to, t.cert)
	}
}

// onCertificate handles a certificate message from an address: a valid
// certificate admits its site (or its new key) into the session node.
func (c *Core) onCertificate(now time.Time, from netip.AddrPort, pkt []byte) {
	t := c.sec.trust
	flags, sender, body, err := wire.ParseTrust(pkt, wire.TypeCertificate)
	if err != nil || t.auth == nil {
		c.sec.trust.certsRefused++
		return
	}
	cert, ok, err := t.verify(body, now)
	if !ok {
		return // over the budget: the sender presents again later
	}
	if err != nil || wire.SiteIDFromName(cert.Name) != sender || sender == c.node.ID() {
		t.certsRefused++
		return
	}
	changed, err := c.sec.node.Admit(sender, cert.Key)
	if err != nil {
		t.certsRefused++
		return
	}
	t.certsAccepted++
	t.issued[sender] = cert.Issued
	c.sec.learn(sender, from)
	if flags&wire.CertFlagReply != 0 {
		t.present(now, from, false, c.sendNow)
	}
	waiting := c.sec.named(from, sender)
	if changed {
		for _, r := range t.revocations {
			c.sec.seal(now, []Datagram{{To: from, Payload: r}}, c.memberAddrs, c.sendNow)
		}
	}
	switch {
	case c.sec.node.Ready(sender):
		c.sec.release(now, sender, c.sendNow)
	case waiting || len(c.sec.pending[sender]) > 0:
		if init, err := c.sec.node.Connect(now, sender); err == nil && init != nil {
			c.sendNow(from, init)
		}
	}
}

// Revoke applies a revocation (package ca's encoding) given by the
// operator and floods it to every member. It returns the authority's
// error for a revocation that is malformed or not signed by the CA; one
// already applied is not an error and is not flooded again.
func (c *Core) Revoke(now time.Time, rev []byte) error {
	if c.sec == nil || c.sec.trust.auth == nil {
		return ca.ErrSignature
	}
	now = c.observe(now)
	msg, err := wire.AppendTrust(nil, wire.TypeRevocation, 0, c.node.ID(), rev)
	if err != nil {
		return ca.ErrMalformed
	}
	return c.revoke(now, msg, 0)
}

// onRevocation handles a revocation flooded by the member from.
func (c *Core) onRevocation(now time.Time, from wire.SiteID, inner []byte) {
	if c.sec.trust.auth == nil || c.revoke(now, inner, from) != nil {
		c.sec.trust.revocationsRefused++
	}
}

// revoke applies a revocation message and, when it is new, floods it to
// every member but from (zero: the operator gave it) and the revoked site.
// The message is re-sent unchanged: its signature is the CA's, whoever
// forwards it.
func (c *Core) revoke(now time.Time, msg []byte, from wire.SiteID) error {
	t := c.sec.trust
	_, _, body, err := wire.ParseTrust(msg, wire.TypeRevocation)
	if err != nil {
		return err
	}
	r, fresh, err := t.auth.Revoke(body)
	if err != nil || !fresh {
		return err
	}
	t.revocationsApplied++
	t.revocations = append(t.revocations, msg)
	id := wire.SiteIDFromName(r.Name)
	if issued, ok := t.issued[id]; !ok || t.auth.Revoked(r.Name, issued) {
		c.sec.node.Remove(id)
		delete(c.sec.pending, id)
		delete(t.issued, id)
	}
	addrs := c.memberAddrs()
	var out []Datagram
	for _, site := range slices.Sorted(maps.Keys(addrs)) {
		if site != from && site != id {
			out = append(out, Datagram{To: addrs[site], Payload: msg})
		}
	}
	c.sec.seal(now, out, c.memberAddrs, c.sendNow)
	return nil
}

// trustCounters adds the trust counters to out.
func (t *trust) counters(out map[string]uint64) {
	out["trust_certificates_accepted"] = t.certsAccepted
	out["trust_certificates_refused"] = t.certsRefused
	out["trust_certificates_throttled"] = t.certsThrottled
	out["trust_revocations_applied"] = t.revocationsApplied
	out["trust_revocations_refused"] = t.revocationsRefused
}

// unknownPeer reports whether err says a site is not in the accepted set.
func unknownPeer(err error) bool { return err == session.ErrUnknownPeer }

// Rotate gives this site a new key and its certificate (package ca's
// encoding, for the new key): the certificate is sent to every member, and
// a handshake with the new key starts with each of them at once, while
// the sessions made with the old key carry traffic until the new ones
// replace them (session.Node.Rotate), so nothing is lost.
func (c *Core) Rotate(now time.Time, priv keys.PrivateKey, cert []byte) error {
	if c.sec == nil {
		return errors.New("site: rotating a key needs a sealed site")
	}
	now = c.observe(now)
	t, err := newTrust(c.node.ID(), c.sec.trust.auth, cert)
	if err != nil {
		return err
	}
	if t.auth != nil {
		got, err := t.auth.Verify(cert, now)
		if err != nil {
			return err
		}
		if got.Key != priv.Public() || wire.SiteIDFromName(got.Name) != c.node.ID() {
			return errors.New("site: the certificate is not for this site's new key")
		}
	}
	old := c.sec.trust
	old.cert, old.certReply = t.cert, t.certReply
	clear(old.presented)
	addrs := c.memberAddrs()
	for _, site := range slices.Sorted(maps.Keys(addrs)) {
		old.present(now, addrs[site], false, c.sendNow)
	}
	for _, o := range c.sec.node.Rotate(now, priv) {
		if addr, ok := c.sec.addrOf[o.To]; ok {
			c.sendNow(addr, o.Packet)
		}
	}
	return nil
}

// Revocations returns the revocations this site applied after the first
// since (package ca's encoding, in the order applied) and how many it
// applied in all, so that the agent can store the new ones.
func (c *Core) Revocations(since int) ([][]byte, int) {
	if c.sec == nil || since >= len(c.sec.trust.revocations) {
		return nil, since
	}
	var out [][]byte
	for _, m := range c.sec.trust.revocations[since:] {
		if _, _, body, err := wire.ParseTrust(m, wire.TypeRevocation); err == nil {
			out = append(out, body)
		}
	}
	return out, len(c.sec.trust.revocations)
}
