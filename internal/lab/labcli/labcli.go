// Package labcli implements the subcommands of detour-lab, the lab's
// binary: the testbed (with its WAN emulator and flood tool) and the
// experiments. The gateway's binary, detour, links none of it; the lab
// runs detour as a separate program for each site's agent, found by
// testbed.FindDetour.
package labcli

import (
	"io"

	"github.com/detour-overlay/detour/internal/cli/command"
)

// prog is the name of the lab's binary.
const prog = "detour-lab"

// lab is the set of detour-lab's subcommands.
var lab = command.NewSet(prog)

func init() { lab.Register(command.VersionCommand(prog)) }

// Main runs the detour-lab subcommand named by args[0] and returns the
// exit code.
func Main(args []string, stdout, stderr io.Writer) int { return lab.Main(args, stdout, stderr) }

// fail reports a failed detour-lab command (see command.Set.Fail).
func fail(stderr io.Writer, cmd string, err error) int { return lab.Fail(stderr, cmd, err) }

// errUsage marks an error in the command line (exit status 2).
var errUsage = command.ErrUsage
