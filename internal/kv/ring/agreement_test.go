package ring

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/detour-overlay/detour/internal/kv/kvtest"
)

// The agreement tests compare Ketama's placement of 100,000 random keys
// with the real implementations: libmemcached through its own C API
// (testdata/lmhash.c, compiled with gcc against libmemcached-dev) and
// twemproxy (a nutcracker process in front of real memcached instances on
// loopback: the keys are written through nutcracker, then each memcached
// lists the keys it holds). They skip when the tools are missing, and
// fail instead when CI=true. Each takes a few seconds; -short skips them.

// agreementKeys is the number of random keys compared.
const agreementKeys = 100000

// pools are the pools compared: three servers of unequal weight, one of
// them on memcached's default port (whose point names leave the port
// out), and ten servers of unequal weight.
func pools() map[string][]Server {
	three := []Server{
		{Host: "127.0.0.1", Weight: 1},
		{Host: "127.0.0.1", Weight: 2},
		{Host: "127.0.0.3", Port: DefaultPort, Weight: 3},
	}
	var ten []Server
	for i := 0; i < 10; i++ {
		ten = append(ten, Server{Host: "127.0.0.1", Weight: uint32(1 + (i*7)%5 + i/3)})
	}
	return map[string][]Server{"3 servers": three, "10 servers": ten}
}

// randomKeys returns n distinct random memcached keys of 1 to 64
// printable characters, the same on every run.
func randomKeys(n int) []string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:/|{}"
	r := rand.New(rand.NewPCG(17, 2026))
	seen := make(map[string]bool, n)
	keys := make([]string, 0, n)
	for len(keys) < n {
		b := make([]byte, 1+r.IntN(64))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		if !seen[string(b)] {
			seen[string(b)] = true
			keys = append(keys, string(b))
		}
	}
	return keys
}

// assignPorts gives each server without a port a free loopback port.
func assignPorts(t *testing.T, servers []Server) []Server {
	out := append([]Server(nil), servers...)
	for i := range out {
		if out[i].Port == 0 {
			out[i].Port = uint16(kvtest.FreePort(t, out[i].Host))
		}
	}
	return out
}

func TestAgreementLibmemcached(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	gcc := kvtest.Need(t, "gcc")
	if _, err := os.Stat("/usr/include/libmemcached/memcached.h"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("libmemcached-dev is not installed; CI=true forbids skipping")
		}
		t.Skip("libmemcached-dev is not installed")
	}
	bin := filepath.Join(t.TempDir(), "lmhash")
	if out, err := exec.Command(gcc, "-O2", "-o", bin, "testdata/lmhash.c", "-lmemcached").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	keys := randomKeys(agreementKeys)
	for name, servers := range pools() {
		t.Run(name, func(t *testing.T) {
			servers := assignPorts(t, servers)
			r, err := New(Ketama, servers)
			if err != nil {
				t.Fatal(err)
			}
			var args []string
			for _, s := range servers {
				args = append(args, fmt.Sprintf("%s:%d:%d", s.Host, s.Port, s.Weight))
			}
			cmd := exec.Command(bin, args...)
			cmd.Stdin = strings.NewReader(strings.Join(keys, "\n") + "\n")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("lmhash: %v", err)
			}
			got := strings.Fields(string(out))
			if len(got) != len(keys) {
				t.Fatalf("lmhash printed %d lines for %d keys", len(got), len(keys))
			}
			agree := 0
			for i, k := range keys {
				if strconv.Itoa(r.Owner([]byte(k))) == got[i] {
					agree++
				} else if i-agree <= 10 {
					t.Errorf("key %q: libmemcached says %s, ring says %d", k, got[i], r.Owner([]byte(k)))
				}
			}
			t.Logf("libmemcached weighted ketama, %s: %d of %d keys agree (%.3f %%)", name, agree, len(keys), 100*float64(agree)/float64(len(keys)))
			if agree != len(keys) {
				t.Fatalf("%d keys disagree", len(keys)-agree)
			}
		})
	}
}

