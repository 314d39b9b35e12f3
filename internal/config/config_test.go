package config

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

const good = `site: fujisawa
listen: 198.18.0.1:4800
peers:
  - name: inagi
    address: 198.18.0.2:4800
  - name: seoul
    address: 198.18.0.3:4800
`

// Keys for the tests, made with `detour genkey` and `detour pubkey`.
const (
	privA = "4Ks9R8Ve5zZTrPRDrNPVpkC2Mk1J0yC4W5oW0LmNqXA="
	pubA  = "nL1R9oMS+4RuE7qAN/tTK0gkEZQ3ReNTGI1pXID2Zgc=" // privA's
	pubB  = "oR2Xo1LLqgS3TnlGJk8dVHYG0D1Gm5y5xa46aCRYPyM="
)

func TestEncryptedConfig(t *testing.T) {
	doc := "site: a\nlisten: 198.18.0.1:1\nprivate_key: " + privA + "\npeers:\n  - name: b\n    public_key: " + pubB + "\n  - name: c\n    address: 198.18.0.3:1\n    public_key: " + pubB + "\n"
	a, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Encrypted() {
		t.Error("a config with a private key is not encrypted")
	}
}

func TestParseDefaults(t *testing.T) {
	a, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if a.API != DefaultAPI || a.ProbeInterval != DefaultProbeInterval || a.MaxHops != DefaultMaxHops {
		t.Errorf("defaults not applied: %+v", a)
	}
	if len(a.Networks) != 1 || a.Networks[0].TAP != DefaultTAP || a.Networks[0].ID != DefaultNetworkID {
		t.Errorf("default network not applied: %+v", a.Networks)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	a, err := Parse([]byte(good + "networks:\n  - name: n\n    id: 4\n    tap: t0\n    queue_len: 4096\n"))
	if err != nil {
		t.Fatal(err)
	}
	a.TestClockOffset = 3 * time.Second
	b, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(b)
	if err != nil {
		t.Fatalf("re-parse of %s: %v", b, err)
	}
	if c.TestClockOffset != 3*time.Second || c.Site != a.Site || len(c.Peers) != 2 {
		t.Errorf("round trip changed the config: %+v", c)
	}
	if a.Networks[0].QueueLen != 4096 || c.Networks[0].QueueLen != 4096 {
		t.Errorf("queue_len 4096 read as %d, after a round trip %d", a.Networks[0].QueueLen, c.Networks[0].QueueLen)
	}
}

func TestParseErrorsNameFieldAndLine(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"missing site", "listen: 198.18.0.1:4800\n", "site: missing"},
		{"missing listen", "site: a\n", "listen: missing"},
		{"bad listen", "site: a\nlisten: nowhere\n", `line 2: listen: "nowhere" is not`},
		{"bad peer address", "site: a\nlisten: 198.18.0.1:1\npeers:\n  - name: b\n    address: 1.2.3:4\n", "line 5: peers[0].address"},
		{"duplicate peer", "site: a\nlisten: 198.18.0.1:1\npeers:\n  - name: b\n    address: 198.18.0.2:1\n  - name: b\n    address: 198.18.0.3:1\n", `line 6: peers[1].name: "b" duplicate`},
		{"peer is self", "site: a\nlisten: 198.18.0.1:1\npeers:\n  - name: a\n    address: 198.18.0.2:1\n", "own name"},
		{"unknown key", "site: a\nlisten: 198.18.0.1:1\nlissen: x\n", `line 3: unknown field "lissen"`},
		{"unknown peer key", "site: a\nlisten: 198.18.0.1:1\npeers:\n  - name: b\n    adress: x\n", `line 5: unknown field "adress"`},
		{"own key for a peer", "site: a\nlisten: 198.18.0.1:1\nprivate_key: " + privA + "\npeers:\n  - name: b\n    address: 198.18.0.2:1\n    public_key: " + pubA + "\n", "own public key"},
		{"wildcard without advertise", "site: a\nlisten: 0.0.0.0:4800\n", "advertise: missing"},
		{"hops", "site: a\nlisten: 198.18.0.1:1\nmax_hops: 12\n", "line 3: max_hops"},
		{"probe rate below one peer", "site: a\nlisten: 198.18.0.1:1\nprobe_interval: 50ms\nmax_probe_rate: 10\n", "line 4: max_probe_rate: 10/s does not allow"},
		{"negative probe rate", "site: a\nlisten: 198.18.0.1:1\nmax_probe_rate: -5\n", "line 3: max_probe_rate"},
		{"unknown measurement scheme", "site: a\nlisten: 198.18.0.1:1\nmeasurement: cheap\n", `line 3: measurement: "cheap" is neither full nor economy`},
		{"zero network id", "site: a\nlisten: 198.18.0.1:1\nnetworks:\n  - name: n\n    tap: t0\n", "networks[0].id: missing"},
		{"long tap", "site: a\nlisten: 198.18.0.1:1\nnetworks:\n  - name: n\n    id: 4\n    tap: averyverylongtapname\n", "line 6: networks[0].tap"},
		{"short queue", "site: a\nlisten: 198.18.0.1:1\nnetworks:\n  - name: n\n    id: 4\n    tap: t0\n    queue_len: 8\n", "line 7: networks[0].queue_len: 8 frames is outside 16..65536"},
		{"negative queue", "site: a\nlisten: 198.18.0.1:1\nnetworks:\n  - name: n\n    id: 4\n    tap: t0\n    queue_len: -1\n", "networks[0].queue_len: -1 frames"},
		{"not yaml", "site: [\n", "line 1: did not find expected node content"},
		{"peer without address or key", "site: a\nlisten: 198.18.0.1:1\npeers:\n  - name: b\n", "peers[0].address: missing"},
		{"bad private key", "site: a\nlisten: 198.18.0.1:1\nprivate_key: abc\n", "line 3: private_key: bad key"},
		{"peer key without own key", "site: a\nlisten: 198.18.0.1:1\npeers:\n  - name: b\n    public_key: " + pubB + "\n", "private_key: missing"},
		{"own key without peer key", "site: a\nlisten: 198.18.0.1:1\nprivate_key: " + privA + "\npeers:\n  - name: b\n    address: 198.18.0.2:1\n", "line 5: peers[0].public_key: missing"},
		{"bad rate", "site: a\nlisten: 198.18.0.1:1\negress_rate: fast\n", "not a rate"},
		{"min over max", "site: a\nlisten: 198.18.0.1:1\negress_rate: 100mbit\nnetworks:\n  - name: n\n    id: 4\n    tap: t0\n    max_rate: 10mbit\n    min_rate: 20mbit\n", "networks[0].min_rate: 20mbit exceeds max_rate 10mbit"},
		{"guarantees over capacity", "site: a\nlisten: 198.18.0.1:1\negress_rate: 10mbit\nnetworks:\n  - name: n\n    id: 4\n    tap: t0\n    min_rate: 20mbit\n", "line 3: egress_rate: 10mbit is less"},
		{"api on a public address without token", "site: a\nlisten: 198.18.0.1:1\napi: 198.18.0.1:7447\n", "line 3: api: 198.18.0.1:7447 is not a loopback address, so the API needs a token: set api_token_file"},
		{"api on the wildcard without token", "site: a\nlisten: 198.18.0.1:1\nprobe_interval: 100ms\napi: 0.0.0.0:7447\n", "line 4: api: 0.0.0.0:7447 is not a loopback address"},
		{"api on IPv6 without token", "site: a\nlisten: 198.18.0.1:1\napi: '[2001:db8::1]:7447'\n", "line 3: api: [2001:db8::1]:7447 is not a loopback"},
		{"relative token file", "site: a\nlisten: 198.18.0.1:1\napi: 198.18.0.1:7447\napi_token_file: token\n", `line 4: api_token_file: "token" is not an absolute path`},
		{"relative socket", "site: a\nlisten: 198.18.0.1:1\napi_socket: detour.sock\n", `line 3: api_socket: "detour.sock" is not an absolute path`},
		{"bad peer key", "site: a\nlisten: 198.18.0.1:1\nprivate_key: " + privA + "\npeers:\n  - name: b\n    public_key: AAAA\n", "line 6: peers[0].public_key: bad key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil {
				t.Fatalf("accepted %q", c.doc)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "yaml: yaml") {
				t.Errorf("error %q is not one clean line", err)
			}
		})
	}
}

