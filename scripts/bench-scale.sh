#!/usr/bin/env bash
# bench-scale.sh measures the control traffic of whole overlays in the
# simulator (detour-lab sim, docs/scaling.md): 100 sites of the Azure-based
# topology for one simulated minute under the new scheme, with the events
# (slowed links, a killed relay), then, with SCALE_SWEEP=1, the sweep of
# the plot: 10, 16, 54, 100, 200 and 300 sites under the new scheme and up
# to SCALE_OLD_MAX (default 100) sites under the old one, one simulated
# minute each. Reports go to results/scale-TIME/ as JSON, with the plot
# scaling.png (scripts/plot_scale.py).
#
#   usage: scripts/bench-scale.sh        (SCALE_SWEEP=1 for the sweep)
#
# No root, no network: the simulator runs in one process. It is long, and
# its cost grows as N³ (N sites, each with an N² route computation and N²
# link-state entries; time and memory per size in docs/scaling.md, "The
# simulator at 300 sites"): 300 sites for 10 simulated minutes take hours
# and 15 GB, so make bench runs 100 sites for one minute, and
# SCALE_SITES and SCALE_MINUTES change the main run (SCALE_SITES=300
# SCALE_MINUTES=10 for the issue's size). GOMEMLIMIT defaults to three
# quarters of the machine's memory, so that the collector works harder
# rather than the kernel killing a large run.
set -euo pipefail
cd "$(dirname "$0")/.."
lab=${DETOUR_LAB_BIN:-$PWD/bin/detour-lab}
[ -x "$lab" ] || go build -o "$lab" ./cmd/detour-lab
out=results/scale-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
topo=${SCALE_TOPOLOGY:-azure}
if [ -z "${GOMEMLIMIT:-}" ]; then
	kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
	export GOMEMLIMIT=$((kb * 3 / 4 / 1024))MiB
fi

run() { # run SCHEME SITES MINUTES
	echo "== $topo, $2 sites, scheme $1, $3 simulated minutes"
	nice "$lab" sim --sites "$2" --minutes "$3" --topology "$topo" --scheme "$1" --events --json --quiet >"$out/$1-$2.json"
	python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
k = r.get("killed_relay_covered") or {}
s = r.get("slowed_link_reroute") or {}
print("   %.1f kbit/s per site (max %.1f), %d of %d pairs outside the bound, %d route changes, relay covered p95 %s ms, slowed link rerouted p95 %s ms, %.0f s wall" % (
    r["control_kbit_per_site"], r["control_kbit_per_site_max"], r["pairs_outside_bound"], r["pairs"],
    r["route_changes"], k.get("p95_ms"), s.get("p95_ms"), r["wall_s"]))' "$out/$1-$2.json"
}

run new "${SCALE_SITES:-100}" "${SCALE_MINUTES:-1}"
if [ "${SCALE_SWEEP:-0}" = 1 ]; then
	for n in 10 16 54 100 200; do
		run new "$n" 1
	done
	for n in 10 16 54 100 200 300; do
		[ "$n" -le "${SCALE_OLD_MAX:-100}" ] && run old "$n" 1
	done
fi
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
if ! $py -c 'import matplotlib' 2>/dev/null && [ -x /opt/detour/python/bin/python3 ]; then
	py=/opt/detour/python/bin/python3
fi
$py scripts/plot_scale.py "$out" "$out/scaling.png" docs/bench/scaling/old-computed.json || echo "bench-scale.sh: no plot (matplotlib missing?)"
echo "reports in $out"
