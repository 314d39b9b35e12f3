#!/usr/bin/env bash
# bench.sh is what `make bench` runs after the Go benchmarks: every
# scripts/bench-*.sh in turn (long measurements, not run in CI). Each one
# cleans up after itself; a failing one is reported and the others still
# run. Needs root.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
for b in scripts/bench-*.sh; do
	[ -e "$b" ] || continue
	echo "== $b"
	if ! bash "$b"; then
		echo "bench.sh: $b failed" >&2
		status=1
	fi
done
exit $status
