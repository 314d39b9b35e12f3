package cli

import (
	"bytes"
	"strings"
	"testing"
)

// Every command answers --help, -h and "detour help NAME" on stdout with
// its summary and synopsis, exits 0 and writes nothing to stderr.
func TestEveryCommandHasHelp(t *testing.T) {
	names := gateway.Names()
	if len(names) < 10 {
		t.Fatalf("only %d commands registered", len(names))
	}
	for _, name := range names {
		c, _ := gateway.Lookup(name)
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
			var out, errOut bytes.Buffer
			if code := Main(args, &out, &errOut); code != 0 {
				t.Errorf("detour %s: exit %d", strings.Join(args, " "), code)
			}
			if !strings.HasPrefix(out.String(), "detour "+name+": "+c.Summary+"\n\nusage: detour "+name) {
				t.Errorf("detour %s printed %q", strings.Join(args, " "), out.String())
			}
			if errOut.Len() != 0 {
				t.Errorf("detour %s wrote to stderr: %q", strings.Join(args, " "), errOut.String())
			}
		}
	}
	var out bytes.Buffer
	if code := Main([]string{"agent", "--help"}, &out, &out); code != 0 || !strings.Contains(out.String(), "-config string") {
		t.Errorf("agent --help lists no options: %q", out.String())
	}
}
