// Package zoo deploys a real Apache ZooKeeper ensemble (the Debian
// package's jars, each server started with plain java) and measures
// synchronous reads and writes of znodes against it with the Go client
// github.com/go-zookeeper/zk.
//
// The package knows nothing about the testbed: every server runs through a
// store.Runner (which may place it in a network namespace) and every
// connection goes through a store.Dialer (which may open its socket in
// one); package proc starts and stops the servers. The loopback
// tests run three servers on 127.0.0.1, 127.0.0.2 and 127.0.0.3.
package zoo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/detour-overlay/detour/internal/lab/experiment/store"
	"github.com/detour-overlay/detour/internal/lab/proc"
)

// Default locations of the Debian package's files.
const (
	DefaultJar = "/usr/share/java/zookeeper.jar"
	// ClientPort is the port every server listens on for clients.
	ClientPort = 2181
	// QuorumPort and ElectionPort carry the servers' own traffic.
	QuorumPort   = 2888
	ElectionPort = 3888
)

// Ensemble is a set of servers sharing one configuration.
type Ensemble struct {
	Servers []store.Server
	// Dir holds one sub-directory per server (config, data, logs).
	Dir string
	// Run starts a server process; nil runs it directly.
	Run store.Runner
	// Dial reaches a server's client port for four-letter words; nil dials
	// from the current namespace.
	Dial store.Dialer
	// Jar defaults to the Debian package's (libzookeeper-java).
	Jar string
	// ConfDir is the directory on the class path holding log4j.properties;
	// empty means each server's own directory, where Start writes one that
	// sends the log to LogFile. The Debian package zookeeper has one in
	// /etc/zookeeper/conf, but it depends on a full JRE with GTK, so the
	// testbed installs only libzookeeper-java and a headless JRE.
	ConfDir string
	// TickTime is ZooKeeper's tick; zero means 2 s (its default).
	TickTime time.Duration

	// Reelections counts the wrong leaders WaitQuorum restarted.
	Reelections int

	procs proc.Group
}

// Leader returns the server with the highest ID, the one ZooKeeper elects.
func (e *Ensemble) Leader() store.Server {
	var l store.Server
	for _, s := range e.Servers {
		if s.ID > l.ID {
			l = s
		}
	}
	return l
}