func TestAPIAddresses(t *testing.T) {
	for _, doc := range []string{
		good,
		good + "api: '[::1]:7447'\n",
		good + "api: 127.0.0.2:7447\napi_socket: /run/detour/x.sock\n",
		good + "api: 198.18.0.1:7447\napi_token_file: /etc/detour/api.token\n",
		good + "api: 0.0.0.0:7447\napi_token_file: /etc/detour/api.token\n",
	} {
		if _, err := Parse([]byte(doc)); err != nil {
			t.Errorf("%q: %v", doc, err)
		}
	}
}

func TestRates(t *testing.T) {
	for in, want := range map[string]Rate{"20mbit": 20e6, "1.5gbit": 1.5e9, "800kbit": 800e3, "20Mbit/s": 20e6, "1000": 1000, "10mbps": 10e6} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "-3mbit", "mbit"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
	if s := Rate(20e6).String(); s != "20mbit" {
		t.Errorf("String = %q", s)
	}
}

func TestRatesInBytesRefused(t *testing.T) {
	for _, bad := range []string{"20MB", "20MBps", "20MB/s", "800KB", "1GiB", "20 bytes"} {
		if _, err := ParseRate(bad); err == nil || !strings.Contains(err.Error(), "in bytes") {
			t.Errorf("ParseRate(%q) = %v, want a refusal of bytes", bad, err)
		}
	}
	for _, ok := range []string{"20mbps", "20Mbit", "20mbit/s"} {
		if r, err := ParseRate(ok); err != nil || r != 20e6 {
			t.Errorf("ParseRate(%q) = %v, %v; want 20mbit", ok, r, err)
		}
	}
}

