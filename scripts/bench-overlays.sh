#!/usr/bin/env bash
# bench-overlays.sh compares the data planes side by side on the testbed:
# raw underlay, kernel VXLAN, tinc, detour (encrypted) and detour-plain,
# directly and through one relay, on a kernel underlay (and once over the
# WAN emulator for reference). It writes a Markdown table, the raw samples
# and a plot to results/bench/DATE/ and prints the table. See
# scripts/bench_overlays.py for the figures; extra arguments go to it
# (e.g. --runs 5 --secs 5, --overlays tinc,detour, --no-emulator).
# Needs root; tears everything down, by PID, even on failure.
#
#   usage: scripts/bench-overlays.sh [ARGS]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DETOUR_BIN:-$PWD/bin/detour}
lab=${DETOUR_LAB_BIN:-$(dirname "$bin")/detour-lab}
[ -x "$bin" ] || go build -o "$bin" ./cmd/detour
[ -x "$lab" ] || go build -o "$lab" ./cmd/detour-lab
export DETOUR_BIN=$bin DETOUR_LAB_BIN=$lab
py=python3
# matplotlib comes from the Python environment scripts/install-deps.sh makes
# in /opt/detour/python, or from Debian's python3-matplotlib.
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
if ! $py -c 'import matplotlib' 2>/dev/null && [ -x /opt/detour/python/bin/python3 ]; then
	py=/opt/detour/python/bin/python3
fi
exec "$py" scripts/bench_overlays.py --bin "$bin" --lab "$lab" "$@"
