package model

import (
	"math"
	"testing"
)

// lanman is the idle lanman2017 scenario's one-way delays (ms).
func lanman(cluLan float64) Matrix {
	m := Matrix{}
	set := func(a, b string, ab, ba float64) { m[[2]string{a, b}] = ab; m[[2]string{b, a}] = ba }
	set("CLU", "LAN", cluLan, cluLan)
	set("CLU", "NEU", 20, 20)
	set("NEU", "LAN", 15, 15)
	set("BOR", "NEU", 10, 10)
	set("BOR", "LAN", 18, 18)
	set("BOR", "CLU", 28, 27)
	return m
}

var q = Quorum{Leader: "CLU", Followers: []string{"BOR", "LAN"}}

func TestPredictionsOfThePaperSetting(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cluLan float64
		op     string
		server string
		want   float64
	}{
		// Idle: reads cost the client's round trip.
		{"idle", 31, "read", "CLU", 62},
		{"idle", 31, "read", "BOR", 36},
		{"idle", 31, "read", "LAN", 0},
		// Writes: the leader's fastest follower is BOR (55 ms).
		{"idle", 31, "write", "CLU", 62 + 0 + 55},
		{"idle", 31, "write", "LAN", 0 + 62 + 55},
		{"idle", 31, "write", "BOR", 36 + 55 + 55},
		// Loaded CLU<->LAN (65 ms each way): BOR still acks first, so
		// writes through BOR do not change; the paper's all-ACK
		// description would predict 36+55+130.
		{"loaded", 65, "write", "BOR", 36 + 55 + 55},
		{"loaded", 65, "write", "LAN", 130 + 55},
		{"loaded", 65, "read", "CLU", 130},
	} {
		d := Net{Delay: lanman(tc.cluLan).Delays()}
		var got float64
		var err error
		if tc.op == "read" {
			got, err = Read(d, "LAN", tc.server)
		} else {
			got, err = Write(d, q, "LAN", tc.server)
		}
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s %s via %s: %v, want %v", tc.name, tc.op, tc.server, got, tc.want)
		}
	}
}

func TestClockOffsetsCancel(t *testing.T) {
	// Offset-shifted delays d + o(from) - o(to) give the same predictions.
	off := map[string]float64{"BOR": 4000, "CLU": -2500, "LAN": 17, "NEU": 0}
	shifted := Matrix{}
	for k, v := range lanman(31) {
		shifted[k] = v + off[k[0]] - off[k[1]]
	}
	for _, f := range []string{"CLU", "BOR", "LAN"} {
		a, _ := Write(Net{Delay: lanman(31).Delays()}, q, "LAN", f)
		b, _ := Write(Net{Delay: shifted.Delays()}, q, "LAN", f)
		if math.Abs(a-b) > 1e-6 {
			t.Errorf("write via %s: %v with true delays, %v with shifted", f, a, b)
		}
	}
}

func TestPathDelaysFollowRelays(t *testing.T) {
	links := lanman(65)
	relay := func(a, b string) []string {
		if (a == "CLU" && b == "LAN") || (a == "LAN" && b == "CLU") {
			return []string{a, "NEU", b}
		}
		return nil
	}
	p := PathDelays(links, relay)
	if got := p[[2]string{"CLU", "LAN"}]; got != 35 {
		t.Errorf("CLU->LAN via NEU = %v, want 35", got)
	}
	if got := p[[2]string{"BOR", "CLU"}]; got != 28 {
		t.Errorf("BOR->CLU direct = %v, want 28", got)
	}
	r, _ := Read(Net{Delay: p.Delays()}, "LAN", "CLU")
	if r != 70 {
		t.Errorf("read via CLU over the relay = %v, want 70", r)
	}
}

func TestMissingDelayIsAnError(t *testing.T) {
	if _, err := Read(Net{Delay: Matrix{}.Delays()}, "LAN", "CLU"); err == nil {
		t.Error("no error for an unknown pair")
	}
}

func TestTransmissionOfTheValueIsAdded(t *testing.T) {
	// 1250 bytes at 10 Mbit/s take 1 ms on every link.
	tx := TransmitMs(1250, 10_000_000)
	if tx != 1 {
		t.Fatalf("TransmitMs = %v, want 1", tx)
	}
	n := Net{Delay: lanman(31).Delays(), Tx: func(string, string) float64 { return tx }}
	r, _ := Read(n, "LAN", "CLU")
	w, _ := Write(n, q, "LAN", "BOR")
	wl, _ := Write(n, q, "LAN", "CLU")
	// Read: the answer. Write via BOR: request, forward, proposal.
	// Write via the leader: request and proposal only.
	if r != 63 || w != 149 || wl != 119 {
		t.Errorf("read %v (want 63), write via BOR %v (want 149), via CLU %v (want 119)", r, w, wl)
	}
	if local, _ := Read(n, "LAN", "LAN"); local != 0 {
		t.Errorf("local read = %v, want 0", local)
	}
}
