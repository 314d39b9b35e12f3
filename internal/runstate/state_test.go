package runstate

import (
	"errors"
	"io/fs"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/config"
)

func fileConfig(t *testing.T) *config.Agent {
	t.Helper()
	a, err := config.Parse([]byte(`site: fujisawa
listen: 127.0.0.1:4800
egress_rate: 100mbit
networks:
  - {name: default, id: 1, tap: detour0}
  - {name: red, id: 2, tap: dt-red, max_rate: 10mbit}
`))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func names(ns []config.Network) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

func sample() *Doc {
	d := New("fujisawa")
	d.Attach(config.Network{Name: "blue", ID: 7, TAP: "dt-blue", MTU: 1400, MaxRate: 20e6}, nil)
	d.Detach("red", &config.Agent{Networks: []config.Network{{Name: "red", ID: 2}}})
	d.SetLimits("default", Limits{MaxRate: 50e6, MinRate: 1e6})
	d.SetEgress(200e6)
	d.Pin("inagi", []string{"kobe", "inagi"})
	d.Forbid("kobe")
	caKey, _ := ca.Generate(strings.NewReader(strings.Repeat("k", 32))) // the same key each time
	rev, _ := ca.SignRevocation(caKey, &ca.Revocation{Name: "mallory", At: time.Unix(1_800_000_000, 0)})
	d.Revoked(rev)
	d.Revoked(rev)
	return d
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	d := sample()
	b := d.Encode()
	got, err := Decode(b)
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if string(got.Encode()) != string(b) {
		t.Errorf("round trip changed the document:\n%s\n%s", b, got.Encode())
	}
	if len(got.Revocations) != 1 {
		t.Errorf("a revocation recorded twice is kept %d times", len(got.Revocations))
	}
	if !strings.Contains(string(b), `"max_rate": "20mbit"`) {
		t.Errorf("rates are not written as the configuration writes them: %s", b)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":  `{"version":1,"site":"a","colour":"red"}`,
		"version":        `{"version":2,"site":"a"}`,
		"pin path":       `{"version":1,"site":"a","pins":{"b":["c"]}}`,
		"twice":          `{"version":1,"site":"a","attached":[{"name":"x","id":3},{"name":"x","id":4}]}`,
		"kv pools":       `{"version":1,"site":"a","kv_pools":[{"name":"p"}]}`,
		"half written":   `{"version":1,"site":"a","forbidden":["b"`,
		"two documents":  `{"version":1,"site":"a"}{}`,
		"min over max":   `{"version":1,"site":"a","limits":{"x":{"max_rate":"1mbit","min_rate":"2mbit"}}}`,
		"detached twice": `{"version":1,"site":"a","attached":[{"name":"x","id":3}],"detached":["x"]}`,
		"revocation":     `{"version":1,"site":"a","revocations":["bm90IGEgcmV2b2NhdGlvbg=="]}`,
	} {
		if _, err := Decode([]byte(doc)); err == nil {
			t.Errorf("%s: %s decoded", name, doc)
		}
	}
}

func TestMerge(t *testing.T) {
	file := fileConfig(t)
	eff, kept, notes := Merge(file, sample())
	if got := names(eff.Networks); !reflect.DeepEqual(got, []string{"default", "blue"}) {
		t.Errorf("networks in force %v, want default blue", got)
	}
	if eff.Networks[0].MaxRate != 50e6 || eff.EgressRate != 200e6 {
		t.Errorf("limits not applied: %+v egress %v", eff.Networks[0], eff.EgressRate)
	}
	if len(notes) != 0 || !reflect.DeepEqual(kept.Encode(), sample().Encode()) {
		t.Errorf("a consistent document changed: notes %v\n%s", notes, kept.Encode())
	}
	if file.Networks[1].Name != "red" || file.EgressRate != 100e6 {
		t.Error("Merge changed the file's configuration")
	}
}

func TestMergeConflicts(t *testing.T) {
	file := fileConfig(t)
	d := New("fujisawa")
	d.Attach(config.Network{Name: "green", ID: 2, TAP: "dt-green"}, nil) // red's id
	d.Detached = []string{"gone"}
	d.SetLimits("nothere", Limits{MaxRate: 1e6})
	eff, kept, notes := Merge(file, d)
	if got := names(eff.Networks); !reflect.DeepEqual(got, []string{"default", "red"}) {
		t.Errorf("networks in force %v, want the file's", got)
	}
	if len(kept.Attached)+len(kept.Detached)+len(kept.Limits) != 0 || len(notes) != 3 {
		t.Errorf("conflicts kept: %s notes %q", kept.Encode(), notes)
	}

	// A TAP device of the file taken by a network attached at run time:
	// the merge is invalid, so the file's networks stand.
	d = New("fujisawa")
	d.Attach(config.Network{Name: "blue", ID: 9, TAP: "detour0"}, nil)
	d.Pin("inagi", []string{"inagi"})
	eff, kept, notes = Merge(file, d)
	if got := names(eff.Networks); !reflect.DeepEqual(got, []string{"default", "red"}) || len(kept.Attached) != 0 || len(notes) != 1 {
		t.Errorf("invalid merge: networks %v, kept %s, notes %q", got, kept.Encode(), notes)
	}
	if len(kept.Pins) != 1 {
		t.Error("pins dropped with the networks")
	}

	_, kept, notes = Merge(file, sample().with(func(d *Doc) { d.Site = "inagi" }))
	if len(kept.Pins) != 0 || len(notes) != 1 {
		t.Errorf("another site's document used: %s", kept.Encode())
	}
}

func (d *Doc) with(f func(*Doc)) *Doc { f(d); return d }

func TestAttachDetachAgainstFile(t *testing.T) {
	file := fileConfig(t)
	d := New("fujisawa")
	d.Detach("red", file)
	d.Attach(file.Networks[1], file) // re-attached as the file has it
	if len(d.Attached)+len(d.Detached) != 0 {
		t.Errorf("re-attaching the file's network left %s", d.Encode())
	}
	d.Detach("blue", file) // not in the file: nothing to remember
	if len(d.Detached) != 0 {
		t.Errorf("detaching a run-time network recorded %v", d.Detached)
	}
	d.Attach(config.Network{Name: "blue", ID: 7}, file)
	d.SetLimits("blue", Limits{MaxRate: 5e6})
	if d.Attached[0].MaxRate != 5e6 || len(d.Limits) != 0 {
		t.Errorf("limits of a run-time network: %s", d.Encode())
	}
}

func TestRebase(t *testing.T) {
	old := fileConfig(t)
	d := sample()
	d.SetLimits("red", Limits{MaxRate: 1e6})
	d.Detached = nil
	newer := *old
	newer.Networks = []config.Network{old.Networks[0], {Name: "red", ID: 2, TAP: "dt-red", MTU: 1400, MaxRate: 30e6}}
	newer.EgressRate = 300e6
	notes := d.Rebase(old, &newer)
	if _, ok := d.Limits["red"]; ok || d.Egress != nil {
		t.Errorf("the file's newer act lost: %s", d.Encode())
	}
	if _, ok := d.Limits["default"]; !ok || len(d.Attached) != 1 || len(notes) != 2 {
		t.Errorf("unchanged networks lost their run-time changes: %s, notes %q", d.Encode(), notes)
	}
}

// FuzzDecode: whatever Decode accepts encodes to a document that decodes
// to the same encoding, and merges with a valid file into a valid
// configuration.
func FuzzDecode(f *testing.F) {
	f.Add(sample().Encode())
	f.Add([]byte(`{"version":1,"site":"a","pins":{"b":["b"]}}`))
	f.Add([]byte(`{"version":1,"site":"fujisawa","attached":[{"name":"x","id":2,"tap":"detour0"}],"limits":{"red":{"max_rate":"1mbit","min_rate":"1mbit"}}}`))
	file, err := config.Parse([]byte("site: fujisawa\nlisten: 127.0.0.1:4800\nnetworks:\n  - {name: default, id: 1, tap: detour0}\n  - {name: red, id: 2, tap: dt-red}\n"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b)
		if err != nil {
			return
		}
		eff, kept, _ := Merge(file, d)
		if err := eff.Validate(); err != nil {
			t.Fatalf("merging %s gives an invalid configuration: %v", b, err)
		}
		if err := kept.Validate(); err != nil {
			t.Fatalf("merging %s keeps an invalid document: %v", b, err)
		}
		e := d.Encode()
		d2, err := Decode(e)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", e, err)
		}
		if string(d2.Encode()) != string(e) {
			t.Fatalf("not stable:\n%s\n%s", e, d2.Encode())
		}
	})
}

