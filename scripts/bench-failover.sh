#!/usr/bin/env bash
# bench-failover.sh: the long versions of the path-change measurements of
# issue 4 (test/failover_test.go, real network namespaces): 100 forced
# switches under a 50 Mbit/s TCP flow (reordering, gaps, retransmissions,
# latency at the switch), the relay killed under the flow (traffic
# restored, p95 over 20 trials), a gateway restarted mid-flow, a link
# flapping every 2 s for 5 minutes (route changes per pair), and the
# lanman2017 comparison with the paper's 300 ms spike. Every figure is
# printed by the tests (go test -v); the log is kept in results/. Needs
# root; every test removes its namespaces and processes.
#
#   usage: scripts/bench-failover.sh [TEST-REGEXP]   (default: all of them)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DETOUR_BIN:-$PWD/bin/detour}
lab=${DETOUR_LAB_BIN:-$(dirname "$bin")/detour-lab}
[ -x "$bin" ] || go build -o "$bin" ./cmd/detour
[ -x "$lab" ] || go build -o "$lab" ./cmd/detour-lab
export DETOUR_BIN=$bin DETOUR_LAB_BIN=$lab
mkdir -p results
log=results/bench-failover-$(date +%Y%m%d-%H%M%S).log
run=${1:-'TestFailover(|Lanman2017)$'}
echo "bench-failover: go test -run '$run' (log: $log)"
set +e
DETOUR_BIN=$bin DETOUR_TIMING_TESTS=1 DETOUR_FAILOVER_SWITCHES=${DETOUR_FAILOVER_SWITCHES:-100} \
	DETOUR_FAILOVER_TRIALS=${DETOUR_FAILOVER_TRIALS:-20} DETOUR_FLAP_SECONDS=${DETOUR_FLAP_SECONDS:-300} \
	DETOUR_FAILOVER_LANMAN=1 \
	go test -tags netns -count=1 -p 1 -timeout 40m -v -run "$run" ./test/ 2>&1 | tee "$log" |
	grep -E '^(--- |    --- |FAIL|ok|PASS)|failover_test.go:[0-9]+: '
rc=${PIPESTATUS[0]}
exit "$rc"
