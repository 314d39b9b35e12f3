package wire

import (
	"bytes"
	"testing"
)

func TestTrustRoundTrip(t *testing.T) {
	body := []byte("a certificate")
	b, err := AppendTrust(nil, TypeCertificate, CertFlagReply, 7, body)
	if err != nil {
		t.Fatal(err)
	}
	flags, sender, got, err := ParseTrust(b, TypeCertificate)
	if err != nil || flags != CertFlagReply || sender != 7 || !bytes.Equal(got, body) {
		t.Fatalf("ParseTrust = %d %v %q %v", flags, sender, got, err)
	}
	if _, _, _, err := ParseTrust(b, TypeRevocation); err == nil {
		t.Errorf("a certificate parsed as a revocation")
	}
	if _, err := AppendTrust(nil, TypeRevocation, 0, 0, body); err == nil {
		t.Errorf("sender 0 encoded")
	}
	if _, _, _, err := ParseTrust(b[:TrustHeaderLen], TypeCertificate); err == nil {
		t.Errorf("empty body parsed")
	}
}

func FuzzParseTrust(f *testing.F) {
	b, _ := AppendTrust(nil, TypeRevocation, 0, 9, []byte{1, 2, 3})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, typ := range []Type{TypeCertificate, TypeRevocation} {
			flags, sender, body, err := ParseTrust(b, typ)
			if err != nil {
				continue
			}
			again, err := AppendTrust(nil, typ, flags, sender, body)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("re-encodes to %x, %v; was %x", again, err, b)
			}
		}
	})
}
