package cli

import (
	"fmt"
	"io"
	"net/url"

	"github.com/detour-overlay/detour/internal/api"
)

func init() {
	Register(Command{Name: "ui", Summary: "print the address of this site's map page (sites, delays, paths, route changes)", Run: runUI,
		Usage: "ui [--api ADDR] [--token-file FILE]\n\n" +
			"The agent serves a live map of the overlay on its API address. The page\n" +
			"is read-only and needs nothing from the Internet; off loopback its\n" +
			"address carries the API's token."})
}

func runUI(args []string, stdout, stderr io.Writer) int {
	fs, client, _ := apiFlags("ui", stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		return Fail(stderr, "ui", fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0)))
	}
	c, err := client()
	if err != nil {
		return Fail(stderr, "ui", err)
	}
	var st api.Status
	if err := c.Get("/v1/status", &st); err != nil {
		return Fail(stderr, "ui", err)
	}
	addr := "http://" + c.Addr + "/"
	if c.Token != "" {
		addr += "?access_token=" + url.QueryEscape(c.Token)
	}
	fmt.Fprintf(stdout, "%s\n", addr)
	return 0
}