// crashFS is a file system that, at a crash, keeps only what was synced:
// file contents written since their last fsync are lost, and so are
// directory changes (creations, renames) since the directory's last fsync.
// It crashes (refuses every operation) after a given number of steps.
type crashFS struct {
	inodes  map[int]*inode
	entries map[string]int // the directory as the running system sees it
	durable map[string]int // the directory as a crash leaves it
	next    int
	steps   int // operations left before the crash; <0: never
}

type inode struct{ data, synced []byte }

var errCrashed = errors.New("crashed")

func newCrashFS() *crashFS {
	return &crashFS{inodes: map[int]*inode{}, entries: map[string]int{}, durable: map[string]int{}, steps: -1}
}

func (c *crashFS) step() error {
	if c.steps == 0 {
		return errCrashed
	}
	if c.steps > 0 {
		c.steps--
	}
	return nil
}

func (c *crashFS) ReadFile(name string) ([]byte, error) {
	ino, ok := c.entries[name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return append([]byte(nil), c.inodes[ino].data...), nil
}

func (c *crashFS) WriteSync(name string, data []byte) error {
	if err := c.step(); err != nil {
		return err
	}
	ino, ok := c.entries[name]
	if !ok {
		c.next++
		ino = c.next
		c.inodes[ino] = &inode{}
		c.entries[name] = ino
	}
	c.inodes[ino].data = nil // O_TRUNC
	if err := c.step(); err != nil {
		return err
	}
	c.inodes[ino].data = append([]byte(nil), data[:len(data)/2]...) // a write in two parts
	if err := c.step(); err != nil {
		return err
	}
	c.inodes[ino].data = append([]byte(nil), data...)
	if err := c.step(); err != nil {
		return err
	}
	c.inodes[ino].synced = append([]byte(nil), data...)
	return nil
}

func (c *crashFS) Rename(from, to string) error {
	if err := c.step(); err != nil {
		return err
	}
	ino, ok := c.entries[from]
	if !ok {
		return fs.ErrNotExist
	}
	delete(c.entries, from)
	c.entries[to] = ino
	return nil
}

func (c *crashFS) Remove(name string) error {
	if err := c.step(); err != nil {
		return err
	}
	delete(c.entries, name)
	return nil
}

func (c *crashFS) SyncDir(string) error {
	if err := c.step(); err != nil {
		return err
	}
	c.durable = maps.Clone(c.entries)
	return nil
}

// crash leaves what a power cut would.
func (c *crashFS) crash() {
	c.entries = maps.Clone(c.durable)
	for _, ino := range c.inodes {
		ino.data = append([]byte(nil), ino.synced...)
	}
	c.steps = -1
}

// TestSaveSurvivesCrashAtEveryStep crashes a Save at each of its steps in
// turn: the file always parses and holds the old document or the new
// one, and once Save has returned nil it holds the new one.
func TestSaveSurvivesCrashAtEveryStep(t *testing.T) {
	old, newer := sample(), sample()
	newer.Forbid("osaka")
	for k := 0; ; k++ {
		c := newCrashFS()
		s := &Store{Path: "/var/lib/detour/site.state.json", FS: c}
		if err := s.Save(old); err != nil {
			t.Fatal(err)
		}
		c.steps = k
		err := s.Save(newer)
		c.crash()
		got, lerr := s.Load("fujisawa")
		if lerr != nil {
			t.Fatalf("crash at step %d: the file does not load: %v", k, lerr)
		}
		e := string(got.Encode())
		if e != string(old.Encode()) && e != string(newer.Encode()) {
			t.Fatalf("crash at step %d: neither document:\n%s", k, e)
		}
		if err == nil {
			if e != string(newer.Encode()) {
				t.Fatalf("crash after Save returned: the acknowledged document is lost")
			}
			if k < 6 {
				t.Fatalf("Save finished in %d steps; the crash model no longer covers it", k)
			}
			return
		}
	}
}

// TestStoreMissingFile: no file yet is the empty document.
func TestStoreMissingFile(t *testing.T) {
	d, err := (&Store{Path: "/x.state.json", FS: newCrashFS()}).Load("kobe")
	if err != nil || d.Site != "kobe" || len(d.Encode()) == 0 {
		t.Fatalf("%v %v", d, err)
	}
	if got := DefaultPath("/etc/detour/site.yaml"); got != "/etc/detour/site.state.json" {
		t.Errorf("DefaultPath %s", got)
	}
}
