#!/usr/bin/env bash
# install-deps.sh installs the Debian packages detour's testbed, tests,
# experiments and benchmarks use. It is idempotent: packages that are already
# installed are not touched, and apt-get runs only when something is missing.
set -euo pipefail

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
	zookeeper      # geo-replicated ZooKeeper experiment
	etcd-server    # geo-replicated etcd experiment (bench)
	etcd-client
	memcached      # key-value routing
	nutcracker     # twemproxy baseline
	python3-matplotlib # plots of experiment results
	procps         # ps, pgrep for diagnostics
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps.sh: all packages present"
	exit 0
fi

echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"

# The Debian packages of memcached, etcd and tinc may start system services;
# the testbed runs its own instances and needs none of them.
for svc in memcached etcd tinc zookeeper nutcracker; do
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
		systemctl stop "$svc" || true
		systemctl disable "$svc" >/dev/null 2>&1 || true
	fi
done
