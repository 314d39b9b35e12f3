package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/config"
)

// The inspection commands ask the local agent's API and print a table, or
// the API's JSON with --json.
func init() {
	for _, c := range []struct {
		name, summary, path string
		print               func(w io.Writer, raw []byte) error
	}{
		{"status", "show this site's agent: members, networks, counters", "/v1/status", printStatus},
		{"links", "show the measured matrix: one-way delays, RTT, loss", "/v1/links", printLinks},
		{"routes", "show the path to every site with its latency and the direct path's", "/v1/routes", printRoutes},
		{"tivs", "show pairs where a detour beats the direct path, and by how much", "/v1/tivs", printTIVs},
		{"fdb", "show the learned Ethernet addresses", "/v1/fdb", printFDB},
	} {
		Register(Command{Name: c.name, Summary: c.summary, Usage: c.name + " [--api ADDR] [--token-file FILE] [--json]" + map[bool]string{true: " [--history [FROM TO]]"}[c.name == "links"], Run: func(args []string, stdout, stderr io.Writer) int {
			return inspect(c.name, c.path, c.print, args, stdout, stderr)
		}})
	}
	Register(Command{Name: "why", Summary: "explain the path to one site (detour why SITE)", Run: runWhy,
		Usage: "why [--api ADDR] [--token-file FILE] [--json] SITE\n\n" +
			"Shows the path in use to SITE, its cost against the direct path and every\n" +
			"candidate, the measured delay and loss of each link, and why it was chosen."})
	Register(Command{Name: "route", Summary: "operator overrides: route pin|unpin|forbid|allow", Run: runRoute,
		Usage: "route [--socket PATH] pin DEST [VIA...] | unpin DEST | forbid SITE | allow SITE\n\n" +
			"pin sends this site's traffic to DEST through the sites VIA (none: direct)\n" +
			"until unpin; forbid keeps every path from relaying through SITE until allow.\n" +
			"Changes go through the agent's unix socket, as root or a member of group detour."})
}

// apiFlags declares the flags every command that reads the API takes.
// The client it returns, once the flags are parsed, reads the agent's
// TCP address (--api) with the token of --token-file, if any.
func apiFlags(name string, stderr io.Writer) (*flag.FlagSet, func() (*api.Client, error), *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("api", config.DefaultAPI, "the agent's API address (read-only views)")
	tokenFile := fs.String("token-file", "", "a file with the API's bearer token (the agent's api_token_file), needed off loopback")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	client := func() (*api.Client, error) {
		c := api.NewClient(*addr)
		if *tokenFile != "" {
			b, err := os.ReadFile(*tokenFile)
			if err != nil {
				return nil, err
			}
			c.Token = strings.TrimSpace(string(b))
		}
		return c, nil
	}
	return fs, client, asJSON
}

// socketFlag declares --socket, the agent's unix socket through which
// changes are made. The client it returns uses, in this order, --socket,
// $DETOUR_SOCKET, or the socket of this network namespace's agent
// (api.LocalSocket).
func socketFlag(fs *flag.FlagSet) func() *api.Client {
	path := fs.String("socket", "", "the agent's unix socket, for changes (default $"+api.SocketEnv+", or "+api.DefaultSocket+"; in network namespace NS "+api.NetnsSocket("NS")+")")
	return func() *api.Client {
		p := *path
		if p == "" {
			p = os.Getenv(api.SocketEnv)
		}
		if p == "" {
			p = api.LocalSocket()
		}
		return api.NewSocketClient(p)
	}
}

func inspect(name, path string, print func(io.Writer, []byte) error, args []string, stdout, stderr io.Writer) int {
	fs, client, asJSON := apiFlags(name, stderr)
	var hist *bool
	if name == "links" {
		hist = fs.Bool("history", false, "the last hour of each link instead (FROM TO: of one link, point by point)")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case hist != nil && *hist && fs.NArg() == 2:
		path, print = "/v1/history/"+api.PathEscape(fs.Arg(0))+"/"+api.PathEscape(fs.Arg(1)), printSeries
	case hist != nil && *hist && fs.NArg() == 0:
		path, print = "/v1/history", printHistory
	case fs.NArg() > 0:
		return Fail(stderr, name, fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0)))
	}
	c, err := client()
	if err != nil {
		return Fail(stderr, name, err)
	}
	return show(name, c, path, *asJSON, print, stdout, stderr)
}

