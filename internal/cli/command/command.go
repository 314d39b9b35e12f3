// Package command is the registry of subcommands both of detour's
// binaries use: a Set of named commands with its help text, the exit
// codes of failures, and the version command. It imports nothing of
// either binary, so that detour-lab does not link the gateway's commands
// nor detour the lab's.
package command

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
	"strings"
)

// Command is one subcommand of a binary.
type Command struct {
	// Name is the word that selects the command, e.g. "agent".
	Name string
	// Summary is a one-line description shown by "PROG help".
	Summary string
	// Usage is the command's synopsis after the binary's name, with a
	// paragraph on what it does when the summary is not enough; "PROG NAME
	// --help" prints it, the summary and the options.
	Usage string
	// Run executes the command with the arguments that follow its name.
	// It returns the process exit code.
	Run func(args []string, stdout, stderr io.Writer) int
}

// Set is the subcommands of one binary.
type Set struct {
	// Prog is the binary's name, used in usage and error messages.
	Prog     string
	commands map[string]Command
}

// NewSet returns an empty set of subcommands for the binary prog.
func NewSet(prog string) *Set {
	return &Set{Prog: prog, commands: map[string]Command{}}
}

// Register adds c to the set. It panics on a duplicate name, which is a
// programming error.
func (s *Set) Register(c Command) {
	if _, dup := s.commands[c.Name]; dup {
		panic("command: duplicate command " + c.Name)
	}
	s.commands[c.Name] = c
}

// ErrUsage marks an error caused by the command line itself; commands that
// return it exit with status 2.
var ErrUsage = errors.New("usage")

// Main runs the subcommand named by args[0] and returns the exit code.
// "PROG help NAME", "PROG NAME --help" and "PROG NAME -h" print the
// command's help and exit 0.
func (s *Set) Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || len(args) == 1 && IsHelp(args[0]) {
		s.usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "help" && len(args) == 2 {
		args = []string{args[1], "--help"}
	}
	c, ok := s.commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q (see '%s help')\n", s.Prog, args[0], s.Prog)
		return 2
	}
	if len(args) == 2 && IsHelp(args[1]) {
		s.help(stdout, c)
		return 0
	}
	return c.Run(args[1:], stdout, stderr)
}

// Names returns the names of the commands, sorted.
func (s *Set) Names() []string {
	names := make([]string, 0, len(s.commands))
	for n := range s.commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the command called name.
func (s *Set) Lookup(name string) (Command, bool) {
	c, ok := s.commands[name]
	return c, ok
}

// IsHelp reports whether arg asks for help.
func IsHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// help prints a command's summary, synopsis and options. The options are
// what the command's flag set prints for -h: the command runs with -h and
// its output discarded, its flag set's listing kept.
func (s *Set) help(w io.Writer, c Command) {
	usage := c.Usage
	if usage == "" {
		usage = c.Name
	}
	fmt.Fprintf(w, "%s %s: %s\n\nusage: %s %s\n", s.Prog, c.Name, c.Summary, s.Prog, usage)
	var flags strings.Builder
	c.Run([]string{"-h"}, io.Discard, &flags)
	if rest, ok := strings.CutPrefix(flags.String(), "Usage of "); ok {
		if _, opts, ok := strings.Cut(rest, "\n"); ok && strings.TrimSpace(opts) != "" {
			fmt.Fprintf(w, "\noptions:\n%s", opts)
		}
	}
}

func (s *Set) usage(w io.Writer) {
	names := s.Names()
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s COMMAND [ARGS]\n\ncommands:\n", s.Prog)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-12s %s\n", n, s.commands[n].Summary)
	}
	fmt.Fprintf(&b, "\nRun '%s COMMAND --help' for what a command does and its options.\n", s.Prog)
	io.WriteString(w, b.String())
}

// Fail prints err to stderr prefixed with the binary's and the command's
// names and returns the exit code that matches it: 2 for usage errors, 1
// otherwise.
func (s *Set) Fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "%s %s: %v\n", s.Prog, cmd, err)
	if errors.Is(err, ErrUsage) {
		return 2
	}
	return 1
}

// Version is set at build time with -ldflags "-X ...command.Version=...".
var Version = "dev"

// VersionCommand is the version command of the binary prog: it prints
// Version and the Go toolchain that built the binary.
func VersionCommand(prog string) Command {
	return Command{
		Name:    "version",
		Summary: "print the version of " + prog + " and of the Go toolchain that built it",
		Run: func(args []string, stdout, stderr io.Writer) int {
			goVersion := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			fmt.Fprintf(stdout, "%s %s (%s)\n", prog, Version, goVersion)
			return 0
		},
	}
}
