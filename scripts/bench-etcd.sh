#!/usr/bin/env bash
# bench-etcd.sh runs the lanman2017 experiment with etcd 3.4 (Debian
# etcd-server; --heartbeat-interval=150 --election-timeout=1500, leader
# moved to CLU) in place of ZooKeeper: puts and serializable reads from a
# client at LAN through each member, phases (a) idle, (b) CLU<->LAN loaded,
# (c) loaded with detour free to reroute, over vxlan, tinc and detour. It
# prints the summary table and leaves results in results/bench-etcd.
# About 10 minutes. Needs root; the experiment cleans up after itself.
#
#   usage: scripts/bench-etcd.sh [--short] [other experiment flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DETOUR_BIN:-$PWD/bin/detour}
lab=${DETOUR_LAB_BIN:-$(dirname "$bin")/detour-lab}
[ -x "$bin" ] || go build -o "$bin" ./cmd/detour
[ -x "$lab" ] || go build -o "$lab" ./cmd/detour-lab
export DETOUR_BIN=$bin DETOUR_LAB_BIN=$lab
exec "$lab" experiment lanman2017 --store etcd --out results/bench-etcd "$@"