// A file with five different mistakes gets five errors in one run, each
// with its field and line, and a misspelt key does not also report the
// field it was meant to be as missing.
func TestEveryMistakeAtOnce(t *testing.T) {
	doc := `site: fujisawa
listen: 198.18.0.1:4800
probe_interval: 100
egress_rate: 20MB/s
max_hops: 12
peers:
  - name: inagi
    adress: 198.18.0.2:4800
networks:
  - name: lan
    id: 0
    tap: detour0
`
	_, err := Parse([]byte(doc))
	var pr Problems
	if !errors.As(err, &pr) {
		t.Fatalf("error %v is not Problems", err)
	}
	want := []string{
		`line 3: probe_interval: "100" is not a duration`,
		`line 4: egress_rate: "20MB/s" is a rate in bytes`,
		`line 5: max_hops: 12 is outside 1..8`,
		`line 8: unknown field "adress" (did you mean "address"?)`,
		`line 11: networks[0].id: missing or zero`,
	}
	if len(pr) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(pr), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(pr[i].Error(), w) {
			t.Errorf("problem %d = %q, want it to start with %q", i, pr[i], w)
		}
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("Problems does not match ErrInvalid")
	}
}

func TestPrivateKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := dir + "/site.key"
	doc := func(extra string) string {
		return "site: a\nlisten: 198.18.0.1:1\nprivate_key_file: " + keyFile + "\n" + extra + "peers:\n  - name: b\n    address: 198.18.0.2:1\n    public_key: " + pubB + "\n"
	}
	write := func(content string, mode os.FileMode) string {
		t.Helper()
		if err := os.WriteFile(keyFile, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(keyFile, mode); err != nil {
			t.Fatal(err)
		}
		cfg := dir + "/site.yaml"
		if err := os.WriteFile(cfg, []byte(doc("")), 0o644); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	a, err := Load(write(privA+"\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if a.PrivateKey != privA || !a.Encrypted() {
		t.Errorf("key from file not loaded: %q", a.PrivateKey)
	}
	if err := a.Validate(); err != nil {
		t.Errorf("a configuration Load returned does not validate again (as the agent does): %v", err)
	}
	if b, _ := a.Marshal(); strings.Contains(string(b), privA) {
		t.Errorf("Marshal wrote the key from the file into the config:\n%s", b)
	}
	for _, c := range []struct {
		content string
		mode    os.FileMode
		want    string
	}{
		{privA, 0o644, "line 3: private_key_file: " + keyFile + " is readable by everyone"},
		{"not a key", 0o600, "line 3: private_key_file: " + keyFile + ": bad key"},
	} {
		if _, err := Load(write(c.content, c.mode)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("key file %q mode %v: error %v, want %q", c.content, c.mode, err, c.want)
		}
	}
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir + "/site.yaml"); err == nil || !strings.Contains(err.Error(), "private_key_file: stat") {
		t.Errorf("missing key file: %v", err)
	}
	if _, err := Parse([]byte(doc("private_key: " + privA + "\n"))); err == nil || !strings.Contains(err.Error(), "in one place only") {
		t.Errorf("key in both places: %v", err)
	}
}

// The shipped example configuration is valid and carries no private key.
func TestExampleConfig(t *testing.T) {
	b, err := os.ReadFile("../../dist/site.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, err := Parse(b)
	if err != nil {
		t.Fatalf("dist/site.example.yaml: %v", err)
	}
	if a.PrivateKey != "" || a.PrivateKeyFile == "" {
		t.Errorf("the example has private_key %q and private_key_file %q; want only a file", a.PrivateKey, a.PrivateKeyFile)
	}
}
