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
func (s *Set) Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		s.usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := s.commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q (see '%s help')\n", s.Prog, args[0], s.Prog)
		return 2
	}
	return c.Run(args[1:], stdout, stderr)
}

func (s *Set) usage(w io.Writer) {
	names := make([]string, 0, len(s.commands))
	for n := range s.commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s COMMAND [ARGS]\n\ncommands:\n", s.Prog)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-12s %s\n", n, s.commands[n].Summary)
	}
	fmt.Fprintf(&b, "\nRun '%s COMMAND -h' for a command's options.\n", s.Prog)
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
