#!/usr/bin/env bash
# install-deps.sh installs what `make demo`, `make test` and `make bench` use
# on Debian 12: the Debian packages below (without their recommendations) and
# a Go toolchain new enough for go.mod. It is idempotent: apt-get runs only
# when a package is missing, and Go is fetched only when neither the PATH's
# go nor /usr/local/go/bin/go is new enough.
#
# Go: Debian 12's golang-go is 1.19, too old for go.mod and too old to fetch
# a newer toolchain itself (GOTOOLCHAIN needs 1.21). The Go toolchain is a
# module on the Go module proxy (golang.org/toolchain), so the script
# downloads that module's zip with curl, checks its SHA-256 against the one
# pinned below and unpacks it to /usr/local/go. The Makefile puts
# /usr/local/go/bin first on the PATH of its recipes.
#
# Plots: matplotlib comes from PyPI (versions pinned in
# scripts/plot-requirements.txt) into a Python environment in
# /opt/detour/python, unless the system Python already has it. Debian's
# python3-matplotlib would bring SciPy, Boost's headers and OpenBLAS, which
# nothing here uses.
#
# Services: the Debian packages of memcached, etcd, tinc and nutcracker
# enable and start system services; the testbed runs its own instances and
# needs none of them, so their units are disabled and stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "install-deps.sh: must run as root (it installs Debian packages)" >&2
	exit 1
fi

packages=(
	iproute2       # ip, bridge: namespaces, veth, bridges, VXLAN
	nftables       # firewall rules in the testbed
	iputils-ping   # ping between sites
	iputils-arping # gratuitous ARP after a host migrates in the testbed
	iperf3         # throughput and cross traffic
	tinc           # the classic mesh VPN baseline (1.0, switch mode)
	tcpdump        # captures on the underlay
	netcat-openbsd # ZooKeeper four-letter words
	# ZooKeeper's jars and a Java runtime without GUI libraries. The Debian
	# package zookeeper would add only its scripts and example configuration
	# but depends on default-jre, which brings GTK and X11.
	libzookeeper-java
	default-jre-headless
	etcd-server    # geo-replicated etcd experiment (bench)
	etcd-client
	memcached      # key-value routing
	nutcracker     # twemproxy baseline
	# libmemcached's own placement, compared with internal/kv/ring's by a
	# small C program the ring's agreement test compiles.
	libmemcached-dev
	libmemcached-tools
	gcc
	python3-venv   # a Python environment for matplotlib (see install_plotting)
	procps         # ps, pgrep for diagnostics
	chromium       # the map page's test in a real browser (headless)
	curl           # the Go toolchain download
	ca-certificates
	unzip
)

# GO_VERSION is the toolchain installed when none new enough is found, and
# GO_SHA256 the SHA-256 of its module zip on the Go module proxy, per
# architecture (dpkg's names).
GO_VERSION=1.26.8
declare -A GO_SHA256=(
	[amd64]=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
)
GO_PROXY=https://proxy.golang.org
GO_ROOT=/usr/local/go

# PLOT_VENV is the Python environment with matplotlib; the plotting scripts
# run themselves again with its Python when the system's has no matplotlib.
PLOT_VENV=/opt/detour/python

# tmp is fetch_go's download directory, removed on exit.
tmp=
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT

