package testbed

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The wireguard overlay is the encrypted Layer 2 an engineer would build
// by hand: WireGuard as a full mesh among the gateways, kernel VXLAN over
// the WireGuard addresses, and the VXLAN device bridged to br0 like the
// other Layer 2 overlays. This machine's kernel has no WireGuard module,
// so WireGuard is wireguard-go in user space on a TUN device, configured
// with wg (wireguard-tools) through its UAPI socket.
//
// Per site i (0-based) the gateway has:
//
//	wan0      198.18.0.(i+1)/16   the underlay
//	WG        198.19.254.(i+1)/24 wireguard-go's TUN, UDP port 51820 on wan0
//	vx0       VXLAN id 42 over WG, head-end replication to every peer
//	br0       vx0 and the hosts' veths
//
// WG is named after the testbed's prefix and the site's index, because
// wireguard-go's UAPI socket, /var/run/wireguard/WG.sock, lives in the
// file system that every namespace shares.

// wgPort is WireGuard's UDP port on the underlay.
const wgPort = 51820

// wgOverhead is what WireGuard adds to each packet on an IPv4 underlay:
// outer IPv4 (20), UDP (8), WireGuard's header and tag (32).
const wgOverhead = 60

// wgDir is where the keys are kept, in the state directory.
func wgDir(dir string) string { return filepath.Join(dir, "wireguard") }

// wgName is site i's WireGuard interface name, at most 15 bytes.
func wgName(prefix string, i int) string {
	return fmt.Sprintf("%swg%d", strings.TrimSuffix(prefix, "-"), i)
}

// wgSocket is the UAPI socket of wireguard-go's interface name.
func wgSocket(name string) string { return "/var/run/wireguard/" + name + ".sock" }

// wgAddr is site i's address inside the WireGuard mesh.
func wgAddr(i int) string { return fmt.Sprintf("198.19.254.%d", i+1) }

// startWireGuard starts one wireguard-go per gateway, configures the
// mesh with wg, then lays kernel VXLAN over it.
func startWireGuard(ctx context.Context, st *State, o Options) error {
	if err := os.MkdirAll(wgDir(o.StateDir), 0o700); err != nil {
		return err
	}
	privs, pubs, err := wgKeys(len(st.Sites))
	if err != nil {
		return err
	}
	for i, site := range st.Sites {
		name := wgName(st.Prefix, i)
		// -f keeps it in the foreground, so the recorded PID is the one
		// that holds the TUN device.
		p, err := startDetached(o.StateDir, "wg-"+tincName(site.Name), "ip", "netns", "exec", site.Gateway,
			o.peers["wireguard-go"], "-f", name)
		if err != nil {
			return err
		}
		st.Procs = append(st.Procs, p)
		if err := st.Save(o.StateDir); err != nil {
			return err
		}
		err = waitFor(ctx, 10*time.Second, p, o.StateDir, func() bool {
			_, err := os.Stat(wgSocket(name))
			return err == nil
		})
		if err != nil {
			return err
		}
		if err := configureWireGuard(st, o, i, privs[i], pubs); err != nil {
			return err
		}
	}
	return startVXLANOver(st, func(i int) (string, string) { return wgName(st.Prefix, i), wgAddr(i) })
}

// wgKeys makes a Curve25519 key pair per site, base64 as wg takes them.
func wgKeys(n int) (privs, pubs []string, err error) {
	for range n {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		privs = append(privs, base64.StdEncoding.EncodeToString(k.Bytes()))
		pubs = append(pubs, base64.StdEncoding.EncodeToString(k.PublicKey().Bytes()))
	}
	return privs, pubs, nil
}

// configureWireGuard gives site i's interface its key, port, address and
// every other site as a peer at its underlay address.
func configureWireGuard(st *State, o Options, i int, priv string, pubs []string) error {
	site := st.Sites[i]
	name := wgName(st.Prefix, i)
	keyFile := filepath.Join(wgDir(o.StateDir), tincName(site.Name)+".key")
	if err := os.WriteFile(keyFile, []byte(priv+"\n"), 0o600); err != nil {
		return err
	}
	args := []string{"netns", "exec", site.Gateway, o.peers["wg"], "set", name,
		"private-key", keyFile, "listen-port", fmt.Sprint(wgPort)}
	for j, peer := range st.Sites {
		if j == i {
			continue
		}
		args = append(args, "peer", pubs[j], "endpoint", fmt.Sprintf("%s:%d", peer.Underlay, wgPort),
			"allowed-ips", wgAddr(j)+"/32")
	}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("wg set %s in %s: %v: %s", name, site.Gateway, err, out)
	}
	return ipBatch(site.Gateway, []string{
		fmt.Sprintf("addr add %s/24 dev %s", wgAddr(i), name),
		fmt.Sprintf("link set %s mtu %d up", name, st.UnderlayMTU-wgOverhead),
	})
}

// startVXLANOver builds the same full mesh of kernel VXLAN as startVXLAN,
// over the device and addresses that over returns for site i.
func startVXLANOver(st *State, over func(i int) (dev, addr string)) error {
	for i, site := range st.Sites {
		dev, local := over(i)
		lines := []string{
			fmt.Sprintf("link add vx0 type vxlan id 42 local %s dstport 4789 dev %s", local, dev),
			fmt.Sprintf("link set vx0 mtu %d master br0 up", st.HostMTU),
		}
		if err := ipBatch(site.Gateway, lines); err != nil {
			return err
		}
		for j := range st.Sites {
			if i == j {
				continue
			}
			_, dst := over(j)
			out, err := exec.Command("bridge", "-n", site.Gateway, "fdb", "append",
				"00:00:00:00:00:00", "dev", "vx0", "dst", dst).CombinedOutput()
			if err != nil {
				return fmt.Errorf("bridge fdb append in %s: %v: %s", site.Gateway, err, out)
			}
		}
	}
	return nil
}

// removeWireGuardSockets removes the UAPI sockets that a killed
// wireguard-go left behind.
func removeWireGuardSockets(st *State) error {
	var first error
	for i := range st.Sites {
		if err := removeSocket(wgSocket(wgName(st.Prefix, i))); err != nil && first == nil {
			first = err
		}
	}
	return first
}
