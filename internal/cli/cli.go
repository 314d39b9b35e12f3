// Package cli implements the subcommands of detour, the gateway's binary:
// the agent and the operator's commands. Each subcommand lives in its own
// file and adds itself to the registry with Register from an init
// function, so that independent parts of the program do not edit one
// table. The registry is package command's, which the lab's binary,
// detour-lab, uses too (package labcli) without linking any of these.
package cli

import (
	"io"

	"github.com/detour-overlay/detour/internal/cli/command"
)

// Command is one subcommand of the detour binary.
type Command = command.Command

// ErrUsage marks an error caused by the command line itself; commands that
// return it exit with status 2.
var ErrUsage = command.ErrUsage

// gateway is the set of the detour binary.
var gateway = command.NewSet("detour")

// Register adds c to the commands of the detour binary.
func Register(c Command) { gateway.Register(c) }

// Main runs the detour binary's subcommand named by args[0] and returns
// the exit code.
func Main(args []string, stdout, stderr io.Writer) int { return gateway.Main(args, stdout, stderr) }

// Fail reports a failed command of the detour binary (see command.Set.Fail).
func Fail(stderr io.Writer, cmd string, err error) int { return gateway.Fail(stderr, cmd, err) }
