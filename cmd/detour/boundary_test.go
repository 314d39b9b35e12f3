package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// labPackage reports whether an import path belongs to the lab: anything
// under internal/lab, a package named like one of the lab's (wherever it
// moves), or the ZooKeeper client.
func labPackage(path string) bool {
	if strings.HasPrefix(path, "github.com/go-zookeeper/") {
		return true
	}
	const module = "github.com/detour-overlay/detour/"
	rest, ours := strings.CutPrefix(path, module)
	if !ours {
		return false
	}
	for _, seg := range strings.Split(rest, "/") {
		switch seg {
		case "lab", "labcli", "testbed", "wanem", "scenario", "experiment":
			return true
		}
	}
	return false
}

// deps lists the packages pkg links, as go list -deps prints them.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gobin, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestDaemonLinksNothingOfTheLab: the gateway's binary links no package
// of the lab (testbed, emulator, scenarios, experiments, their CLI) and
// not the ZooKeeper client, so that a gateway carries none of it. The lab
// binary is the control: the same check finds the lab in it.
func TestDaemonLinksNothingOfTheLab(t *testing.T) {
	const self = "github.com/detour-overlay/detour/cmd/detour"
	list := deps(t, self)
	var found []string
	agent := false
	for _, p := range list {
		if labPackage(p) {
			found = append(found, p)
		}
		agent = agent || p == "github.com/detour-overlay/detour/internal/agent"
	}
	if len(found) > 0 {
		t.Errorf("detour links the lab's packages %v; they belong to detour-lab only", found)
	}
	if !agent {
		t.Errorf("go list -deps %s does not list internal/agent: the list %v is not the daemon's", self, list)
	}
	lab := 0
	for _, p := range deps(t, "github.com/detour-overlay/detour/cmd/detour-lab") {
		if labPackage(p) {
			lab++
		}
	}
	if lab < 5 {
		t.Errorf("the check finds %d lab packages in detour-lab; it no longer recognises the lab", lab)
	}
}

// labPackage tells the lab's packages from the daemon's.
func TestLabPackage(t *testing.T) {
	for path, want := range map[string]bool{
		"github.com/detour-overlay/detour/internal/lab/testbed":           true,
		"github.com/detour-overlay/detour/internal/lab/experiment/zoo":    true,
		"github.com/detour-overlay/detour/internal/testbed":               true,
		"github.com/detour-overlay/detour/internal/experiment/etcd":       true,
		"github.com/go-zookeeper/zk":                                      true,
		"github.com/detour-overlay/detour/internal/agent":                 false,
		"github.com/detour-overlay/detour/internal/cli":                   false,
		"github.com/detour-overlay/detour/internal/routing":               false,
		"golang.org/x/sys/unix":                                           false,
		"github.com/other/detour/internal/lab/testbed":                    false,
		"github.com/detour-overlay/detour/internal/datapath/scenarioless": false,
	} {
		if got := labPackage(path); got != want {
			t.Errorf("labPackage(%s) = %v, want %v", path, got, want)
		}
	}
}
