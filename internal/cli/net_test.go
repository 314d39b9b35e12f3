package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestNetUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"net"}, "usage"},
		{[]string{"net", "bogus"}, `unknown subcommand "bogus"`},
		{[]string{"net", "attach", "x"}, "attach needs --id"},
		{[]string{"net", "create", "x", "--id", "4"}, "create picks a new id"},
		{[]string{"net", "detach"}, "takes one name"},
		{[]string{"net", "list", "x"}, "takes no name"},
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: %q does not say %q", c.args, errb.String(), c.want)
		}
	}
}

func TestRouteUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"route"}, "usage"},
		{[]string{"route", "pin"}, "usage"},
		{[]string{"route", "pin", "-h"}, "options such as -h go before the action"},
		{[]string{"route", "unpin", "a", "b"}, "usage"},
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: %q does not say %q", c.args, errb.String(), c.want)
		}
	}
}
