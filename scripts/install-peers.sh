#!/usr/bin/env bash
# install-peers.sh installs the overlays that the benchmarks compare detour
# with, and nothing else needs: `detour-lab testbed up --overlay wireguard`
# and `--overlay easytier`. scripts/bench-peers.sh (run by `make bench`)
# calls it; `make test` and `make demo` never do. It is idempotent: each
# piece is built only when the pinned version is not already installed.
#
#   wg             Debian's wireguard-tools, configures WireGuard.
#   wireguard-go   WireGuard in user space on a TUN device, the Go module
#                  golang.zx2c4.com/wireguard at WG_GO_VERSION (it has no
#                  tagged releases: a pseudo-version), built with `go install`
#                  into $PEERS_DIR/peers/bin. This machine's kernel has no
#                  WireGuard module, so this is the WireGuard a user runs here.
#   easytier-core  EasyTier from crates.io at EASYTIER_VERSION, the newest
#                  release published there (later ones are on GitHub only),
#                  built with `cargo install --locked` into
#                  $PEERS_DIR/easytier. Its build needs protoc and the
#                  well-known .proto files (Debian's protobuf-compiler and
#                  libprotobuf-dev) and a Rust toolchain of at least 1.77
#                  (rustup's; Debian 12's cargo is 1.65). The build takes a
#                  long time on a small machine and runs at nice 19.
#
#   usage: scripts/install-peers.sh      (as root)
set -euo pipefail
cd "$(dirname "$0")/.."

PEERS_DIR=${DETOUR_PEERS_DIR:-/opt/detour}
WG_GO_MODULE=golang.zx2c4.com/wireguard
WG_GO_VERSION=v0.0.0-20260522210424-ecfc5a8d5446
EASYTIER_VERSION=2.0.3

if [ "$(id -u)" != 0 ]; then
	echo "install-peers.sh: must run as root (it installs Debian packages and into $PEERS_DIR)" >&2
	exit 1
fi

# install_packages installs the Debian packages that are missing.
install_packages() {
	local missing=() p
	for p in wireguard-tools protobuf-compiler libprotobuf-dev; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
			missing+=("$p")
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return
	echo "install-peers.sh: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# install_wireguard_go builds wireguard-go at the pinned version; the stamp
# file beside it records which.
install_wireguard_go() {
	local bin=$PEERS_DIR/peers/bin stamp
	stamp=$bin/wireguard-go.version
	if [ -x "$bin/wireguard-go" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$WG_GO_MODULE@$WG_GO_VERSION" ]; then
		echo "install-peers.sh: wireguard-go $WG_GO_VERSION present"
		return
	fi
	local gobin
	gobin=$(mktemp -d)
	echo "install-peers.sh: building $WG_GO_MODULE@$WG_GO_VERSION"
	PATH=/usr/local/go/bin:$PATH GOBIN=$gobin nice -n 19 go install "$WG_GO_MODULE@$WG_GO_VERSION"
	mkdir -p "$bin"
	# The module's command is its root package, so go install names it
	# after the module's last element.
	mv "$gobin/wireguard" "$bin/wireguard-go"
	rmdir "$gobin"
	echo "$WG_GO_MODULE@$WG_GO_VERSION" >"$stamp"
}

# install_easytier builds easytier-core and easytier-cli at the pinned
# version from crates.io.
install_easytier() {
	local root=$PEERS_DIR/easytier
	if "$root/bin/easytier-core" --version 2>/dev/null | grep -q "$EASYTIER_VERSION"; then
		echo "install-peers.sh: easytier-core $EASYTIER_VERSION present"
		return
	fi
	local cargo
	cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
	if [ ! -x "$cargo" ] || ! rustc_ok "$(dirname "$cargo")/rustc"; then
		echo "install-peers.sh: EasyTier $EASYTIER_VERSION needs Rust 1.77 or later (cargo and rustc on the PATH, e.g. from rustup); not installed" >&2
		exit 1
	fi
	echo "install-peers.sh: building easytier $EASYTIER_VERSION from crates.io into $root (slow)"
	nice -n 19 "$cargo" install easytier --version "$EASYTIER_VERSION" --locked --root "$root"
}

# rustc_ok reports whether the rustc $1 is at least 1.77.
rustc_ok() {
	local v
	v=$("$1" --version 2>/dev/null | awk '{print $2}') || return 1
	[ -n "$v" ] && [ "$(printf '%s\n%s\n' 1.77.0 "$v" | sort -V | head -1)" = 1.77.0 ]
}

install_packages
install_wireguard_go
install_easytier
