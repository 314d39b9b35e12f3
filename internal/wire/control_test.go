package wire

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func TestProbeRoundTrip(t *testing.T) {
	p := Probe{Sender: 7, Receiver: 9, Seq: 42, SendTime: -123456789}
	b := AppendProbe(nil, &p)
	if len(b) != ProbeLen {
		t.Fatalf("len %d, want %d", len(b), ProbeLen)
	}
	var q Probe
	if err := ParseProbe(b, &q); err != nil || q != p {
		t.Fatalf("got %+v, %v; want %+v", q, err, p)
	}
	for n := 0; n < len(b); n++ {
		if err := ParseProbe(b[:n], &q); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
}

func TestProbeReplyRoundTrip(t *testing.T) {
	r := ProbeReply{Sender: 1, Receiver: 2, Seq: 3, ProbeSendTime: 4, ProbeRecvTime: -5, ReplySendTime: 6}
	b := AppendProbeReply(nil, &r)
	var q ProbeReply
	if err := ParseProbeReply(b, &q); err != nil || q != r {
		t.Fatalf("got %+v, %v; want %+v", q, err, r)
	}
	if err := ParseProbeReply(b[:ProbeReplyLen-1], &q); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated: %v", err)
	}
	if err := ParseProbe(b, new(Probe)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("reply parsed as probe: %v", err)
	}
}

// A reply with the count of probes received is 4 bytes longer and flagged;
// a flagged reply without the count is truncated, and an unflagged one
// carries none.
func TestProbeReplyWithReceivedCount(t *testing.T) {
	r := ProbeReply{Sender: 1, Receiver: 2, Seq: 3, ProbeSendTime: 4, ProbeRecvTime: 5, ReplySendTime: 6,
		HasReceived: true, Received: 0xfffffffe}
	b := AppendProbeReply(nil, &r)
	if len(b) != ProbeReplyCountLen || b[3] != FlagReceived {
		t.Fatalf("len %d flags %#x, want %d and %#x", len(b), b[3], ProbeReplyCountLen, FlagReceived)
	}
	var q ProbeReply
	if err := ParseProbeReply(b, &q); err != nil || q != r {
		t.Fatalf("got %+v, %v; want %+v", q, err, r)
	}
	if err := ParseProbeReply(b[:ProbeReplyLen], &q); !errors.Is(err, ErrTruncated) {
		t.Fatalf("flagged reply without its count: %v", err)
	}
	b[3] = 0
	if err := ParseProbeReply(b, &q); err != nil || q.HasReceived || q.Received != 0 {
		t.Fatalf("unflagged reply: %+v, %v", q, err)
	}
}

func TestLinkStateRoundTrip(t *testing.T) {
	ls := LinkState{Origin: 5, Incarnation: 1 << 40, Seq: 77, Entries: []LinkEntry{
		{Peer: 6, Flags: LinkFlagUp, Loss: LossToWire(0.25), RTT: 32000, Jitter: 150, LossSamples: 4321, Delay: -3_000_000_123},
		{Peer: 8, Flags: 0, Loss: 65535, RTT: 1, Jitter: 65535, LossSamples: 65535, Delay: 9_000_000_000},
	}}
	b, err := AppendLinkState(nil, &ls)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != LinkStateLen(2) {
		t.Fatalf("len %d", len(b))
	}
	var got LinkState
	if err := ParseLinkState(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ls) {
		t.Fatalf("got %+v want %+v", got, ls)
	}
	if err := ParseLinkState(b[:len(b)-1], &got); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated: %v", err)
	}
	if !got.Entries[0].Up() || got.Entries[1].Up() {
		t.Fatal("up flags")
	}
}

