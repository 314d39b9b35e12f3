#!/usr/bin/env bash
# bench-flood.sh: issue 25's measurements at full length. leon-japan over
# the kernel underlay, agents pinned to core 0, a flood from Inagi's
# gateway pinned to core 1 at the highest rate one thread sends (random
# bytes; initiations naming Fujisawa with random Noise bytes; the same with
# a valid mac1; the last two also from random 198.18.0.0/15 sources) to
# Seoul's agent, while Fujisawa pings and sends one TCP flow to Seoul; then
# Fujisawa's agent is killed and restarted under the flood. Each window
# lasts DETOUR_FLOOD_SECONDS (default here 10). Needs root; the test tears
# down everything it brings up, even on failure.
# Output: results/bench-flood.log and results/bench-flood.txt (the figures).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p results
make build >/dev/null
LOG=results/bench-flood.log
DETOUR_BIN=$PWD/bin/detour DETOUR_LAB_BIN=$PWD/bin/detour-lab DETOUR_FLOOD_SECONDS=${DETOUR_FLOOD_SECONDS:-10} \
	DETOUR_FLOOD_TCP_SHARE=${DETOUR_FLOOD_TCP_SHARE:-0.9} \
	DETOUR_FLOOD_REPORT=$PWD/results/bench-flood.txt \
	go test -count=1 -p 1 -timeout 20m -tags netns -run 'TestFloodHandshakes$' -v ./test/ 2>&1 |
	grep -E 'flood_test|^(---|ok|FAIL)' | tee "$LOG"
exit "${PIPESTATUS[0]}"
