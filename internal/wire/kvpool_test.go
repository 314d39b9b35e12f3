package wire

import (
	"bytes"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func testPool(servers int) KVPool {
	p := KVPool{Name: "cache", Origin: 7, Version: 3, Network: 1, VIP: netip.MustParseAddrPort("198.19.255.250:11211"), Hash: 1}
	for i := range servers {
		p.Servers = append(p.Servers, KVServer{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 11211),
			Weight: uint16(1 + i%3), Site: []string{"LAN", "BOR", "CLU"}[i%3], Flags: uint8(i % 4)})
	}
	return p
}

func TestKVPoolRoundTrip(t *testing.T) {
	p := testPool(5)
	b, err := AppendKVPool(nil, 9, &p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != KVPoolLen(&p) {
		t.Errorf("encoded %d bytes, KVPoolLen says %d", len(b), KVPoolLen(&p))
	}
	var got KVPool
	sender, err := ParseKVPool(b, &got)
	if err != nil || sender != 9 || !reflect.DeepEqual(got, p) {
		t.Fatalf("ParseKVPool = %v %+v %v, want %+v", sender, got, err, p)
	}
	for n := range len(b) {
		if _, err := ParseKVPool(b[:n], &got); err == nil {
			t.Fatalf("a message cut to %d of %d bytes parsed", n, len(b))
		}
	}
	bad := bytes.Clone(b)
	bad[len(bad)-2] = 3 // a site index past the table
	if _, err := ParseKVPool(bad, &got); err == nil {
		t.Errorf("a server naming a site outside the table parsed")
	}
}

// TestKVPoolSize: the largest pool that fits is bounded by MaxKVPoolLen,
// and a larger one is refused with ErrKVPoolTooLarge.
func TestKVPoolSize(t *testing.T) {
	n := 0
	for {
		p := testPool(n + 1)
		if KVPoolLen(&p) > MaxKVPoolLen {
			break
		}
		n++
	}
	if n < 100 {
		t.Errorf("only %d servers on 3 sites fit a message", n)
	}
	big := testPool(n + 1)
	if _, err := AppendKVPool(nil, 1, &big); err != ErrKVPoolTooLarge {
		t.Errorf("a pool of %d servers: %v, want ErrKVPoolTooLarge", n+1, err)
	}
	long := testPool(1)
	long.Name = strings.Repeat("x", MaxKVNameLen+1)
	if _, err := AppendKVPool(nil, 1, &long); err == nil {
		t.Errorf("a %d-byte name encoded", len(long.Name))
	}
}

func TestKVPoolNewer(t *testing.T) {
	a := KVPool{Version: 2, Origin: 5}
	b := KVPool{Version: 2, Origin: 9}
	c := KVPool{Version: 3, Origin: 1}
	if !b.Newer(&a) || a.Newer(&b) || !c.Newer(&b) || b.Newer(&c) || a.Newer(&a) {
		t.Errorf("order of (version, origin) wrong")
	}
}

func TestKVDigestRoundTrip(t *testing.T) {
	b := AppendKVDigest(nil, 4, 2, 0xdeadbeef)
	s, n, d, err := ParseKVDigest(b)
	if err != nil || s != 4 || n != 2 || d != 0xdeadbeef {
		t.Fatalf("ParseKVDigest = %v %v %x %v", s, n, d, err)
	}
	if _, _, _, err := ParseKVDigest(append(b, 0)); err == nil {
		t.Errorf("a long digest parsed")
	}
}

func FuzzParseKVPool(f *testing.F) {
	p := testPool(4)
	b, _ := AppendKVPool(nil, 2, &p)
	f.Add(b)
	f.Add(AppendKVDigest(nil, 3, 1, 5))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p KVPool
		if sender, err := ParseKVPool(b, &p); err == nil {
			again, err := AppendKVPool(nil, sender, &p)
			if err != nil || !bytes.Equal(again[4:], b[4:]) || !bytes.Equal(again[:3], b[:3]) {
				t.Fatalf("re-encodes to %x, %v; was %x", again, err, b)
			}
		}
		if s, n, d, err := ParseKVDigest(b); err == nil {
			if again := AppendKVDigest(nil, s, n, d); !bytes.Equal(again[4:], b[4:]) {
				t.Fatalf("digest re-encodes to %x; was %x", again, b)
			}
		}
	})
}
