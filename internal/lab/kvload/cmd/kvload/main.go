// Command kvload runs the lab's memcached load generator (package kvload)
// once and prints its result as JSON. The benchmark scripts run it inside
// the testbed's host namespaces (ip netns exec NS kvload ...).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/lab/kvload"
)

func main() {
	var c kvload.Config
	var servers, proto string
	flag.StringVar(&c.Target, "target", "", "host:port requests go to")
	flag.StringVar(&servers, "servers", "", "comma-separated host:port list hashed by the client (ketama; binary-udp only), instead of -target")
	flag.StringVar(&proto, "protocol", "binary-udp", "binary-udp, ascii-tcp or meta-tcp")
	flag.IntVar(&c.Outstanding, "outstanding", 16, "requests in flight")
	flag.IntVar(&c.Connections, "connections", 1, "TCP connections or UDP sockets")
	flag.Float64Var(&c.GetRatio, "get-ratio", 0.5, "share of gets")
	flag.IntVar(&c.Keys, "keys", 10000, "key space")
	flag.IntVar(&c.ValueSize, "value-size", 32, "value size in bytes")
	flag.DurationVar(&c.Duration, "duration", 5*time.Second, "how long to send")
	flag.DurationVar(&c.Timeout, "timeout", time.Second, "UDP request timeout")
	flag.BoolVar(&c.Prefill, "prefill", true, "set every key before the run")
	flag.Uint64Var(&c.Seed, "seed", 1, "seed of the key and operation sequence")
	flag.Parse()
	c.Protocol = kvload.Protocol(proto)
	if servers != "" {
		c.Servers = strings.Split(servers, ",")
	}
	res, err := kvload.Run(context.Background(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvload:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(res)
}
