#!/usr/bin/env bash
# demo.sh is what `make demo` runs after installing the dependencies and
# building: the headline experiment. Geo-replicated ZooKeeper (leader at
# CLU, followers at BOR and LAN) on the emulated four-site European WAN of
# the LANMAN 2017 paper, with a client at LAN, over kernel VXLAN (direct
# paths), tinc and detour: (a) idle, (b) TCP cross traffic filling
# CLU<->LAN, (c) the same load with detour free to reroute through NEU. It
# prints a summary first (median latency per overlay, phase, operation and
# server; detour's reroute times; the largest latency around the switch;
# the files written), then the long table (median and p95 per phase,
# operation, server and overlay, with the latency model's prediction) with
# its columns explained, and writes samples, plots and versions to
# results/demo. About 10 minutes; DEMO_SHORT=1 runs the 3-minute version
# (vxlan and detour only).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "demo.sh: must run as root (the testbed uses network namespaces)" >&2
	exit 1
fi

out=results/demo
args=(experiment lanman2017 --out "$out")
if [ "${DEMO_SHORT:-0}" = 1 ]; then
	args+=(--short)
fi
rm -rf "$out"
exec bin/detour-lab "${args[@]}"
