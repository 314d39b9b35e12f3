#!/usr/bin/env bash
# bench-overlay.sh: the long versions of the overlay measurements of issue 3
# (test/overlay_test.go, real network namespaces): reroute after a link
# slows and after a relay is killed (p95 over 20 trials), ten minutes of a
# steady scenario with 1 ms jitter (zero route changes), azure-16 against
# the offline oracle with the control traffic per site, and single-flow
# TCP throughput of detour, tinc and kernel VXLAN (10 s each). Every figure
# is printed by the tests (go test -v); the log is kept in results/.
# Needs root; every test removes its namespaces and processes.
#
#   usage: scripts/bench-overlay.sh [TEST-REGEXP]   (default: all of them)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DETOUR_BIN:-$PWD/bin/detour}
lab=${DETOUR_LAB_BIN:-$(dirname "$bin")/detour-lab}
[ -x "$bin" ] || go build -o "$bin" ./cmd/detour
[ -x "$lab" ] || go build -o "$lab" ./cmd/detour-lab
export DETOUR_BIN=$bin DETOUR_LAB_BIN=$lab
mkdir -p results
log=results/bench-overlay-$(date +%Y%m%d-%H%M%S).log
run=${1:-'TestOverlay(RerouteSlowLink|RelayKilled|SteadyJitter|Azure16|Throughput)$'}
echo "bench-overlay: go test -run '$run' (log: $log)"
set +e
DETOUR_BIN=$bin DETOUR_OVERLAY_TRIALS=${DETOUR_OVERLAY_TRIALS:-20} \
	DETOUR_STEADY_SECONDS=${DETOUR_STEADY_SECONDS:-600} DETOUR_IPERF_SECONDS=${DETOUR_IPERF_SECONDS:-10} \
	go test -tags netns -count=1 -p 1 -timeout 40m -v -run "$run" ./test/ 2>&1 | tee "$log" |
	grep -E '^(--- |FAIL|ok|PASS)|overlay_test.go:[0-9]+: (reroute|relay killed|steady-jitter|azure-16|control traffic|throughput|vxlan|tinc|detour)'
rc=${PIPESTATUS[0]}
exit "$rc"