# install_packages installs the Debian packages that are missing.
install_packages() {
	local missing=() p
	for p in "${packages[@]}"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
			missing+=("$p")
		fi
	done
	if [ ${#missing[@]} -eq 0 ]; then
		echo "install-deps.sh: all Debian packages present"
		return
	fi
	echo "install-deps.sh: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# disable_services disables the Debian units the testbed does not want,
# whether they run or not, and stops them when systemd runs. systemctl
# disables a unit without systemd running too (a chroot, a container booted
# without it); where there is no systemctl at all, the packages' own helpers
# remove the links that would start the services at the next boot.
disable_services() {
	local unit now=()
	[ -d /run/systemd/system ] && now=(--now)
	for unit in memcached etcd tinc zookeeper nutcracker; do
		if [ ! -e "/lib/systemd/system/$unit.service" ] && [ ! -e "/etc/init.d/$unit" ]; then
			continue
		fi
		if command -v systemctl >/dev/null 2>&1; then
			if systemctl is-enabled --quiet "$unit" 2>/dev/null ||
				{ [ ${#now[@]} -gt 0 ] && systemctl is-active --quiet "$unit" 2>/dev/null; }; then
				echo "install-deps.sh: disabling ${now[*]:+and stopping }$unit.service"
				systemctl disable "${now[@]}" --quiet "$unit" 2>/dev/null || true
			fi
			continue
		fi
		if [ ! -e "/etc/systemd/system/multi-user.target.wants/$unit.service" ] &&
			! compgen -G "/etc/rc[2-5].d/S*$unit" >/dev/null; then
			continue
		fi
		if [ -e "/lib/systemd/system/$unit.service" ] && command -v deb-systemd-helper >/dev/null 2>&1; then
			deb-systemd-helper disable "$unit.service" >/dev/null 2>&1 || true
		fi
		if [ -e "/etc/init.d/$unit" ] && command -v update-rc.d >/dev/null 2>&1; then
			update-rc.d "$unit" disable >/dev/null 2>&1 || true
		fi
		echo "install-deps.sh: disabled $unit (no systemctl)"
	done
}

# required_go prints the Go version go.mod's go line asks for.
required_go() {
	local v
	v=$(awk '$1 == "go" { print $2; exit }' go.mod)
	if [ -z "$v" ]; then
		echo "install-deps.sh: no go line in go.mod" >&2
		exit 1
	fi
	echo "$v"
}

# go_version prints the version of the go command $1 (1.26.8), or nothing
# when it does not run. GOTOOLCHAIN=local and running outside the module keep
# a go of 1.21 or later from fetching another toolchain to answer.
go_version() {
	local v
	v=$(cd / && GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null) || return 0
	echo "${v#go}"
}

# version_at_least reports whether version $1 is $2 or later.
version_at_least() {
	[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]
}

# go_ok reports whether the go command $1 exists and is new enough for $2.
go_ok() {
	local v
	[ -x "$1" ] || return 1
	v=$(go_version "$1")
	[ -n "$v" ] && version_at_least "$v" "$2"
}

# install_go makes sure the go the Makefile uses (/usr/local/go/bin/go first,
# then the PATH's) is at least go.mod's version, installing GO_VERSION into
# /usr/local/go when it is not.
install_go() {
	local want path
	want=$(required_go)
	if go_ok "$GO_ROOT/bin/go" "$want"; then
		echo "install-deps.sh: Go $(go_version "$GO_ROOT/bin/go") in $GO_ROOT"
		return
	fi
	if [ ! -e "$GO_ROOT/bin/go" ] && path=$(command -v go) && go_ok "$path" "$want"; then
		echo "install-deps.sh: Go $(go_version "$path") at $path"
		return
	fi
	if ! version_at_least "$GO_VERSION" "$want"; then
		echo "install-deps.sh: go.mod needs Go $want but this script installs $GO_VERSION; raise GO_VERSION and GO_SHA256" >&2
		exit 1
	fi
	fetch_go
}

# fetch_go downloads the module golang.org/toolchain for GO_VERSION from the
# Go module proxy, checks it and unpacks it to /usr/local/go, replacing an
# older Go there.
fetch_go() {
	local arch sum mod
	arch=$(dpkg --print-architecture)
	sum=${GO_SHA256[$arch]:-}
	if [ -z "$sum" ]; then
		echo "install-deps.sh: no pinned Go $GO_VERSION checksum for $arch; install Go $GO_VERSION by hand into $GO_ROOT" >&2
		exit 1
	fi
	mod="v0.0.1-go$GO_VERSION.linux-$arch"
	tmp=$(mktemp -d)
	echo "install-deps.sh: fetching Go $GO_VERSION (golang.org/toolchain@$mod) from $GO_PROXY"
	curl -fsSL --retry 3 -o "$tmp/go.zip" "$GO_PROXY/golang.org/toolchain/@v/$mod.zip"
	if ! echo "$sum  $tmp/go.zip" | sha256sum -c --quiet -; then
		echo "install-deps.sh: the Go $GO_VERSION zip does not have the pinned SHA-256; not installed" >&2
		exit 1
	fi
	unzip -q "$tmp/go.zip" -d "$tmp/x"
	local root="$tmp/x/golang.org/toolchain@$mod"
	# Module zips keep no file modes; the go command marks the same files
	# executable when it installs a toolchain this way.
	chmod -R a+rX "$root"
	chmod a+x "$root"/bin/* "$root"/pkg/tool/*/*
	if [ -e "$GO_ROOT" ]; then
		echo "install-deps.sh: replacing $GO_ROOT (Go $(go_version "$GO_ROOT/bin/go"))"
		rm -rf "$GO_ROOT"
	fi
	mkdir -p "$(dirname "$GO_ROOT")"
	mv "$root" "$GO_ROOT"
	echo "install-deps.sh: installed Go $(go_version "$GO_ROOT/bin/go") in $GO_ROOT"
}

# install_plotting makes matplotlib importable for the plotting scripts:
# the system Python's if it has it, else the environment in PLOT_VENV,
# created with the pinned versions from PyPI.
install_plotting() {
	if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
		echo "install-deps.sh: matplotlib present in /usr/bin/python3"
		return
	fi
	if "$PLOT_VENV/bin/python3" -c 'import matplotlib' 2>/dev/null; then
		echo "install-deps.sh: matplotlib present in $PLOT_VENV"
		return
	fi
	echo "install-deps.sh: installing matplotlib from PyPI into $PLOT_VENV (scripts/plot-requirements.txt)"
	rm -rf "$PLOT_VENV"
	mkdir -p "$(dirname "$PLOT_VENV")"
	/usr/bin/python3 -m venv "$PLOT_VENV"
	"$PLOT_VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir --only-binary=:all: \
		-r scripts/plot-requirements.txt
}

install_packages
disable_services
install_go
install_plotting
