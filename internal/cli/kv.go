package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/detour-overlay/detour/internal/api"
)

func init() {
	Register(Command{Name: "kv", Summary: "the key router's memcached pools: kv list|show|why|add-server|remove-server|drain|undrain", Run: runKV,
		Usage: strings.TrimPrefix(kvUsage, "usage:\n  detour ")})
}

const kvUsage = `usage:
  detour kv list [--json]
  detour kv show POOL [--json]
  detour kv why POOL KEY [--json]              (which replica a read of KEY goes to, and why)
  detour kv add-server POOL ADDR:PORT --site SITE [--weight W] [--json]
  detour kv remove-server POOL ADDR:PORT [--json]
  detour kv drain POOL ADDR:PORT [--json]      (its keys go to their failover)
  detour kv undrain POOL ADDR:PORT [--json]    (it gets exactly its keys back)
list and show read the agent's API (--api ADDR, --token-file F). The others
change the ring through the agent's unix socket (--socket PATH or
$DETOUR_SOCKET), as root or a member of group detour, at any one gateway:
the change gets the pool's next version and reaches every gateway over the
overlay's control plane, with no central server, usually within tens of
milliseconds (kv list at each shows the version and the site that made it).
add-server answers once the server's own site has learned its MAC and
confirmed it (until then it is "joining" and takes no keys); two changes
made at once at two sites converge on one of them everywhere (the higher
site ID's). Changes are stored in the state file before the answer.
Pace is how long a server's oldest request usually waits for its reply
(passive detection waits three times that); CHECK is the round trip of
the gateway's health checks (every 100 ms, this site's servers only).`

func runKV(args []string, stdout, stderr io.Writer) int {
	usage := func(format string, a ...any) int {
		return Fail(stderr, "kv", fmt.Errorf("%w: %s\n%s", ErrUsage, fmt.Sprintf(format, a...), kvUsage))
	}
	if len(args) == 0 {
		return Fail(stderr, "kv", fmt.Errorf("%w\n%s", ErrUsage, kvUsage))
	}
	sub, rest := args[0], args[1:]
	want := map[string]int{"list": 0, "show": 1, "why": 2, "add-server": 2, "remove-server": 2, "drain": 2, "undrain": 2}
	n, ok := want[sub]
	if !ok {
		return usage("unknown subcommand %q", sub)
	}
	fs, reader, asJSON := apiFlags("kv "+sub, stderr)
	changer := socketFlag(fs)
	site := fs.String("site", "", "add-server: the site whose network the server is on")
	weight := fs.Uint("weight", 1, "add-server: the server's share of keys, 1..1000")
	var pos []string
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			return 2
		}
		rest = fs.Args()
		if len(rest) > 0 {
			pos, rest = append(pos, rest[0]), rest[1:]
		}
	}
	if len(pos) != n {
		return usage("kv %s takes %d argument(s), not %d", sub, n, len(pos))
	}
	if sub == "add-server" && *site == "" {
		return usage("add-server needs --site, the site whose network the server is on")
	}
	if sub != "add-server" && (*site != "" || *weight != 1) {
		return usage("--site and --weight go with add-server only")
	}
	switch sub {
	case "list":
		r, err := reader()
		if err != nil {
			return Fail(stderr, "kv", err)
		}
		return show("kv", r, "/v1/kv/pools", *asJSON, printKVPools, stdout, stderr)
	case "show":
		r, err := reader()
		if err != nil {
			return Fail(stderr, "kv", err)
		}
		return show("kv", r, "/v1/kv/pools/"+api.PathEscape(pos[0]), *asJSON, printKVPool, stdout, stderr)
	case "why":
		r, err := reader()
		if err != nil {
			return Fail(stderr, "kv", err)
		}
		return show("kv", r, "/v1/kv/pools/"+api.PathEscape(pos[0])+"/why?key="+url.QueryEscape(pos[1]), *asJSON, printKVWhy, stdout, stderr)
	}
	c := changer()
	var raw json.RawMessage
	path := "/v1/kv/pools/" + api.PathEscape(pos[0]) + "/servers"
	var err error
	switch sub {
	case "add-server":
		err = c.Post(path, api.KVServerAdd{Address: pos[1], Site: *site, Weight: uint32(*weight)}, &raw)
	case "remove-server":
		err = c.Delete(path+"/"+api.PathEscape(pos[1]), &raw)
	case "drain":
		err = c.Post(path+"/"+api.PathEscape(pos[1])+"/drain", nil, &raw)
	case "undrain":
		err = c.Delete(path+"/"+api.PathEscape(pos[1])+"/drain", &raw)
	}
	if err != nil {
		return Fail(stderr, "kv", err)
	}
	if *asJSON {
		stdout.Write(raw)
		return 0
	}
	var p api.KVPool
	if err := json.Unmarshal(raw, &p); err != nil {
		return Fail(stderr, "kv", err)
	}
	fmt.Fprintf(stdout, "ok: kv %s %s %s: pool %s is at version %d, sent to every gateway\n", sub, pos[0], pos[1], p.Name, p.Version)
	return 0
}

