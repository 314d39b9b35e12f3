package scenario

import (
	"errors"
	"strings"
	"testing"
)

func TestKVPools(t *testing.T) {
	b, err := ShippedSource("lanman2017-kv")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyDefaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(s.KVPools) != 1 || len(s.KVPools[0].Servers) != 3 || s.KVPools[0].Servers[0].Port != DefaultKVPort || s.KVPools[0].Servers[0].Host != 1 {
		t.Fatalf("pools %+v", s.KVPools)
	}
	for _, c := range []struct{ patch, field string }{
		{"{site: XYZ}", "kv_pools[0].servers[3].site"},
		{"{site: BOR, host: 3}", "kv_pools[0].servers[3].host"},
		{"{site: BOR}", "kv_pools[0].servers[3]"},
	} {
		bad := strings.Replace(string(b), "      - {site: NEU}\n", "      - {site: NEU}\n      - "+c.patch+"\n", 1)
		s, err := Parse([]byte(bad))
		if err == nil {
			s.ApplyDefaults()
			err = s.Validate()
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || fe.Line == 0 {
			t.Fatalf("%s: %v", c.patch, err)
		}
	}
}