// Config returns the zoo.cfg of server s.
func (e *Ensemble) Config(s store.Server) string {
	tick := e.TickTime
	if tick == 0 {
		tick = 2 * time.Second
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=%d\ninitLimit=10\nsyncLimit=5\n", tick.Milliseconds())
	fmt.Fprintf(&b, "dataDir=%s\n", e.dataDir(s))
	fmt.Fprintf(&b, "clientPort=%d\nclientPortAddress=%s\n", ClientPort, s.Addr)
	b.WriteString("admin.enableServer=false\n")
	b.WriteString("4lw.commands.whitelist=srvr,stat,mntr,conf,ruok\n")
	// Followers must not wait for the election port of a peer that is not
	// up yet any longer than needed.
	b.WriteString("cnxTimeout=2000\n")
	for _, o := range e.Servers {
		fmt.Fprintf(&b, "server.%d=%s:%d:%d\n", o.ID, o.Addr, QuorumPort, ElectionPort)
	}
	return b.String()
}

func (e *Ensemble) serverDir(s store.Server) string { return filepath.Join(e.Dir, s.Name) }
func (e *Ensemble) dataDir(s store.Server) string   { return filepath.Join(e.serverDir(s), "data") }

// LogFile is the path of server s's ZooKeeper log.
func (e *Ensemble) LogFile(s store.Server) string {
	return filepath.Join(e.serverDir(s), "zookeeper.log")
}

// log4jConfig is the log4j 1.2 configuration each server reads from its
// class path: the root logger is the system property zookeeper.root.logger
// (INFO to ROLLINGFILE on the command line argv builds), and ROLLINGFILE is
// zookeeper.log in the directory named by the property zookeeper.log.dir.
const log4jConfig = `log4j.rootLogger=${zookeeper.root.logger}
log4j.appender.ROLLINGFILE=org.apache.log4j.RollingFileAppender
log4j.appender.ROLLINGFILE.File=${zookeeper.log.dir}/zookeeper.log
log4j.appender.ROLLINGFILE.MaxFileSize=10MB
log4j.appender.ROLLINGFILE.layout=org.apache.log4j.PatternLayout
log4j.appender.ROLLINGFILE.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n
`

// write lays out server s's directory: data/myid, log4j.properties and
// zoo.cfg.
func (e *Ensemble) write(s store.Server) (string, error) {
	if err := os.MkdirAll(e.dataDir(s), 0o755); err != nil {
		return "", err
	}
	myid := filepath.Join(e.dataDir(s), "myid")
	if err := os.WriteFile(myid, []byte(strconv.Itoa(s.ID)+"\n"), 0o644); err != nil {
		return "", err
	}
	log4j := filepath.Join(e.serverDir(s), "log4j.properties")
	if err := os.WriteFile(log4j, []byte(log4jConfig), 0o644); err != nil {
		return "", err
	}
	cfg := filepath.Join(e.serverDir(s), "zoo.cfg")
	return cfg, os.WriteFile(cfg, []byte(e.Config(s)), 0o644)
}

// argv is the java command line of server s, as the field notes give it.
func (e *Ensemble) argv(s store.Server, cfg string) []string {
	jar, conf := e.Jar, e.ConfDir
	if jar == "" {
		jar = DefaultJar
	}
	if conf == "" {
		conf = e.serverDir(s)
	}
	cp := strings.Join([]string{conf, jar, "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"}, ":")
	return []string{"java", "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dzookeeper.log.dir=" + e.serverDir(s), "-Dzookeeper.root.logger=INFO,ROLLINGFILE",
		"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg}
}

// Start writes every server's configuration and starts all servers. On
// error the servers already started are stopped.
func (e *Ensemble) Start() error {
	if len(e.Servers) == 0 {
		return errors.New("zoo: no servers")
	}
	for _, s := range e.Servers {
		if err := e.startOne(s); err != nil {
			e.Stop()
			return fmt.Errorf("zoo: start %s: %w", s.Name, err)
		}
	}
	return nil
}

func (e *Ensemble) startOne(s store.Server) error {
	cfg, err := e.write(s)
	if err != nil {
		return err
	}
	return e.procs.Start(s.Name, e.argv(s, cfg), e.Run, filepath.Join(e.serverDir(s), "stdout.log"))
}

// PIDs returns the process IDs of the running servers.
func (e *Ensemble) PIDs() []int { return e.procs.PIDs() }

// Stop kills every server this ensemble started, by PID, and waits for it.
func (e *Ensemble) Stop() { e.procs.Stop(3 * time.Second) }

// WaitQuorum waits until every server answers srvr, exactly one says
// "Mode: leader" and it is the intended leader (the highest ID). It returns
// the mode of each server by name.
//
// ZooKeeper elects the highest ID among the servers it hears from first:
// when two servers start sooner than the intended leader (a JVM slower to
// start on a busy machine), they form a quorum without it. A quorum led
// by another server is therefore broken up, up to maxReelections times,
// by restarting that server: the others, the intended leader among them,
// elect again, and it wins.
func (e *Ensemble) WaitQuorum(ctx context.Context) (map[string]string, error) {
	var last error
	for {
		modes, err := e.Modes()
		if err == nil {
			err = e.checkModes(modes)
			if err == nil {
				return modes, nil
			}
			if s, ok := e.wrongLeader(modes); ok && e.Reelections < maxReelections {
				e.Reelections++
				e.procs.StopOne(s.Name, 3*time.Second)
				if err := e.startOne(s); err != nil {
					return nil, fmt.Errorf("zoo: restart %s: %w", s.Name, err)
				}
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("zoo: no quorum: %w (last: %v)", ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
		if err := e.exited(); err != nil {
			return nil, err
		}
	}
}

// exited reports a server process that has already died.
func (e *Ensemble) exited() error {
	for _, p := range e.procs.Children() {
		if done, how := p.Exited(); done {
			return fmt.Errorf("zoo: server %s exited (%v); see %s", p.Name, how, filepath.Join(e.Dir, p.Name))
		}
	}
	return nil
}

// maxReelections bounds the wrong leaders WaitQuorum restarts.
const maxReelections = 3

// wrongLeader returns the server leading a complete quorum that is not
// the intended leader's.
func (e *Ensemble) wrongLeader(modes map[string]string) (store.Server, bool) {
	var leaders []store.Server
	for _, s := range e.Servers {
		switch modes[s.Name] {
		case "leader":
			leaders = append(leaders, s)
		case "follower":
		default:
			return store.Server{}, false
		}
	}
	if len(leaders) != 1 || leaders[0].Name == e.Leader().Name {
		return store.Server{}, false
	}
	return leaders[0], true
}

func (e *Ensemble) checkModes(modes map[string]string) error {
	leader := e.Leader().Name
	for _, s := range e.Servers {
		want := "follower"
		if s.Name == leader {
			want = "leader"
		}
		if modes[s.Name] != want {
			return fmt.Errorf("zoo: %s is %q, want %s", s.Name, modes[s.Name], want)
		}
	}
	return nil
}

// Modes asks every server for srvr and returns its Mode line.
func (e *Ensemble) Modes() (map[string]string, error) {
	m := map[string]string{}
	for _, s := range e.Servers {
		out, err := FourLetter(e.Dial, s.Addr, "srvr")
		if err != nil {
			return nil, err
		}
		m[s.Name] = ParseMode(out)
	}
	return m, nil
}

// FourLetter sends a four-letter word to the server at addr and returns
// its whole answer.
func FourLetter(dial store.Dialer, addr, word string) (string, error) {
	if dial == nil {
		dial = net.DialTimeout
	}
	c, err := dial("tcp", net.JoinHostPort(addr, strconv.Itoa(ClientPort)), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(word)); err != nil {
		return "", err
	}
	var b strings.Builder
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			break
		}
	}
	return b.String(), nil
}

// ParseMode extracts the value of the "Mode:" line of srvr's answer, e.g.
// "leader", "follower" or "standalone"; "" if there is none (a server not
// yet in a quorum answers "This ZooKeeper instance is not currently
// serving requests").
func ParseMode(srvr string) string {
	for _, line := range strings.Split(srvr, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// ParseVersion returns the ZooKeeper version a server reports in srvr, e.g.
// "3.8.0-…".
func ParseVersion(srvr string) string {
	for _, line := range strings.Split(srvr, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Zookeeper version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
