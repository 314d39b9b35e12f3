package cli

import (
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/api"
	"github.com/detour-overlay/detour/internal/ca"
	"github.com/detour-overlay/detour/internal/keys"
)

func init() {
	Register(Command{Name: "ca", Summary: "the overlay CA: ca init|sign|revoke|show (membership by certificate)", Run: runCA,
		Usage: strings.TrimPrefix(caUsage, "usage:\n  detour ")})
	Register(Command{Name: "revoke", Summary: "give the local agent a revocation (from detour ca revoke) to apply and flood",
		Usage: "revoke FILE [--socket PATH]\n\nThe agent applies it at once and floods it to every member.", Run: runRevoke})
}

const caUsage = `usage:
  detour ca init --ca-key FILE                       (write a new CA private key, print its public key)
  detour ca sign --ca-key FILE --name SITE --key PUBKEY [--expires 8760h]   (print a certificate)
  detour ca revoke --ca-key FILE SITE                (print a revocation of SITE's certificates so far)
  detour ca show FILE                                (print a certificate or revocation)
Keep the CA key offline; sites need only its public key (trust.ca_public_key)
and their certificate (trust.certificate_file). See docs/membership.md.`

func runCA(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return Fail(stderr, "ca", fmt.Errorf("%w\n%s", ErrUsage, caUsage))
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("ca "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	keyFile := fs.String("ca-key", "", "the CA's private key file")
	name := fs.String("name", "", "the site's name")
	pub := fs.String("key", "", "the site's public key (detour pubkey)")
	expires := fs.Duration("expires", 365*24*time.Hour, "how long the certificate is valid")
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	var err error
	switch sub {
	case "init":
		err = caInit(*keyFile, stdout)
	case "sign":
		err = caSign(*keyFile, *name, *pub, *expires, stdout)
	case "revoke":
		if fs.NArg() != 1 {
			return Fail(stderr, "ca", fmt.Errorf("%w: ca revoke takes one site name", ErrUsage))
		}
		err = caRevoke(*keyFile, fs.Arg(0), stdout)
	case "show":
		if fs.NArg() != 1 {
			return Fail(stderr, "ca", fmt.Errorf("%w: ca show takes one file", ErrUsage))
		}
		err = caShow(fs.Arg(0), stdout)
	default:
		err = fmt.Errorf("%w: unknown subcommand %q\n%s", ErrUsage, sub, caUsage)
	}
	if err != nil {
		return Fail(stderr, "ca", err)
	}
	return 0
}

// caInit writes a new CA key to file (which must not exist) readable by
// its owner only, and prints the public key.
func caInit(file string, stdout io.Writer) error {
	if file == "" {
		return fmt.Errorf("%w: --ca-key FILE is required", ErrUsage)
	}
	priv, err := ca.Generate(nil)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(ca.Encode(priv.Seed())); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprint(stdout, ca.Encode(priv.Public().(ed25519.PublicKey)))
	return nil
}

func readCAKey(file string) (ed25519.PrivateKey, error) {
	if file == "" {
		return nil, fmt.Errorf("%w: --ca-key FILE is required", ErrUsage)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return ca.ParsePrivate(string(b))
}

func caSign(file, name, pub string, expires time.Duration, stdout io.Writer) error {
	priv, err := readCAKey(file)
	if err != nil {
		return err
	}
	k, err := keys.ParsePublic(pub)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	if expires <= 0 {
		return fmt.Errorf("%w: --expires must be positive", ErrUsage)
	}
	now := time.Now().Truncate(time.Second)
	b, err := ca.Sign(priv, &ca.Certificate{Name: name, Key: k, Issued: now, Expires: now.Add(expires)})
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, ca.Encode(b))
	return nil
}

func caRevoke(file, site string, stdout io.Writer) error {
	priv, err := readCAKey(file)
	if err != nil {
		return err
	}
	b, err := ca.SignRevocation(priv, &ca.Revocation{Name: site, At: time.Now()})
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, ca.Encode(b))
	return nil
}

func caShow(file string, stdout io.Writer) error {
	text, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	b, err := ca.Decode(string(text))
	if err != nil {
		return err
	}
	if c, err := ca.ParseCertificate(b); err == nil {
		fmt.Fprintf(stdout, "certificate\nsite:    %s\nkey:     %s\nissued:  %s\nexpires: %s\n", c.Name, c.Key, c.Issued.Format(time.RFC3339), c.Expires.Format(time.RFC3339))
		return nil
	}
	if r, err := ca.ParseRevocation(b); err == nil {
		fmt.Fprintf(stdout, "revocation\nsite:    %s\nof certificates issued until %s\n", r.Name, r.At.Format(time.RFC3339))
		return nil
	}
	return errors.New("neither a certificate nor a revocation")
}

func runRevoke(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("revoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	changer := socketFlag(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		return Fail(stderr, "revoke", fmt.Errorf("%w: usage: detour revoke FILE", ErrUsage))
	}
	text, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return Fail(stderr, "revoke", err)
	}
	var out map[string]string
	if err := changer().Post("/v1/revocations", api.Revocation{Revocation: strings.TrimSpace(string(text))}, &out); err != nil {
		return Fail(stderr, "revoke", err)
	}
	fmt.Fprintln(stdout, "revocation applied and flooded")
	return 0
}