// A link-state message of a site that does not send loss sample counts
// (no FlagLossSamples) has a 32-bit jitter, saturated on parsing, and no
// count.
func TestLinkStateLegacyLayout(t *testing.T) {
	ls := LinkState{Origin: 5, Entries: []LinkEntry{{Peer: 6, Flags: LinkFlagUp, Loss: 7, RTT: 8, Delay: 9}}}
	b, err := AppendLinkState(nil, &ls)
	if err != nil {
		t.Fatal(err)
	}
	b[3] &^= FlagLossSamples
	be.PutUint32(b[LinkStateFixedLen+12:], 70000)
	var got LinkState
	if err := ParseLinkState(b, &got); err != nil {
		t.Fatal(err)
	}
	if e := got.Entries[0]; e.Jitter != 65535 || e.LossSamples != 0 || e.Loss != 7 || e.Delay != 9 {
		t.Fatalf("legacy entry parsed as %+v", e)
	}
}

// The delta flag survives the round trip, and a message without it is a
// whole row.
func TestLinkStateDeltaFlag(t *testing.T) {
	for _, delta := range []bool{true, false} {
		ls := LinkState{Origin: 5, Seq: 3, Delta: delta, Entries: []LinkEntry{{Peer: 6, Flags: LinkFlagUp}}}
		b, err := AppendLinkState(nil, &ls)
		if err != nil {
			t.Fatal(err)
		}
		if got := b[3]&FlagDelta != 0; got != delta {
			t.Fatalf("delta %v encoded as flags %#x", delta, b[3])
		}
		var got LinkState
		if err := ParseLinkState(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Delta != delta {
			t.Fatalf("delta %v parsed as %v", delta, got.Delta)
		}
	}
}

func TestLinkStateRejectsSelfLinkAndTooMany(t *testing.T) {
	ls := LinkState{Origin: 5, Entries: []LinkEntry{{Peer: 5}}}
	b, _ := AppendLinkState(nil, &ls)
	if err := ParseLinkState(b, new(LinkState)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("self link: %v", err)
	}
	ls.Entries = make([]LinkEntry, MaxLinkEntries+1)
	if _, err := AppendLinkState(nil, &ls); err == nil {
		t.Fatal("too many entries accepted")
	}
}

func TestLossAndMicros(t *testing.T) {
	if LossToWire(-1) != 0 || LossToWire(2) != 65535 || LossFromWire(LossToWire(0.5)) < 0.4999 {
		t.Fatal("loss conversion")
	}
	if MicrosToWire(-5) != 0 || MicrosFromWire(MicrosToWire(1500_400)) != 1500*1000 {
		t.Fatal("micros conversion")
	}
}

func testMembers() []Member {
	return []Member{
		{ID: SiteIDFromName("fujisawa"), Incarnation: 1, Addr: netip.MustParseAddrPort("10.0.0.1:4789"), Name: "fujisawa"},
		{ID: SiteIDFromName("seoul"), Incarnation: 99, Addr: netip.MustParseAddrPort("[2001:db8::2]:4789"), Name: "seoul"},
	}
}

func TestHelloRoundTrip(t *testing.T) {
	m := testMembers()[1]
	b, err := AppendHello(nil, &m, HelloFlagReply)
	if err != nil {
		t.Fatal(err)
	}
	var got Member
	flags, err := ParseHello(b, &got)
	if err != nil || flags != HelloFlagReply || got != m {
		t.Fatalf("got %+v %d %v", got, flags, err)
	}
	for n := 0; n < len(b); n++ {
		if _, err := ParseHello(b[:n], &got); err == nil {
			t.Fatalf("truncated to %d: no error", n)
		}
	}
	bad := m
	bad.Name = ""
	if _, err := AppendHello(nil, &bad, 0); err == nil {
		t.Fatal("empty name accepted")
	}
}

func TestMembersRoundTrip(t *testing.T) {
	ms := testMembers()
	b, err := AppendMembers(nil, 3, ms)
	if err != nil {
		t.Fatal(err)
	}
	sender, got, err := ParseMembers(b, nil)
	if err != nil || sender != 3 || !reflect.DeepEqual(got, ms) {
		t.Fatalf("got %v %+v %v", sender, got, err)
	}
	if _, _, err := ParseMembers(b[:len(b)-1], nil); err == nil {
		t.Fatal("truncated accepted")
	}
}

func TestSplitMembers(t *testing.T) {
	var ms []Member
	for i := 0; i < 100; i++ {
		m := testMembers()[1]
		m.Name = string(bytes.Repeat([]byte{'a' + byte(i%26)}, 60))
		ms = append(ms, m)
	}
	k := SplitMembers(ms)
	if k < 1 || k >= len(ms) {
		t.Fatalf("split %d", k)
	}
	if _, err := AppendMembers(nil, 1, ms[:k]); err != nil {
		t.Fatalf("split too long: %v", err)
	}
	if _, err := AppendMembers(nil, 1, ms[:k+1]); err == nil {
		t.Fatal("one more record still fits; split too short")
	}
}

func TestLeaveRoundTrip(t *testing.T) {
	l := Leave{Sender: 4, Incarnation: 8}
	var got Leave
	if err := ParseLeave(AppendLeave(nil, &l), &got); err != nil || got != l {
		t.Fatalf("got %+v %v", got, err)
	}
}

// parseAny runs the parser matching b's type; the fuzz targets use it.
func parseAny(b []byte) error {
	t, _, err := ParseCommon(b)
	if err != nil {
		return err
	}
	switch t {
	case TypeProbe:
		return ParseProbe(b, new(Probe))
	case TypeProbeReply:
		return ParseProbeReply(b, new(ProbeReply))
	case TypeLinkState:
		return ParseLinkState(b, new(LinkState))
	case TypeHello:
		_, err := ParseHello(b, new(Member))
		return err
	case TypeMembers:
		_, _, err := ParseMembers(b, nil)
		return err
	case TypeLeave:
		return ParseLeave(b, new(Leave))
	case TypeTrain:
		return ParseTrain(b, new(Train))
	case TypeInband:
		return ParseInband(b, new(Inband))
	}
	return ErrMalformed
}

// FuzzControl feeds arbitrary bytes to every control parser and checks that
// whatever parses re-encodes to the same leading bytes.
func FuzzControl(f *testing.F) {
	f.Add(AppendProbe(nil, &Probe{Sender: 1, Receiver: 2, Seq: 3, SendTime: 4}))
	f.Add(AppendProbeReply(nil, &ProbeReply{Sender: 1, Receiver: 2}))
	f.Add(AppendProbeReply(nil, &ProbeReply{Sender: 1, Receiver: 2, HasReceived: true, Received: 9}))
	ls, _ := AppendLinkState(nil, &LinkState{Origin: 1, Entries: []LinkEntry{{Peer: 2, Delay: -1, LossSamples: 3}}})
	f.Add(ls)
	ms := testMembers()
	h, _ := AppendHello(nil, &ms[0], 1)
	f.Add(h)
	mb, _ := AppendMembers(nil, 1, ms)
	f.Add(mb)
	f.Add(AppendLeave(nil, &Leave{Sender: 1, Incarnation: 2}))
	rated, _ := AppendLinkState(nil, &LinkState{Origin: 1, Rates: true, Entries: []LinkEntry{{Peer: 2, RevRate: 20000, RevRateKind: RateKindTrain, RevRateAge: 3}}})
	f.Add(rated)
	f.Add(AppendTrainPacket(nil, &Train{Sender: 1, Receiver: 2, ID: 3, Index: 4, Count: 24}, 64))
	f.Add(AppendTrainReport(nil, &Train{Sender: 2, Receiver: 1, ID: 3, Index: 24, Count: 24, Rate: 200000}))
	in := Inband{Sender: 2, Receiver: 1, Count: 3, Samples: [MaxInbandSamples]int64{-5e9, -5e9 + 1<<30, -5e9 - 7}}
	ib, _ := AppendInband(nil, &in)
	f.Add(ib)
	f.Fuzz(func(t *testing.T, b []byte) {
		restamped := append([]byte(nil), b...)
		if Restamp(restamped, 1<<40) && parseAny(restamped) != parseAny(b) {
			t.Fatalf("restamping changed whether %x parses", b)
		}
		if parseAny(b) != nil {
			return
		}
		checkReencode(t, b)
	})
}

// checkReencode re-encodes a packet that parsed and compares the bytes the
// format defines (flags and reserved bytes aside).
func checkReencode(t *testing.T, b []byte) {
	typ, flags, _ := ParseCommon(b)
	var out []byte
	switch typ {
	case TypeProbe:
		var p Probe
		ParseProbe(b, &p)
		out = AppendProbe(nil, &p)
	case TypeProbeReply:
		var r ProbeReply
		ParseProbeReply(b, &r)
		out = AppendProbeReply(nil, &r)
	case TypeLinkState:
		var ls LinkState
		ParseLinkState(b, &ls)
		var err error
		if out, err = AppendLinkState(nil, &ls); err != nil {
			t.Fatalf("parsed link state does not encode: %v", err)
		}
		var again LinkState
		if err := ParseLinkState(out, &again); err != nil || !reflect.DeepEqual(again.Entries, ls.Entries) {
			t.Fatalf("link state round trip: %v", err)
		}
		return
	case TypeInband:
		var r Inband
		ParseInband(b, &r)
		var err error
		if out, err = AppendInband(nil, &r); err != nil {
			t.Fatalf("parsed in-band report does not encode: %v", err)
		}
		copy(out[13:16], b[13:16]) // reserved
	case TypeTrain:
		var tr Train
		ParseTrain(b, &tr)
		if tr.Report {
			out = AppendTrainReport(nil, &tr)
		} else {
			out = AppendTrainPacket(nil, &tr, 0) // the header; the padding is not compared
		}
	case TypeHello:
		var m Member
		ParseHello(b, &m)
		var err error
		if out, err = AppendHello(nil, &m, flags); err != nil {
			t.Fatalf("parsed hello does not encode: %v", err)
		}
	case TypeMembers:
		s, ms, _ := ParseMembers(b, nil)
		var err error
		if out, err = AppendMembers(nil, s, ms); err != nil {
			if len(out) == 0 && SplitMembers(ms) < len(ms) {
				return // parsed a list longer than we would send in one message
			}
			t.Fatalf("parsed members do not encode: %v", err)
		}
		_, again, err := ParseMembers(out, nil)
		if err != nil || !reflect.DeepEqual(again, ms) {
			t.Fatalf("members round trip: %v", err)
		}
		return
	case TypeLeave:
		var l Leave
		ParseLeave(b, &l)
		out = AppendLeave(nil, &l)
	}
	if len(out) > len(b) || !bytes.Equal(out[CommonHeaderLen:], b[CommonHeaderLen:len(out)]) {
		t.Fatalf("re-encoding differs:\n in %x\nout %x", b, out)
	}
}

// TestRestamp: a probe gets its t1 replaced, a reply its t3 (never before
// its t2), and any other datagram is left alone.
func TestRestamp(t *testing.T) {
	pb := AppendProbe(nil, &Probe{Sender: 1, Receiver: 2, Seq: 7, SendTime: 100})
	if !Restamp(pb, 250) {
		t.Fatal("probe not restamped")
	}
	var p Probe
	if err := ParseProbe(pb, &p); err != nil || p.SendTime != 250 || p.Seq != 7 {
		t.Errorf("restamped probe %+v, %v; want send time 250", p, err)
	}
	rb := AppendProbeReply(nil, &ProbeReply{Sender: 2, Receiver: 1, Seq: 7, ProbeSendTime: 100, ProbeRecvTime: 300, ReplySendTime: 300})
	for _, c := range []struct{ at, want int64 }{{400, 400}, {200, 400}} {
		if !Restamp(rb, c.at) {
			t.Fatal("reply not restamped")
		}
		var r ProbeReply
		if err := ParseProbeReply(rb, &r); err != nil || r.ReplySendTime != c.want || r.ProbeSendTime != 100 || r.ProbeRecvTime != 300 {
			t.Errorf("reply restamped at %d: %+v, %v; want t3 %d", c.at, r, err, c.want)
		}
	}
	for _, b := range [][]byte{nil, {Magic}, {Magic, Version, byte(TypeProbe), 0, 1, 2}, AppendProbe(nil, &Probe{Sender: 1, Receiver: 2})[:ProbeLen-1]} {
		orig := append([]byte(nil), b...)
		if Restamp(b, 5) || string(b) != string(orig) {
			t.Errorf("Restamp changed or accepted %x", orig)
		}
	}
}