func show(name string, c *api.Client, path string, asJSON bool, print func(io.Writer, []byte) error, stdout, stderr io.Writer) int {
	var raw json.RawMessage
	if err := c.Get(path, &raw); err != nil {
		return Fail(stderr, name, err)
	}
	if asJSON {
		stdout.Write(raw)
		return 0
	}
	if err := print(stdout, raw); err != nil {
		return Fail(stderr, name, err)
	}
	return 0
}

func runWhy(args []string, stdout, stderr io.Writer) int {
	fs, client, asJSON := apiFlags("why", stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		return Fail(stderr, "why", fmt.Errorf("%w: detour why SITE", ErrUsage))
	}
	c, err := client()
	if err != nil {
		return Fail(stderr, "why", err)
	}
	return show("why", c, "/v1/why/"+api.PathEscape(fs.Arg(0)), *asJSON, printWhy, stdout, stderr)
}

func runRoute(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("route", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := socketFlag(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rest := fs.Args()
	usage := fmt.Errorf("%w: detour route [--socket PATH] pin DEST [VIA...] | unpin DEST | forbid SITE | allow SITE", ErrUsage)
	if len(rest) < 2 {
		return Fail(stderr, "route", usage)
	}
	for _, a := range rest {
		if strings.HasPrefix(a, "-") {
			return Fail(stderr, "route", fmt.Errorf("%w (options such as %s go before the action)", usage, a))
		}
	}
	c := client()
	site := api.PathEscape(rest[1])
	var err error
	var out map[string]any
	switch {
	case rest[0] == "pin":
		err = c.Post("/v1/pins", api.Pin{Dest: rest[1], Via: append([]string{}, rest[2:]...)}, &out)
	case rest[0] == "unpin" && len(rest) == 2:
		err = c.Delete("/v1/pins/"+site, &out)
	case rest[0] == "forbid" && len(rest) == 2:
		err = c.Post("/v1/forbidden/"+site, nil, &out)
	case rest[0] == "allow" && len(rest) == 2:
		err = c.Delete("/v1/forbidden/"+site, &out)
	default:
		return Fail(stderr, "route", usage)
	}
	if err != nil {
		return Fail(stderr, "route", err)
	}
	fmt.Fprintf(stdout, "ok: %s %s\n", rest[0], strings.Join(rest[1:], " "))
	return 0
}

func table(w io.Writer, header string, rows func(tw io.Writer)) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	return tw.Flush()
}

func printStatus(w io.Writer, raw []byte) error {
	var s api.Status
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	enc := "in the clear"
	if s.Encrypted {
		enc = "encrypted"
	}
	fmt.Fprintf(w, "site %s (id %s), detour %s, listening on %s (%s), up %.0f s\n", s.Site, s.ID, s.Version, s.Listen, enc, s.UptimeSeconds)
	fmt.Fprintf(w, "probing every %.0f ms, a link is down after %.0f ms without a reply\n", s.ProbeIntervalMS, s.DownAfterMS)
	fmt.Fprintf(w, "throughput probes: %d bytes sent (budget %d bytes/s)\n\n", s.ProbeBytes, s.ProbeBudgetBytesPerSecond)
	table(w, "MEMBER\tID\tADDRESS\tSTATE\tSINCE", func(tw io.Writer) {
		for _, m := range s.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1fs\n", m.Name, m.ID, m.Address, m.State, m.SinceSeconds)
		}
	})
	fmt.Fprintln(w)
	table(w, "NETWORK\tID\tTAP\tMTU", func(tw io.Writer) {
		for _, n := range s.Networks {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", n.Name, n.ID, n.TAP, n.MTU)
		}
	})
	if len(s.KVPools) > 0 {
		fmt.Fprintln(w)
		table(w, "KV POOL\tADDRESS\tVERSION\tSERVERS UP\tREQUESTS\tREPLIES\tERRORS\tFAILOVERS", func(tw io.Writer) {
			for _, p := range s.KVPools {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%d\t%d\t%d\t%d\n", p.Name, p.Address, p.Version, p.Up, p.Servers, p.Requests, p.Replies, p.Errors, p.FailedOver)
			}
		})
	}
	printClasses(w, s.Counters)
	for _, p := range s.Pins {
		fmt.Fprintf(w, "pinned: %s via [%s]\n", p.Dest, strings.Join(p.Via, " "))
	}
	if len(s.Forbidden) > 0 {
		fmt.Fprintf(w, "forbidden relays: %s\n", strings.Join(s.Forbidden, " "))
	}
	if len(s.Waiting) > 0 {
		fmt.Fprintf(w, "waiting for their sites to join: %s\n", strings.Join(s.Waiting, ", "))
	}
	for _, l := range s.FloodLoops {
		fmt.Fprintf(w, "LOOP on network %s: frames from %s come back through this site's bridge; they are not flooded (loop %d, flood_loop_dropped %d)\n",
			l.Network, l.Source, l.Loops, s.Counters["flood_loop_dropped"])
	}
	if c := s.LastChange; c != nil {
		fmt.Fprintf(w, "last change: %s, by %s (uid %d, pid %d) at %s\n", c.What, c.User, c.UID, c.PID, c.At.Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "last change: none since the agent started")
	}
	return nil
}

