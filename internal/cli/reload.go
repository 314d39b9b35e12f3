package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/detour-overlay/detour/internal/api"
)

func init() {
	Register(Command{Name: "reload", Summary: "make the agent read its configuration file again and apply what changed", Run: runReload,
		Usage: "reload [--socket PATH]\n\n" +
			"The agent reads its --config file again and applies what changed: networks\n" +
			"added, removed or altered, rate limits, egress_rate, underlay_mtu; flows of the\n" +
			"networks the change does not touch keep running. A file with an error is refused\n" +
			"with every problem's field and line, and the running configuration stays. Fields\n" +
			"the running agent cannot change (site, listen, advertise, keys, peers, api,\n" +
			"probe settings, kv_pools) are refused with the advice to restart. SIGHUP does the\n" +
			"same (systemctl reload detour). Sent through the agent's unix socket, as root or\n" +
			"a member of group detour."})
}

func runReload(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := socketFlag(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		return Fail(stderr, "reload", fmt.Errorf("%w: detour reload [--socket PATH]", ErrUsage))
	}
	var res api.Reload
	if err := client().Post("/v1/reload", nil, &res); err != nil {
		return Fail(stderr, "reload", err)
	}
	if len(res.Applied) == 0 {
		fmt.Fprintln(stdout, "reloaded: nothing changed")
	}
	for _, a := range res.Applied {
		fmt.Fprintln(stdout, "reloaded:", a)
	}
	for _, n := range res.Notes {
		fmt.Fprintln(stdout, "note:", n)
	}
	return 0
}
