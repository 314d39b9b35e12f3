#!/usr/bin/env bash
# bench-peers.sh measures detour side by side with what users would pick
# instead, on identical emulated links: no overlay, kernel VXLAN, tinc 1.0,
# VXLAN over WireGuard (wireguard-go) and EasyTier (--latency-first). It
# first installs the peers (scripts/install-peers.sh: slow the first time,
# EasyTier is built from crates.io), then runs scripts/bench_peers.py, which
# writes docs/peers/peers.md (one table, with every overlay's version),
# peers.json and peers.png. `make bench` runs it through scripts/bench.sh;
# `make test` never does. Extra arguments go to bench_peers.py (e.g.
# --overlays detour,easytier --steps leon,azure --trials 10). Needs root;
# tears everything down, by PID, even on failure.
#
#   usage: scripts/bench-peers.sh [ARGS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
bash scripts/install-peers.sh
bin=${DETOUR_BIN:-$PWD/bin/detour}
lab=${DETOUR_LAB_BIN:-$(dirname "$bin")/detour-lab}
[ -x "$bin" ] || go build -o "$bin" ./cmd/detour
[ -x "$lab" ] || go build -o "$lab" ./cmd/detour-lab
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
if ! $py -c 'import matplotlib' 2>/dev/null && [ -x /opt/detour/python/bin/python3 ]; then
	py=/opt/detour/python/bin/python3
fi
exec "$py" scripts/bench_peers.py --bin "$bin" --lab "$lab" "$@"
