package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/detour-overlay/detour/internal/keys"
)

// stdin is the reader `detour pubkey` reads; tests replace it.
var stdin io.Reader = os.Stdin

func init() {
	Register(Command{
		Name:    "genkey",
		Summary: "print a new private key (base64) for a site's private_key_file",
		Usage: "genkey > FILE\n\n" +
			"Write the key to a file readable by root only (umask 077 first) and name it\n" +
			"in the site's private_key_file; give its public key (detour pubkey < FILE)\n" +
			"to the other sites, for their peers' public_key.",
		Run: runGenkey,
	})
	Register(Command{
		Name:    "pubkey",
		Summary: "read a private key on stdin and print its public key",
		Usage:   "pubkey < FILE",
		Run:     runPubkey,
	})
}

func runGenkey(args []string, stdout, stderr io.Writer) int {
	if len(args) != 0 {
		return Fail(stderr, "genkey", fmt.Errorf("%w: detour genkey takes no arguments", ErrUsage))
	}
	k, err := keys.Generate(nil)
	if err != nil {
		return Fail(stderr, "genkey", err)
	}
	fmt.Fprintln(stdout, k.String())
	return 0
}

func runPubkey(args []string, stdout, stderr io.Writer) int {
	if len(args) != 0 {
		return Fail(stderr, "pubkey", fmt.Errorf("%w: usage: detour genkey | detour pubkey", ErrUsage))
	}
	b, err := io.ReadAll(io.LimitReader(stdin, 4096))
	if err != nil {
		return Fail(stderr, "pubkey", err)
	}
	k, err := keys.ParsePrivate(string(b))
	if err != nil {
		return Fail(stderr, "pubkey", fmt.Errorf("private key on stdin: %w", err))
	}
	fmt.Fprintln(stdout, k.Public().String())
	return 0
}