func printLinks(w io.Writer, raw []byte) error {
	var ls []api.Link
	if err := json.Unmarshal(raw, &ls); err != nil {
		return err
	}
	return table(w, "FROM\tTO\tUP\tONE-WAY(est) ms\tSHIFTED ms\tRTT ms\tLOSS % [95 %]\tPROBES\tJITTER ms\tRATE Mbit/s\tAGE ms", func(tw io.Writer) {
		for _, l := range ls {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%.2f\t%.2f\t%.2f\t%.2f [%.2f, %.2f]\t%d\t%.2f\t%s\t%.0f\n", l.From, l.To, l.Up, l.OneWayMs, l.ShiftedMs, l.RTTMs,
				l.LossPct, l.LossLowPct, l.LossHighPct, l.LossSamples, l.JitterMs, rateText(l.RateMbps, l.RateKind), l.AgeMs)
		}
	})
}

// printHistory prints each link's last hour in a line.
func printHistory(w io.Writer, raw []byte) error {
	var h api.HistoryIndex
	if err := json.Unmarshal(raw, &h); err != nil {
		return err
	}
	err := table(w, "FROM\tTO\tSPAN s\tUP s\tMIN ms\tMEDIAN ms\tMAX ms\tMAX LOSS %", func(tw io.Writer) {
		for _, l := range h.Links {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\n", l.From, l.To, l.Seconds, l.UpSeconds, l.MinMs, l.MedianMs, l.MaxMs, l.MaxLoss)
		}
	})
	fmt.Fprintf(w, "%d route changes kept; the record takes %.1f MB\n", len(h.Events), float64(h.Bytes)/1e6)
	return err
}

// printSeries prints one link's record point by point.
func printSeries(w io.Writer, raw []byte) error {
	var h api.HistoryLink
	if err := json.Unmarshal(raw, &h); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s → %s\n", h.From, h.To)
	return table(w, "TIME\tSECONDS\tUP\tONE-WAY ms\tLOSS %", func(tw io.Writer) {
		for _, s := range h.Samples {
			fmt.Fprintf(tw, "%s\t%d\t%v\t%.2f\t%.2f\n", s.At.Local().Format("15:04:05"), s.Seconds, s.Up, s.OneWayMs, s.LossPct)
		}
	})
}

func printRoutes(w io.Writer, raw []byte) error {
	var rs []api.Route
	if err := json.Unmarshal(raw, &rs); err != nil {
		return err
	}
	return table(w, "DEST\tPATH\tLATENCY ms\tDIRECT ms\tSAVING ms\tRATE Mbit/s\tBULK PATH\tBULK ms\tBULK Mbit/s\tCHANGES\tPINNED\tBACKUP (in doubt)", func(tw io.Writer) {
		for _, r := range rs {
			bulk, bulkMs, bulkRate := "(same)", "-", "-"
			if b := r.Bulk; b != nil {
				bulk, bulkMs, bulkRate = strings.Join(b.Path, " > "), fmt.Sprintf("%.2f", b.LatencyMs), fmt.Sprintf("%.1f", b.RateMbps)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%d\t%v\t%s\n", r.Dest, strings.Join(r.Path, " > "), r.LatencyMs, r.DirectMs,
				r.SavingMs, rateText(r.RateMbps, ""), bulk, bulkMs, bulkRate, r.Changes, r.Pinned, dash(strings.Join(r.Backup, " > ")))
		}
	})
}

func printTIVs(w io.Writer, raw []byte) error {
	var ts []api.TIV
	if err := json.Unmarshal(raw, &ts); err != nil {
		return err
	}
	if len(ts) == 0 {
		fmt.Fprintln(w, "no triangle-inequality violations: every direct path is the fastest")
		return nil
	}
	return table(w, "FROM\tTO\tVIA\tDIRECT ms\tBEST ms\tSAVING ms", func(tw io.Writer) {
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%.2f\n", t.From, t.To, strings.Join(t.Via, " "), t.DirectMs, t.BestMs, t.SavingMs)
		}
	})
}

