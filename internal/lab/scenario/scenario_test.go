package scenario

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const base = `name: t
sites:
  - name: A
  - name: B
    hosts: 2
  - name: C
links:
  default:
    delay: 10ms
`

func TestParseResolvesDefaultsAndOverrides(t *testing.T) {
	doc := base + `  overrides:
    - {from: A, to: B, delay: 3ms, rate: 20mbit, queue: 64KB}
    - {from: B, to: C, both: true, loss: 1%, jitter: 0.5ms}
`
	s, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if s.UnderlayMTU != DefaultMTU || s.Sites[0].Hosts != 1 || s.Sites[1].Hosts != 2 {
		t.Errorf("defaults: mtu %d hosts %d %d", s.UnderlayMTU, s.Sites[0].Hosts, s.Sites[1].Hosts)
	}
	ab := s.Link(0, 1)
	if ab.Delay != 3*time.Millisecond || ab.Rate != 20e6 || ab.Queue.Bytes != 64000 {
		t.Errorf("A->B = %+v", ab)
	}
	if ba := s.Link(1, 0); ba.Delay != 10*time.Millisecond || ba.Rate != 0 {
		t.Errorf("B->A = %+v, want the default", ba)
	}
	for _, p := range []LinkProps{s.Link(1, 2), s.Link(2, 1)} {
		if p.Loss != 0.01 || p.Jitter != 500*time.Microsecond || p.Delay != 10*time.Millisecond {
			t.Errorf("B<->C = %+v", p)
		}
	}
	if got := s.RTT(0, 1); got != 13*time.Millisecond {
		t.Errorf("RTT(A,B) = %v, want 13ms", got)
	}
}

