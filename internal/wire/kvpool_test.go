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

// testReplicated is a replicated pool of shards shards with replicas
// replicas each, on three sites and two tiers, with a near site no
// server is at.
func testReplicated(shards, replicas int) KVPool {
	p := KVPool{Name: "objects", Origin: 7, Version: 3, Network: 1, VIP: netip.MustParseAddrPort("198.19.255.251:11211"), Hash: 1,
		Policy: 2, Hedge: true, NearSites: []string{"NEU", "TLS"}}
	for k := range shards {
		name := ""
		if k%2 == 0 {
			name = "s" + strings.Repeat("x", k%5)
		}
		p.Shards = append(p.Shards, KVShard{Name: name, Weight: uint16(1 + k%3)})
		for r := range replicas {
			i := k*replicas + r
			p.Servers = append(p.Servers, KVServer{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 11211),
				Weight: 1, Site: []string{"LAN", "NEU", "BOR"}[r%3], Shard: uint16(k), Tier: []string{"disk", "memory", ""}[r%3]})
		}
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

// TestKVPoolReplicatedRoundTrip: a replicated pool comes back whole
// (policy, hedge, near sites, shards, each server's shard and tier), its
// length is KVPoolLen's, every prefix is refused, and so are the ways a
// section can lie; a pool without shards has no flag and no section.
func TestKVPoolReplicatedRoundTrip(t *testing.T) {
	p := testReplicated(3, 3)
	b, err := AppendKVPool(nil, 9, &p)
	if err != nil {
		t.Fatal(err)
	}
	if b[3]&KVPoolFlagReplicated == 0 {
		t.Errorf("flags %#x: no KVPoolFlagReplicated", b[3])
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
	if _, err := ParseKVPool(append(bytes.Clone(b), 0), &got); err == nil {
		t.Errorf("a message with a byte too many parsed")
	}
	// Without the flag the section is bytes too many.
	plain := bytes.Clone(b)
	plain[3] &^= KVPoolFlagReplicated
	if _, err := ParseKVPool(plain, &got); err != ErrMalformed {
		t.Errorf("the section without the flag: %v, want ErrMalformed", err)
	}
	// The last server's entry is its shard (2 bytes) and tier index.
	for name, edit := range map[string]func(m []byte){
		"shard past the table":   func(m []byte) { m[len(m)-2] = 9 },
		"tier past the table":    func(m []byte) { m[len(m)-1] = 3 },
		"a shard without one":    func(m []byte) { m[len(m)-2], m[len(m)-5], m[len(m)-8] = 0, 0, 0 }, // the last shard's replicas all in shard 0
		"policy unknown":         func(m []byte) { m[replOffset(&p)] = KVPolicies },
		"replication flag":       func(m []byte) { m[replOffset(&p)+1] |= 0x80 },
		"no shards":              func(m []byte) { be.PutUint16(m[replOffset(&p)+4:], 0) },
		"near site out of order": func(m []byte) { m[replOffset(&p)+kvReplFixedLen+1] = 4 },
	} {
		m := bytes.Clone(b)
		edit(m)
		if _, err := ParseKVPool(m, &got); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	// A pool without shards is encoded as before: no flag, and replication
	// fields without shards are refused rather than dropped.
	q := testPool(3)
	b, err = AppendKVPool(nil, 9, &q)
	if err != nil || b[3] != 0 || len(b) != kvPoolFixedLen+len(q.Name)+4*3+kvServerLen*3 {
		t.Errorf("a pool without shards: flags %#x, %d bytes, %v", b[3], len(b), err)
	}
	for name, edit := range map[string]func(p *KVPool){
		"near sites": func(p *KVPool) { p.NearSites = []string{"NEU"} },
		"hedge":      func(p *KVPool) { p.Hedge = true },
		"policy":     func(p *KVPool) { p.Policy = 1 },
		"tier":       func(p *KVPool) { p.Servers[0].Tier = "disk" },
	} {
		r := q.Clone()
		edit(&r)
		if _, err := AppendKVPool(nil, 9, &r); err != ErrMalformed {
			t.Errorf("%s without shards: %v, want ErrMalformed", name, err)
		}
	}
	for name, edit := range map[string]func(p *KVPool){
		"a shard without replicas": func(p *KVPool) { p.Shards = append(p.Shards, KVShard{Weight: 1}) },
		"a server's shard missing": func(p *KVPool) { p.Servers[0].Shard = 7 },
		"weight 0":                 func(p *KVPool) { p.Shards[0].Weight = 0 },
		"policy unknown":           func(p *KVPool) { p.Policy = KVPolicies },
		"a tier too long":          func(p *KVPool) { p.Servers[0].Tier = strings.Repeat("t", MaxKVLabelLen+1) },
	} {
		r := p.Clone()
		edit(&r)
		if _, err := AppendKVPool(nil, 9, &r); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// replOffset is where p's replication section starts in its message.
func replOffset(p *KVPool) int {
	n := kvPoolFixedLen + len(p.Name) + kvServerLen*len(p.Servers)
	for _, s := range kvSites(p) {
		n += 1 + len(s)
	}
	return n
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
	// Replicated: the section counts, and MaxKVPoolLen still bounds it.
	n = 0
	for {
		p := testReplicated(n+1, 3)
		if KVPoolLen(&p) > MaxKVPoolLen {
			break
		}
		n++
	}
	if n < 20 {
		t.Errorf("only %d shards of 3 replicas fit a message", n)
	}
	bigr := testReplicated(n+1, 3)
	if _, err := AppendKVPool(nil, 1, &bigr); err != ErrKVPoolTooLarge {
		t.Errorf("a pool of %d shards: %v, want ErrKVPoolTooLarge", n+1, err)
	}
	fits := testReplicated(n, 3)
	if b, err := AppendKVPool(nil, 1, &fits); err != nil || len(b) > MaxKVPoolLen {
		t.Errorf("a pool of %d shards: %d bytes, %v", n, len(b), err)
	}
	t.Logf("%d shards of 3 replicas fit a message", n)
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
	r := testReplicated(3, 3)
	b, _ = AppendKVPool(nil, 2, &r)
	f.Add(b)
	r = testReplicated(1, 1)
	r.NearSites, r.Hedge = nil, false
	b, _ = AppendKVPool(nil, 2, &r)
	f.Add(b)
	f.Add(AppendKVDigest(nil, 3, 1, 5))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p KVPool
		if sender, err := ParseKVPool(b, &p); err == nil {
			again, err := AppendKVPool(nil, sender, &p)
			if err != nil || !bytes.Equal(again[4:], b[4:]) || !bytes.Equal(again[:3], b[:3]) || again[3] != b[3]&KVPoolFlagReplicated {
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