func printKVPools(w io.Writer, raw []byte) error {
	var ps []api.KVPool
	if err := json.Unmarshal(raw, &ps); err != nil {
		return err
	}
	if len(ps) == 0 {
		fmt.Fprintln(w, "no kv pools at this gateway")
		return nil
	}
	return table(w, "POOL\tNETWORK\tADDRESS\tHASH\tVERSION\tSERVERS\tUP\tREQUESTS\tREPLIES\tERRORS\tFAILOVERS", func(tw io.Writer) {
		for _, p := range ps {
			up := 0
			for _, s := range p.Servers {
				if s.State == "up" {
					up++
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Name, p.Network, p.Address, p.Hash, p.Version, len(p.Servers), up,
				p.Counters["requests"], p.Counters["replies"], p.Counters["errors"], p.Counters["failed_over"])
		}
	})
}

func printKVPool(w io.Writer, raw []byte) error {
	var p api.KVPool
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	origin := ""
	if p.Origin != "" {
		origin = " (made at " + p.Origin + ")"
	}
	fmt.Fprintf(w, "pool %s on network %s at %s, hash %s, version %d%s\n", p.Name, p.Network, p.Address, p.Hash, p.Version, origin)
	if len(p.Shards) > 0 {
		hedge, near := "off", ""
		if p.Hedge {
			hedge = "on"
		}
		if len(p.NearSites) > 0 {
			near = ", near sites " + strings.Join(p.NearSites, " ")
		}
		fmt.Fprintf(w, "%d shards of replicas, policy %s, hedge %s%s\n", len(p.Shards), p.Policy, hedge, near)
	}
	fmt.Fprintln(w)
	err := table(w, "SERVER\tSITE\tWEIGHT\tSTATE\tSINCE\tREQUESTS\tREPLIES\tERRORS\tFAILOVERS\tPACE ms\tCHECK p50 ms\tCHECK p99 ms", func(tw io.Writer) {
		for _, s := range p.Servers {
			p50, p99 := "-", "-"
			if l := s.Latency; l != nil {
				p50, p99 = fmt.Sprintf("%.2f", l.P50Ms), fmt.Sprintf("%.2f", l.P99Ms)
			}
			site := s.Site
			if s.Local {
				site += " (here)"
			}
			if len(p.Shards) > 0 {
				site += fmt.Sprintf(" shard %d", s.Shard)
				if s.Tier != "" {
					site += " " + s.Tier
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.1fs\t%d\t%d\t%d\t%d\t%.2f\t%s\t%s\n", s.Address, site, s.Weight, s.State, s.SinceSeconds,
				s.Requests, s.Replies, s.Errors, s.Failovers, s.PaceMs, p50, p99)
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	names := make([]string, 0, len(p.Counters))
	for k := range p.Counters {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(w, "%s %d\n", k, p.Counters[k])
	}
	return nil
}

// printKVWhy shows each replica's predicted fetch time and its parts.
func printKVWhy(w io.Writer, raw []byte) error {
	var y api.KVWhy
	if err := json.Unmarshal(raw, &y); err != nil {
		return err
	}
	shard := fmt.Sprintf("shard %d", y.Shard)
	if y.ShardName != "" {
		shard += " (" + y.ShardName + ")"
	}
	if y.Shard != y.Owner {
		shard += fmt.Sprintf(", failover of shard %d, whose replicas are all down", y.Owner)
	}
	size := "the pool's typical reply"
	if y.SizeKnown {
		size = "last seen for this key"
	}
	fmt.Fprintf(w, "pool %s, key %q: %s, policy %s\nvalue size %d bytes (%s; class %s)\n", y.Pool, y.Key, shard, y.Policy, y.SizeBytes, size, y.SizeClass)
	if y.Chosen == "" {
		fmt.Fprintln(w, "no usable replica: reads are dropped")
	} else {
		fmt.Fprintf(w, "reads go to %s\n", y.Chosen)
	}
	fmt.Fprintf(w, "pool: %d reads chosen, %d also sent to refresh an estimate, %d hedged\n\n", y.Reads, y.Explored, y.Hedges)
	return table(w, "REPLICA\tSITE\tTIER\tPREDICTED ms\t= RTT\t+ SERVICE\t+ QUEUE\t+ TRANSFER\tMB/s\tOUTSTANDING\tSAMPLES\tNOTE", func(tw io.Writer) {
		for _, r := range y.Replicas {
			site := r.Site
			if r.Local {
				site += " (here)"
			}
			var notes []string
			if r.Chosen {
				notes = append(notes, "chosen")
			}
			if !r.Usable {
				notes = append(notes, "down")
			}
			switch {
			case r.ServiceFrom != "":
				notes = append(notes, "service time of class "+r.ServiceFrom)
			case r.Samples == 0:
				notes = append(notes, "service time not measured yet")
			default:
				notes = append(notes, fmt.Sprintf("service ±%.2f ms, last sample %.1f s ago", r.ServiceDevMs, r.SampleAgeSeconds))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%d\t%d\t%s\n", r.Address, site, r.Tier, r.PredictedMs,
				r.RTTMs, r.ServiceMs, r.QueueMs, r.TransferMs, r.ThroughputMBps, r.Outstanding, r.Samples, strings.Join(notes, ", "))
		}
	})
}
