// Package nsnet reaches into named network namespaces (those of `ip netns`,
// under /run/netns) from a process that stays in its own: Dial opens a TCP
// socket inside a namespace, HTTPClient talks HTTP through such sockets and
// Command runs a program there.
//
// A socket belongs to the namespace of the thread that created it, for its
// whole life. Dial therefore creates it on a dedicated, locked OS thread that
// enters the namespace, connects, and returns to the original namespace
// before the thread is released; if the return fails the thread stays
// locked and Go discards it when the goroutine ends.
package nsnet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"time"

	"github.com/vishvananda/netns"
)

// Dialer returns a function with net.DialTimeout's signature that opens its
// connections inside the named namespace; an empty name dials from the
// current one.
func Dialer(ns string) func(network, address string, timeout time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		if ns == "" {
			return net.DialTimeout(network, address, timeout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return DialContext(ctx, ns, network, address)
	}
}

// DialContext connects to address from inside namespace ns.
func DialContext(ctx context.Context, ns, network, address string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := dialIn(ctx, ns, network, address)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// dialIn runs on its own goroutine, which it locks to its thread for the
// time spent inside ns.
func dialIn(ctx context.Context, ns, network, address string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("nsnet: current namespace: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(ns)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("nsnet: namespace %s: %w", ns, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("nsnet: enter %s: %w", ns, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if netns.Set(orig) == nil {
		// Back home: the thread may serve other goroutines again.
		runtime.UnlockOSThread()
	}
	return c, err
}

// HTTPClient returns an HTTP client whose connections are opened inside
// namespace ns (e.g. to reach an agent's API on 127.0.0.1 there).
func HTTPClient(ns string, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return DialContext(ctx, ns, network, addr)
		},
		DisableKeepAlives: true,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// Command returns a command that runs argv inside namespace ns through
// `ip netns exec`, which enters the namespace and then executes argv in
// its own process: the command's PID is the program's.
func Command(ns string, argv ...string) *exec.Cmd {
	if ns == "" {
		return exec.Command(argv[0], argv[1:]...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
}

// Listen opens a listening socket on address inside namespace ns, from a
// dedicated locked thread as Dial does; its accepted connections belong
// to ns too.
func Listen(ns, network, address string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("nsnet: current namespace: %w", err)}
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(ns)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("nsnet: namespace %s: %w", ns, err)}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("nsnet: enter %s: %w", ns, err)}
			return
		}
		l, err := net.Listen(network, address)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{l, err}
	}()
	r := <-ch
	return r.l, r.err
}
