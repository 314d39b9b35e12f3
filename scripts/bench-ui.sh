#!/usr/bin/env bash
# bench-ui.sh measures what open map pages cost a real agent: on a testbed
# (azure-16 by default) it counts the CPU time of one site's agent over
# windows with no page open and with PAGES pages' event streams open
# (curl inside the gateway's namespace), alternating A B A B, and prints the
# share of a core one page costs.
#
#   usage: scripts/bench-ui.sh [SCENARIO] [PAGES] [SECONDS]   (default azure-16 10 20)
#
# Needs root and make build. Tears the testbed down even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scen=${1:-azure-16}
pages=${2:-10}
secs=${3:-20}
lab=${DETOUR_LAB_BIN:-$PWD/bin/detour-lab}
state=$(mktemp -d /tmp/detour-bench-ui.XXXXXX)
export DETOUR_TESTBED_STATE=$state DETOUR_TESTBED_PREFIX=dtb-
curls=()
cleanup() {
	for p in "${curls[@]}"; do kill "$p" 2>/dev/null || true; done
	"$lab" testbed down >/dev/null 2>&1 || true
	rm -rf "$state"
}
trap cleanup EXIT

"$lab" testbed up "$scen" --overlay detour >/dev/null
read -r site gw pid < <(python3 -c '
import json, sys
st = json.load(open(sys.argv[1] + "/state.json"))
s = st["sites"][0]
agent = [p for p in st["procs"] if p["name"].startswith("agent-")][0]
print(s["name"], s["gateway"], agent["pid"])' "$state")
sleep 10 # let the overlay settle

# ticks prints the agent's CPU time in clock ticks (user + system).
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)

window() { # window N: CPU seconds of the agent over $secs with N pages open
	local n=$1 i
	curls=()
	for ((i = 0; i < n; i++)); do
		ip netns exec "$gw" curl -sN -o /dev/null http://127.0.0.1:7447/v1/events &
		curls+=($!)
	done
	sleep 1
	local t0 t1
	t0=$(ticks)
	sleep "$secs"
	t1=$(ticks)
	for p in "${curls[@]}"; do kill "$p" 2>/dev/null || true; done
	wait "${curls[@]}" 2>/dev/null || true
	curls=()
	awk -v a="$t0" -v b="$t1" -v hz="$hz" 'BEGIN { printf "%.3f\n", (b - a) / hz }'
}

echo "agent of $site on $scen: CPU seconds over ${secs} s windows, alternating 0 and $pages open pages"
declare -a idle open
for round in 1 2; do
	idle+=("$(window 0)")
	open+=("$(window "$pages")")
	echo "round $round: no page ${idle[-1]} s, $pages pages ${open[-1]} s"
done
python3 - "$secs" "$pages" "${idle[@]}" "${open[@]}" <<'PY'
import sys
secs, pages = float(sys.argv[1]), int(sys.argv[2])
v = [float(x) for x in sys.argv[3:]]
idle, open_ = v[:len(v)//2], v[len(v)//2:]
i, o = sum(idle) / len(idle), sum(open_) / len(open_)
print(f"agent without pages: {100*i/secs:.2f} % of a core; with {pages}: {100*o/secs:.2f} %")
print(f"one open page: {100*(o-i)/secs/pages:.3f} % of a core")
PY
