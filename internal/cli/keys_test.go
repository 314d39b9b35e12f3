package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/detour-overlay/detour/internal/keys"
)

func TestGenkeyPubkey(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"genkey"}, &out, &errb); code != 0 {
		t.Fatalf("genkey exit %d: %s", code, errb.String())
	}
	priv, err := keys.ParsePrivate(out.String())
	if err != nil {
		t.Fatalf("genkey printed a bad key %q: %v", out.String(), err)
	}
	stdin = strings.NewReader(out.String())
	defer func() { stdin = nil }()
	out.Reset()
	if code := Main([]string{"pubkey"}, &out, &errb); code != 0 {
		t.Fatalf("pubkey exit %d: %s", code, errb.String())
	}
	if got := strings.TrimSpace(out.String()); got != priv.Public().String() {
		t.Fatalf("pubkey printed %q, want %q", got, priv.Public().String())
	}
}

func TestPubkeyBadInput(t *testing.T) {
	stdin = strings.NewReader("hello")
	defer func() { stdin = nil }()
	var out, errb bytes.Buffer
	if code := Main([]string{"pubkey"}, &out, &errb); code != 1 {
		t.Fatalf("pubkey of a bad key exited %d, want 1", code)
	}
	if !strings.Contains(errb.String(), "bad key") || out.Len() != 0 {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}
}