func TestBadScenariosNameFieldAndLine(t *testing.T) {
	cases := []struct {
		name, doc string
		kind      error
		want      string
	}{
		{"unknown site", base + "  overrides:\n    - {from: A, to: Z, delay: 1ms}\n", ErrUnknownSite, `line 11: links.overrides[0].to: unknown site "Z"`},
		{"negative delay", base + "  overrides:\n    - from: A\n      to: B\n      delay: -5ms\n", ErrNegative, "line 13: links.overrides[0].delay: -5ms is negative"},
		{"malformed rate", base + "  overrides:\n    - from: A\n      to: B\n      rate: fast\n", ErrMalformed, `line 13: links.overrides[0].rate: "fast" is not a rate`},
		{"malformed rate flow style", base + "  overrides:\n    - {from: A, to: B, rate: 20mbt}\n", ErrMalformed, `line 11: links.overrides[0].rate: "20mbt" is not a rate`},
		{"duplicate link", base + "  overrides:\n    - {from: A, to: B, delay: 1ms}\n    - {from: B, to: A, both: true, delay: 2ms}\n", ErrDuplicate, "line 12: links.overrides[1]: duplicate link A->B (already set by links.overrides[0])"},
		{"duplicate site", "sites:\n  - name: A\n  - name: a\nlinks: {default: {delay: 1ms}}\n", ErrDuplicate, `line 3: sites[1].name: duplicate site "a"`},
		{"one site", "sites:\n  - name: A\n", ErrMissing, "sites: a scenario needs at least two sites"},
		{"negative default", "sites: [{name: A}, {name: B}]\nlinks:\n  default:\n    delay: -1ms\n", ErrNegative, "line 4: links.default.delay: -1ms is negative"},
		{"loss over 100", base + "  overrides:\n    - {from: A, to: B, loss: 120%}\n", ErrRange, "links.overrides[0].loss: 120% is outside 0..100%"},
		{"unknown key", base + "  overridez: []\n", ErrMalformed, "line 10: field overridez not found"},
		{"mtu", base + "underlay_mtu: 100\n", ErrRange, "line 10: underlay_mtu: 100 is outside"},
		{"bad hosts", "sites:\n  - name: A\n    hosts: 99\n  - name: B\n", ErrRange, "line 3: sites[0].hosts: 99 is outside 1..16"},
		{"bad site name", "sites:\n  - name: 'a b'\n  - name: B\n", ErrMalformed, `line 2: sites[0].name: "a b" is not a valid site name`},
		{"event two actions", base + "traffic: [{name: x, from: A, to: B}]\ntimeline:\n  - {at: 1s, start: x, stop: x}\n", ErrMissing, "line 12: timeline[0]: an event has exactly one of set, start, stop"},
		{"event unknown flow", base + "timeline:\n  - at: 1s\n    start: nope\n", ErrUnknown, `line 12: timeline[0].start: unknown flow "nope"`},
		{"event bad site", base + "timeline:\n  - at: 1s\n    set: {from: A, to: Q, delay: 1ms}\n", ErrUnknownSite, `timeline[0].set.to: unknown site "Q"`},
		{"event negative time", base + "timeline:\n  - at: -1s\n    set: {from: A, to: B, delay: 1ms}\n", ErrNegative, "line 11: timeline[0].at: -1s is negative"},
		{"bad queue", base + "  overrides:\n    - {from: A, to: B, queue: lots}\n", ErrMalformed, `links.overrides[0].queue: "lots" is not a queue size`},
		{"self link", base + "  overrides:\n    - {from: A, to: a, delay: 1ms}\n", ErrRange, `links.overrides[0].to: a link from "a" to itself`},
		{"not yaml", "sites: [\n", ErrMalformed, "yaml:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, c.kind) {
				t.Errorf("error %q does not match ErrInvalid and %v", err, c.kind)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %T is not a *FieldError", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestUnits(t *testing.T) {
	rates := map[string]Rate{"20mbit": 20e6, "1.5gbit": 1.5e9, "800kbit": 800e3, "unlimited": 0, "2.4Mbit/s": 2.4e6, "10mbps": 10e6}
	for in, want := range rates {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "mbit", "-3mbit", "1e400mbit"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
	q, err := ParseQueue("50ms")
	if err != nil || q.Time != 50*time.Millisecond || q.Limit(8e6) != 50000 {
		t.Errorf("ParseQueue(50ms) = %+v (limit %d), %v", q, q.Limit(8e6), err)
	}
	if q, _ := ParseQueue("64KiB"); q.Bytes != 65536 {
		t.Errorf("64KiB = %+v", q)
	}
	if (Queue{}).Limit(0) != MinQueueBytes {
		t.Errorf("an unset queue on an unlimited link must still hold a few packets")
	}
	if p, err := ParsePercent("0.5%"); err != nil || p.Fraction() != 0.005 {
		t.Errorf("ParsePercent = %v, %v", p, err)
	}
}

func TestShippedScenariosParseAndMatchTheFilesInScenarios(t *testing.T) {
	for _, name := range []string{"leon-japan", "lanman2017", "azure-16", "narrow-relay"} {
		s, err := Load(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		src, _ := ShippedSource(name)
		file, err := os.ReadFile(filepath.Join("..", "..", "..", "scenarios", name+".yaml"))
		if err != nil {
			t.Fatalf("scenarios/%s.yaml: %v", name, err)
		}
		if !bytes.Equal(src, file) {
			t.Errorf("scenarios/%s.yaml differs from the copy built into the binary; regenerate it with `detour-lab testbed scenario %s > scenarios/%s.yaml`", name, name, name)
		}
		if s.Name != name {
			t.Errorf("%s: name %q", name, s.Name)
		}
	}
}

func TestLeonJapanMatchesThePaper(t *testing.T) {
	s, err := Load("leon-japan")
	if err != nil {
		t.Fatal(err)
	}
	f, i, se := s.SiteIndex("Fujisawa"), s.SiteIndex("Inagi"), s.SiteIndex("Seoul")
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	if got := ms(s.RTT(f, se)); got != 32 {
		t.Errorf("Fujisawa-Seoul RTT %v, want 32", got)
	}
	relayed := s.Link(f, i).Delay + s.Link(i, se).Delay + s.Link(se, i).Delay + s.Link(i, f).Delay
	if got := ms(relayed); got != 21 {
		t.Errorf("relayed RTT %v, want 21", got)
	}
}

func TestLanman2017HasTheTIVOnlyUnderLoad(t *testing.T) {
	s, err := Load("lanman2017")
	if err != nil {
		t.Fatal(err)
	}
	clu, lan, neu := s.SiteIndex("CLU"), s.SiteIndex("LAN"), s.SiteIndex("NEU")
	direct := s.Link(clu, lan).Delay
	relayed := s.Link(clu, neu).Delay + s.Link(neu, lan).Delay
	if direct >= relayed {
		t.Errorf("idle CLU->LAN %v is not shorter than via NEU %v", direct, relayed)
	}
	if loaded := 65 * time.Millisecond; loaded <= relayed {
		t.Errorf("loaded CLU->LAN (65ms) would not make the relay (%v) better", relayed)
	}
	for a := range s.Sites {
		for b := range s.Sites {
			if a == b {
				continue
			}
			for c := range s.Sites {
				if c == a || c == b {
					continue
				}
				if s.Link(a, c).Delay+s.Link(c, b).Delay < s.Link(a, b).Delay {
					t.Errorf("idle TIV %s->%s via %s", s.Sites[a].Name, s.Sites[b].Name, s.Sites[c].Name)
				}
			}
			if r := s.Link(a, b).Rate; r < 2.4e6 || r > 18e6 {
				t.Errorf("%s->%s rate %v outside the paper's 2.4-18 Mbit/s", s.Sites[a].Name, s.Sites[b].Name, r)
			}
		}
	}
	if s.FlowIndex("clu-lan") < 0 {
		t.Error("no clu-lan cross-traffic flow")
	}
}

// narrow-relay: the direct path is the fastest and the narrowest, the
// relayed one a few ms slower (within the default bulk latency bound of
// max(10 ms, 25 % of the round trip)) and ten times wider, in both
// directions.
func TestNarrowRelayHasTheFastPathNarrow(t *testing.T) {
	s, err := Load("narrow-relay")
	if err != nil {
		t.Fatal(err)
	}
	w, e, r := s.SiteIndex("West"), s.SiteIndex("East"), s.SiteIndex("Relay")
	for _, p := range [][2]int{{w, e}, {e, w}} {
		a, b := p[0], p[1]
		direct, relayed := s.Link(a, b), s.Link(a, r).Delay+s.Link(r, b).Delay
		slower := relayed - direct.Delay
		bound := max(10*time.Millisecond, s.RTT(a, b)/4)
		if slower <= 0 || slower > 5*time.Millisecond || slower > bound {
			t.Errorf("%s->%s: the relay is %v slower than the direct path; want a few ms, within %v", s.Sites[a].Name, s.Sites[b].Name, slower, bound)
		}
		if direct.Rate != 20e6 || direct.Queue.Time < 40*time.Millisecond {
			t.Errorf("%s->%s direct: %v with queue %v; want 20 Mbit/s with a queue that a bulk flow fills with tens of ms", s.Sites[a].Name, s.Sites[b].Name, direct.Rate, direct.Queue)
		}
		if s.Link(a, r).Rate < 10*direct.Rate || s.Link(r, b).Rate < 10*direct.Rate {
			t.Errorf("%s->%s: the relayed path is not ten times wider", s.Sites[a].Name, s.Sites[b].Name)
		}
	}
}

// scenarios/narrow-relay-10mb.yaml is narrow-relay with the default bulk
// threshold.
func TestNarrowRelay10MBDiffersOnlyInThreshold(t *testing.T) {
	s, err := Load(filepath.Join("..", "..", "..", "scenarios", "narrow-relay-10mb.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := Load("narrow-relay")
	if s.Bulk == nil || s.Bulk.Threshold != 10_000_000 || n.Bulk == nil || n.Bulk.Threshold != 1_000_000 {
		t.Fatalf("thresholds %+v and %+v", s.Bulk, n.Bulk)
	}
	w, e := s.SiteIndex("West"), s.SiteIndex("East")
	if s.Link(w, e) != n.Link(w, e) || len(s.Sites) != len(n.Sites) {
		t.Error("the links differ from narrow-relay's")
	}
}

func TestAzureTakesEachDirectionFromItsOwnRow(t *testing.T) {
	s, err := Azure(54)
	if err != nil {
		t.Fatal(err)
	}
	// The table's first row: Australia Central -> Australia Central 2 is
	// 5 ms, and the second row gives 7 ms back.
	a, b := s.SiteIndex("australia-central"), s.SiteIndex("australia-central-2")
	if got := s.Link(a, b).Delay; got != 2500*time.Microsecond {
		t.Errorf("d(AC, AC2) = %v, want 2.5ms", got)
	}
	if got := s.Link(b, a).Delay; got != 3500*time.Microsecond {
		t.Errorf("d(AC2, AC) = %v, want 3.5ms", got)
	}
	s4, err := Azure(4)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, site := range s4.Sites {
		names = append(names, site.Name)
	}
	if got := strings.Join(names, ","); got != "australia-central,east-us,malaysia-west,southeast-asia" {
		t.Errorf("azure-4 regions %s", got)
	}
	for _, bad := range []string{"azure-1", "azure-55", "nosuch"} {
		if _, err := Load(bad); !errors.Is(err, ErrUnknown) {
			t.Errorf("Load(%q) = %v, want ErrUnknown", bad, err)
		}
	}
}

func TestLoadNamesTheFileInErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(p, []byte(base+"  overrides:\n    - {from: A, to: Z}\n"), 0o644)
	_, err := Load(p)
	if err == nil || !strings.HasPrefix(err.Error(), p+": line 11") {
		t.Errorf("Load error %v does not start with the file and line", err)
	}
	if _, err := Load("/nonexistent/x.yaml"); !errors.Is(err, ErrUnknown) {
		t.Errorf("missing file: %v", err)
	}
}
