package labcli

import (
	"bytes"
	"strings"
	"testing"
)

// Every command of detour-lab answers --help on stdout and exits 0.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, name := range lab.Names() {
		var out, errOut bytes.Buffer
		if code := Main([]string{name, "--help"}, &out, &errOut); code != 0 || errOut.Len() != 0 {
			t.Errorf("detour-lab %s --help: exit %d, stderr %q", name, code, errOut.String())
		}
		if !strings.HasPrefix(out.String(), "detour-lab "+name+": ") || !strings.Contains(out.String(), "usage: detour-lab "+name) {
			t.Errorf("detour-lab %s --help printed %q", name, out.String())
		}
	}
}
