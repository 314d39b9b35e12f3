package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An agent whose API listens off loopback without a token file is
// refused by --check and at start, naming the field and its line.
func TestAgentRefusesOpenAPIWithoutToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "site.yaml")
	doc := "site: fujisawa\nlisten: 198.18.0.1:4800\napi: 198.18.0.1:7447\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"agent", "--config", file, "--check"}, {"agent", "--config", file}} {
		var out, errb bytes.Buffer
		code := Main(args, &out, &errb)
		want := "line 3: api: 198.18.0.1:7447 is not a loopback address, so the API needs a token: set api_token_file"
		if code != 1 || !strings.Contains(errb.String(), want) {
			t.Errorf("%v: exit %d, %q; want exit 1 and %q", args, code, errb.String(), want)
		}
	}
}

// Changes go to the socket of --socket, else of $DETOUR_SOCKET, and say
// plainly when no agent listens there.
func TestChangesGoToTheSocket(t *testing.T) {
	dir := t.TempDir()
	flagSock, envSock := filepath.Join(dir, "flag.sock"), filepath.Join(dir, "env.sock")
	t.Setenv("DETOUR_SOCKET", envSock)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"route", "--socket", flagSock, "forbid", "Inagi"}, "no agent listens on " + flagSock},
		{[]string{"route", "forbid", "Inagi"}, "no agent listens on " + envSock},
		{[]string{"net", "limit", "default", "--max-rate", "1mbit"}, "no agent listens on " + envSock},
		{[]string{"net", "egress", "1mbit", "--socket", flagSock}, "no agent listens on " + flagSock},
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != 1 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want %q", c.args, code, errb.String(), c.want)
		}
	}
}
