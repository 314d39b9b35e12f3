// Package cli implements detour's subcommands. Each subcommand lives in its
// own file and adds itself to the registry with Register from an init
// function, so that independent parts of the program do not edit one table.
package cli

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Command is one subcommand of the detour binary.
type Command struct {
	// Name is the word that selects the command, e.g. "agent".
	Name string
	// Summary is a one-line description shown by "detour help".
	Summary string
	// Usage is the command's synopsis after "detour", with a paragraph on
	// what it does when the summary is not enough; "detour NAME --help"
	// prints it, the summary and the options.
	Usage string
	// Run executes the command with the arguments that follow its name.
	// It returns the process exit code.
	Run func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]Command{}

// Register adds c to the set of subcommands. It panics on a duplicate name,
// which is a programming error.
func Register(c Command) {
	if _, dup := commands[c.Name]; dup {
		panic("cli: duplicate command " + c.Name)
	}
	commands[c.Name] = c
}

// ErrUsage marks an error caused by the command line itself; commands that
// return it exit with status 2.
var ErrUsage = errors.New("usage")

// Main runs the subcommand named by args[0] and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || len(args) == 1 && isHelp(args[0]) {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "help" && len(args) == 2 {
		args = []string{args[1], "--help"}
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "detour: unknown command %q (see 'detour help')\n", args[0])
		return 2
	}
	if len(args) == 2 && isHelp(args[1]) {
		help(stdout, c)
		return 0
	}
	return c.Run(args[1:], stdout, stderr)
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// help prints a command's synopsis, summary and options. The options are
// what the command's flag set prints for -h: the command runs with -h and
// its output discarded, its flag set's listing kept.
func help(w io.Writer, c Command) {
	usage := c.Usage
	if usage == "" {
		usage = c.Name
	}
	fmt.Fprintf(w, "detour %s: %s\n\nusage: detour %s\n", c.Name, c.Summary, usage)
	var flags strings.Builder
	c.Run([]string{"-h"}, io.Discard, &flags)
	if rest, ok := strings.CutPrefix(flags.String(), "Usage of "); ok {
		if _, opts, ok := strings.Cut(rest, "\n"); ok && strings.TrimSpace(opts) != "" {
			fmt.Fprintf(w, "\noptions:\n%s", opts)
		}
	}
}

func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: detour COMMAND [ARGS]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-12s %s\n", n, commands[n].Summary)
	}
	b.WriteString("\nRun 'detour COMMAND -h' for a command's options.\n")
	io.WriteString(w, b.String())
}

// Fail prints err to stderr prefixed with the command name and returns the
// exit code that matches it: 2 for usage errors, 1 otherwise.
func Fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "detour %s: %v\n", cmd, err)
	if errors.Is(err, ErrUsage) {
		return 2
	}
	return 1
}