func printFDB(w io.Writer, raw []byte) error {
	var es []api.FDBEntry
	if err := json.Unmarshal(raw, &es); err != nil {
		return err
	}
	return table(w, "NETWORK\tMAC\tSITE\tAGE s", func(tw io.Writer) {
		for _, e := range es {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%.1f\n", e.Network, e.MAC, e.Site, e.AgeSeconds)
		}
	})
}

func printWhy(w io.Writer, raw []byte) error {
	var y api.Why
	if err := json.Unmarshal(raw, &y); err != nil {
		return err
	}
	fmt.Fprintf(w, "to %s: %s\n%s\n\n", y.Dest, strings.Join(y.Chosen, " > "), y.Reason)
	err := table(w, "CANDIDATE\tLATENCY ms\tLOSS COST ms\tNOTE", func(tw io.Writer) {
		for _, c := range y.Candidates {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%s\n", strings.Join(c.Path, " > "), c.LatencyMs, c.LossCostMs, c.Note)
			for _, l := range c.Links {
				fmt.Fprintf(tw, "  %s > %s\t\t\tloss %s\n", l.From, l.To, lossText(l))
			}
		}
	})
	if err != nil {
		return err
	}
	return printBulk(w, y.Bulk)
}

// rateText shows a rate in Mbit/s with what it rests on, or a dash when
// it is unknown.
func rateText(mbps float64, kind string) string {
	if mbps <= 0 {
		return "-"
	}
	if kind == "" {
		return fmt.Sprintf("%.1f", mbps)
	}
	return fmt.Sprintf("%.1f (%s)", mbps, kind)
}

// printBulk prints why the bulk path to a destination is what it is.
func printBulk(w io.Writer, b *api.WhyBulk) error {
	if b == nil {
		return nil
	}
	chosen := "the latency path"
	if len(b.Chosen) > 0 {
		chosen = strings.Join(b.Chosen, " > ")
	}
	fmt.Fprintf(w, "\nbulk flows: %s\n%s\n(a bulk path may be up to %.2f ms longer than the latency path and must offer %.2g× its rate)\n\n",
		chosen, b.Reason, b.BoundMs, b.MinGain)
	return table(w, "BULK CANDIDATE\tRATE Mbit/s\tEXTRA ms\tNOTE", func(tw io.Writer) {
		for _, c := range b.Candidates {
			fmt.Fprintf(tw, "%s\t%s\t%+.2f\t%s\n", strings.Join(c.Path, " > "), rateText(c.RateMbps, ""), c.ExtraMs, c.Note)
			for _, l := range c.Links {
				fmt.Fprintf(tw, "  %s > %s\t%s\t\t\n", l.From, l.To, rateText(l.RateMbps, l.Kind))
			}
		}
	})
}

// lossText describes a link's loss: the rate, its 95 % interval and the
// probes it is over, and what it costs.
func lossText(l api.CandidateLink) string {
	if l.LossSamples == 0 {
		return "not measured yet"
	}
	s := fmt.Sprintf("%.2f %% [%.2f, %.2f] over %d probes", l.LossPct, l.LossLowPct, l.LossHighPct, l.LossSamples)
	if l.LossCostMs > 0 {
		s += fmt.Sprintf(", adds %.2f ms", l.LossCostMs)
	}
	return s
}

// printClasses prints the flow classes' counters of a status: what went
// on the fastest path and what on the bulk path (docs/bulk.md).
func printClasses(w io.Writer, c map[string]uint64) {
	if c["latency_frames"]+c["bulk_frames"]+c["flow_reordered"] == 0 {
		return
	}
	fmt.Fprintln(w)
	table(w, "CLASS\tFLOWS\tFRAMES\tBYTES", func(tw io.Writer) {
		fmt.Fprintf(tw, "latency\t%d\t%d\t%d\n", c["flows_latency"], c["latency_frames"], c["latency_bytes"])
		fmt.Fprintf(tw, "bulk\t%d\t%d\t%d\n", c["flows_bulk"], c["bulk_frames"], c["bulk_bytes"])
	})
	fmt.Fprintf(w, "class changes %d, flow path moves %d (held %d), bulk paths withdrawn %d, untracked frames %d; frames of a flow received out of order %d\n",
		c["class_changes"], c["flow_moves"], c["flow_holds"], c["flow_repaths"], c["flows_untracked"], c["flow_reordered"])
}
