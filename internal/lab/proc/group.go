package proc

import (
	"os/exec"
	"slices"
	"time"
)

// Runner builds the command for one server of a group from its name and
// argument vector, e.g. to run it in a network namespace; nil runs the
// vector as it is.
type Runner func(name string, argv []string) *exec.Cmd

// Group is the child processes of one experiment's servers (a ZooKeeper
// ensemble, an etcd cluster), started with their output in log files and
// stopped together by PID.
type Group struct {
	children []*Child
}

// Start starts argv as the server name, through run when it is not nil,
// with its output in logPath.
func (g *Group) Start(name string, argv []string, run Runner, logPath string) error {
	var cmd *exec.Cmd
	if run != nil {
		cmd = run(name, argv)
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	c, err := StartChild(name, cmd, logPath)
	if err != nil {
		return err
	}
	g.children = append(g.children, c)
	return nil
}

// PIDs returns the process IDs of the servers started.
func (g *Group) PIDs() []int {
	out := make([]int, 0, len(g.children))
	for _, c := range g.children {
		out = append(out, c.PID())
	}
	return out
}

// Children returns the servers started, in order.
func (g *Group) Children() []*Child { return g.children }

// Stop ends every server by PID (SIGTERM, then SIGKILL after grace) and
// forgets them.
func (g *Group) Stop(grace time.Duration) {
	StopAll(g.children, grace)
	g.children = nil
}

// StopOne ends the server name by PID, as Stop does, and forgets it; it
// reports whether the group had it.
func (g *Group) StopOne(name string, grace time.Duration) bool {
	i := slices.IndexFunc(g.children, func(c *Child) bool { return c.Name == name })
	if i < 0 {
		return false
	}
	StopAll(g.children[i:i+1], grace)
	g.children = slices.Delete(g.children, i, i+1)
	return true
}
