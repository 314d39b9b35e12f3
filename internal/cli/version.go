package cli

import "github.com/detour-overlay/detour/internal/cli/command"

// Version is the version of the build: command.Version, which the
// Makefile sets with -ldflags "-X ...command.Version=...".
var Version = command.Version

func init() { Register(command.VersionCommand("detour")) }
