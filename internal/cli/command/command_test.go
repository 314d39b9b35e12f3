package command

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// A Set runs the command named first, lists its commands under the
// binary's own name, and says which binary refused an unknown one.
func TestSetMain(t *testing.T) {
	s := NewSet("detour-lab")
	var got []string
	s.Register(Command{Name: "testbed", Summary: "the testbed", Run: func(args []string, stdout, stderr io.Writer) int {
		got = args
		return 7
	}})
	s.Register(VersionCommand("detour-lab"))
	var out, errb bytes.Buffer
	if code := s.Main([]string{"testbed", "up", "x"}, &out, &errb); code != 7 || strings.Join(got, " ") != "up x" {
		t.Errorf("testbed up x: exit %d, args %q", code, got)
	}
	if code := s.Main([]string{"agent"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `detour-lab: unknown command "agent" (see 'detour-lab help')`) {
		t.Errorf("unknown command: exit %d, %q", code, errb.String())
	}
	out.Reset()
	if code := s.Main([]string{"help"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "usage: detour-lab COMMAND") ||
		!strings.Contains(out.String(), "  testbed      the testbed\n") || !strings.Contains(out.String(), "  version") {
		t.Errorf("help: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := s.Main([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "detour-lab "+Version+" (") {
		t.Errorf("version: exit %d, %q", code, out.String())
	}
}

// Fail names the binary and the command, and exits 2 for a usage error, 1
// otherwise.
func TestSetFail(t *testing.T) {
	s := NewSet("detour")
	var errb bytes.Buffer
	if code := s.Fail(&errb, "route", fmt.Errorf("%w: want DEST", ErrUsage)); code != 2 || errb.String() != "detour route: usage: want DEST\n" {
		t.Errorf("usage error: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := s.Fail(&errb, "status", errors.New("no agent")); code != 1 || errb.String() != "detour status: no agent\n" {
		t.Errorf("other error: exit %d, %q", code, errb.String())
	}
}

// Registering a name twice is a programming error.
func TestSetRegisterTwicePanics(t *testing.T) {
	s := NewSet("detour")
	s.Register(Command{Name: "x"})
	defer func() {
		if recover() == nil {
			t.Error("a second command x was accepted")
		}
	}()
	s.Register(Command{Name: "x"})
}
