package nsnet

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestDialInsideNamespace makes a namespace with only loopback up, listens
// on 127.0.0.1 inside it (through Command) and checks that Dial reaches
// that listener and not one in the test's own namespace.
func TestDialInsideNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command")
	}
	ns := fmt.Sprintf("detour-nsnet-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a namespace: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := Command(ns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v %s", err, out)
	}
	// Nothing listens on this port in the test's namespace: a connection
	// can only succeed inside ns.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("something already listens on %s", addr)
	}
	srv := Command(ns, "python3", "-c", fmt.Sprintf(
		"import socket,time\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('127.0.0.1',%d))\ns.listen(1)\nc,_=s.accept()\nc.sendall(b'inside')\ntime.sleep(1)\n", port))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	dial := Dialer(ns)
	var c net.Conn
	for i := 0; i < 50; i++ {
		if c, err = dial("tcp", addr, time.Second); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("dial inside %s: %v", ns, err)
	}
	defer c.Close()
	buf := make([]byte, 6)
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(buf); err != nil || string(buf) != "inside" {
		t.Fatalf("read %q, %v; want \"inside\"", buf, err)
	}
	// The dialing thread went back: a plain dial from here still fails.
	if c2, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c2.Close()
		t.Fatal("a plain dial reached the namespace's listener: the thread did not return")
	}
}
