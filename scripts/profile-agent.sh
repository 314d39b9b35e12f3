#!/usr/bin/env bash
# profile-agent.sh takes a CPU profile of the detour agents while one TCP
# flow (iperf3) runs from Fujisawa's host to Seoul's on leon-japan over a
# kernel underlay, then prints `go tool pprof -top` of the sending and the
# receiving gateway's agent. Profiles stay in results/profile/DATE/.
# Needs root; tears the testbed down even on failure.
#
#   usage: scripts/profile-agent.sh [detour|detour-plain] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
overlay=${1:-detour}
secs=${2:-10}
bin=${DETOUR_BIN:-$PWD/bin/detour}
lab=${DETOUR_LAB_BIN:-$(dirname "$bin")/detour-lab}
[ -x "$bin" ] || go build -o "$bin" ./cmd/detour
[ -x "$lab" ] || go build -o "$lab" ./cmd/detour-lab
export DETOUR_BIN=$bin DETOUR_LAB_BIN=$lab
out=$PWD/results/profile/$(date +%F-%H%M%S)-$overlay
mkdir -p "$out"
state=$(mktemp -d /tmp/detour-prof-XXXXXX)
export DETOUR_TESTBED_STATE=$state/tb DETOUR_TESTBED_PREFIX=dpr-
srv=
cleanup() {
	[ -n "$srv" ] && kill "$srv" 2>/dev/null
	"$lab" testbed down >/dev/null 2>&1 || true
	rm -rf "$state"
}
trap cleanup EXIT INT TERM
DETOUR_CPUPROFILE_DIR=$out "$lab" testbed up leon-japan --underlay kernel --overlay "$overlay" >/dev/null
"$lab" testbed exec Seoul -- iperf3 -s -1 -p 5399 >/dev/null 2>&1 &
srv=$!
sleep 0.5
"$lab" testbed exec Fujisawa -- iperf3 -c 198.19.3.1 -p 5399 -t "$secs" | tail -4
wait "$srv" || true
srv=
"$lab" testbed down >/dev/null
for site in Fujisawa Seoul; do
	echo "== agent $site ($overlay): go tool pprof -top"
	go tool pprof -top -nodecount 25 "$bin" "$out/agent-$site.pprof" 2>/dev/null | head -34
done
echo "profiles in $out"
