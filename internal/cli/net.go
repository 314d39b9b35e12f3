package cli

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/detour-overlay/detour/internal/api"
)

func init() {
	Register(Command{Name: "net", Summary: "virtual networks at run time: net list|create|attach|detach|limit|egress", Run: runNet,
		Usage: strings.TrimPrefix(netUsage, "usage:\n  detour ")})
}

const netUsage = `usage:
  detour net list [--json]
  detour net create NAME [--tap T] [--bridge B] [--mtu N] [--queue-len N] [--max-rate R] [--min-rate R] [--subnet P]   (new network, random id)
  detour net attach NAME --id ID [--tap T] [--bridge B] [--mtu N] [--queue-len N] [--max-rate R] [--min-rate R] [--subnet P]
  detour net detach NAME
  detour net limit NAME [--max-rate R] [--min-rate R]    (empty rate: no limit)
  detour net egress RATE                                  (the site's total egress, 0 for none)
list reads the agent's API (--api ADDR, --token-file F); the others change the
overlay through the agent's unix socket (--socket PATH or $DETOUR_SOCKET;
default /run/detour/detour.sock, or /run/detour/netns/NS.sock in network
namespace NS), as root or a member of group detour. Rates are in bits per
second with a unit: 20mbit, 1.5gbit, 800kbit (mbps also means megabits).
--subnet gives the network's IPv4 subnet (10.20.0.0/16): a key-value pool
whose network id is this network's is routed on it (docs/kv.md).`

func runNet(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return Fail(stderr, "net", fmt.Errorf("%w\n%s", ErrUsage, netUsage))
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "list", "create", "attach", "detach", "limit", "egress":
	default:
		return Fail(stderr, "net", fmt.Errorf("%w: unknown subcommand %q\n%s", ErrUsage, sub, netUsage))
	}
	fs, reader, asJSON := apiFlags("net "+sub, stderr)
	changer := socketFlag(fs)
	id := fs.Uint("id", 0, "the network's identifier, the same on every site")
	tap := fs.String("tap", "", "the TAP device's name (default: dt- and the name)")
	bridge := fs.String("bridge", "", "a bridge to attach the TAP device to")
	mtu := fs.Int("mtu", 0, "the TAP device's MTU (default 1400)")
	queueLen := fs.Int("queue-len", 0, "frames the TAP device queues for the agent (default: the kernel's)")
	maxRate := fs.String("max-rate", "", "egress ceiling of the network at this site")
	minRate := fs.String("min-rate", "", "egress guaranteed to the network at this site")
	subnet := fs.String("subnet", "", "the network's IPv4 subnet, for the key-value pools that serve it")
	name, err := parseNamed(fs, rest, sub)
	if err != nil {
		return Fail(stderr, "net", err)
	}
	if sub == "list" {
		r, err := reader()
		if err != nil {
			return Fail(stderr, "net", err)
		}
		return show("net", r, "/v1/networks", *asJSON, printNetworks, stdout, stderr)
	}
	c := changer()
	switch sub {
	case "create", "attach":
		n := api.Network{Name: name, ID: uint32(*id), TAP: *tap, Bridge: *bridge, MTU: *mtu, QueueLen: *queueLen, MaxRate: *maxRate, MinRate: *minRate, Subnet: *subnet}
		if sub == "create" {
			if *id != 0 {
				return Fail(stderr, "net", fmt.Errorf("%w: create picks a new id; use attach --id to join an existing network", ErrUsage))
			}
			n.ID = newNetworkID()
		} else if *id == 0 || *id > 0xffffffff {
			return Fail(stderr, "net", fmt.Errorf("%w: attach needs --id, a non-zero 32-bit identifier", ErrUsage))
		}
		if n.TAP == "" {
			n.TAP = defaultTAP(name)
		}
		var got api.Network
		if err := c.Post("/v1/networks", n, &got); err != nil {
			return Fail(stderr, "net", err)
		}
		fmt.Fprintf(stdout, "attached network %s (id %d) on %s; attach it at other sites with: detour net attach %s --id %d\n", got.Name, got.ID, got.TAP, got.Name, got.ID)
	case "detach":
		err = c.Delete("/v1/networks/"+api.PathEscape(name), nil)
	case "limit":
		err = c.Put("/v1/networks/"+api.PathEscape(name)+"/limits", api.Limits{MaxRate: *maxRate, MinRate: *minRate}, nil)
	case "egress":
		err = c.Put("/v1/egress", api.Egress{Rate: name}, nil)
	}
	if err != nil {
		return Fail(stderr, "net", err)
	}
	if sub != "create" && sub != "attach" {
		fmt.Fprintf(stdout, "ok: net %s %s\n", sub, name)
	}
	return 0
}

// parseNamed parses the flags around a subcommand's single positional
// argument (none for list).
func parseNamed(fs *flag.FlagSet, args []string, sub string) (string, error) {
	var name string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("%w: unexpected argument %q\n%s", ErrUsage, fs.Arg(0), netUsage)
	}
	if (name == "") != (sub == "list") {
		return "", fmt.Errorf("%w: net %s takes %s\n%s", ErrUsage, sub, map[bool]string{true: "no name", false: "one name"}[sub == "list"], netUsage)
	}
	return name, nil
}

// defaultTAP derives a TAP name from a network name, within the 15
// characters Linux allows.
func defaultTAP(name string) string {
	t := "dt-" + name
	if len(t) > 15 {
		t = t[:15]
	}
	return t
}

func newNetworkID() uint32 {
	var b [4]byte
	for {
		rand.Read(b[:])
		if id := binary.BigEndian.Uint32(b[:]); id > 1 {
			return id
		}
	}
}

func printNetworks(w io.Writer, raw []byte) error {
	var ns []api.Network
	if err := json.Unmarshal(raw, &ns); err != nil {
		return err
	}
	return table(w, "NETWORK\tID\tTAP\tBRIDGE\tMTU\tMAX RATE\tMIN RATE", func(tw io.Writer) {
		for _, n := range ns {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", n.Name, n.ID, n.TAP, n.Bridge, n.MTU, dash(n.MaxRate), dash(n.MinRate))
		}
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