func TestAgreementTwemproxy(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	nutcracker := kvtest.Need(t, "nutcracker")
	kvtest.Need(t, "memcached")
	keys := randomKeys(agreementKeys)
	// twemproxy also names servers ("host:port:weight name"); the name
	// replaces host:port in the point names.
	all := pools()
	named := append([]Server(nil), all["3 servers"]...)
	for i := range named {
		named[i].Name = fmt.Sprintf("cache-%d", i)
	}
	all["3 named servers"] = named
	for name, servers := range all {
		t.Run(name, func(t *testing.T) {
			servers := assignPorts(t, servers)
			r, err := New(Ketama, servers)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range servers {
				kvtest.Memcached(t, s.Host, int(s.Port), false)
			}
			proxy := startNutcracker(t, nutcracker, servers)
			writeKeys(t, proxy, keys)
			where := make(map[string]int, len(keys))
			for i, s := range servers {
				for _, k := range dumpKeys(t, net.JoinHostPort(s.Host, strconv.Itoa(int(s.Port)))) {
					if j, dup := where[k]; dup {
						t.Fatalf("key %q on servers %d and %d", k, j, i)
					}
					where[k] = i
				}
			}
			agree := 0
			for n, k := range keys {
				i, ok := where[k]
				if !ok {
					t.Fatalf("key %q is on no server", k)
				}
				if r.Owner([]byte(k)) == i {
					agree++
				} else if n-agree <= 10 {
					t.Errorf("key %q: twemproxy put it on %d, ring says %d", k, i, r.Owner([]byte(k)))
				}
			}
			t.Logf("twemproxy md5+ketama, %s: %d of %d keys agree (%.3f %%)", name, agree, len(keys), 100*float64(agree)/float64(len(keys)))
			if agree != len(keys) {
				t.Fatalf("%d keys disagree", len(keys)-agree)
			}
		})
	}
}

// startNutcracker runs nutcracker with one pool (hash md5, distribution
// ketama, no ejection) over servers, its client and stats ports on
// 127.0.0.1, and returns the client address.
func startNutcracker(t *testing.T, bin string, servers []Server) string {
	dir := t.TempDir()
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(kvtest.FreePort(t, "127.0.0.1")))
	var conf bytes.Buffer
	fmt.Fprintf(&conf, "pool:\n  listen: %s\n  hash: md5\n  distribution: ketama\n  auto_eject_hosts: false\n  timeout: 2000\n  servers:\n", listen)
	for _, s := range servers {
		fmt.Fprintf(&conf, "   - %s:%d:%d", s.Host, s.Port, s.Weight)
		if s.Name != "" {
			fmt.Fprintf(&conf, " %s", s.Name)
		}
		conf.WriteString("\n")
	}
	confPath := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	stats := strconv.Itoa(kvtest.FreePort(t, "127.0.0.1"))
	kvtest.Start(t, bin, "-c", confPath, "-o", filepath.Join(dir, "nutcracker.log"),
		"-a", "127.0.0.1", "-s", stats, "-p", filepath.Join(dir, "nutcracker.pid"))
	kvtest.WaitTCP(t, listen, "get detour-probe\r\n", "END")
	return listen
}

// writeKeys sets every key (value "1") through addr, pipelining batches of
// 500 requests, and checks every reply.
func writeKeys(t *testing.T, addr string, keys []string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	rd := bufio.NewReader(c)
	var req bytes.Buffer
	for start := 0; start < len(keys); start += 500 {
		end := min(start+500, len(keys))
		req.Reset()
		for _, k := range keys[start:end] {
			fmt.Fprintf(&req, "set %s 0 0 1\r\n1\r\n", k)
		}
		if _, err := c.Write(req.Bytes()); err != nil {
			t.Fatal(err)
		}
		for i := start; i < end; i++ {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if line != "STORED\r\n" {
				t.Fatalf("set %s: %q", keys[i], line)
			}
		}
	}
}

// dumpKeys asks the memcached at addr for every key it holds (lru_crawler
// metadump all) and returns them URL-decoded.
func dumpKeys(t *testing.T, addr string) []string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write([]byte("lru_crawler metadump all\r\n")); err != nil {
		t.Fatal(err)
	}
	var keys []string
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if line == "END" {
			return keys
		}
		f, _, _ := strings.Cut(line, " ")
		enc, ok := strings.CutPrefix(f, "key=")
		if !ok {
			t.Fatalf("metadump from %s: %q", addr, line)
		}
		k, err := url.QueryUnescape(enc)
		if err != nil {
			t.Fatalf("metadump key %q: %v", enc, err)
		}
		keys = append(keys, k)
	}
	t.Fatalf("metadump from %s ended without END: %v", addr, sc.Err())
	return nil
}
