package testbed

import (
	"context"
	"net"
)

// DialIn connects to addr from inside network namespace ns (none: this
// one). The socket is made in ns and stays there, whatever thread later
// uses it.
func DialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNamespace(ns, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}
