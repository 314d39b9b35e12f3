#!/usr/bin/env bash
# bench.sh is what `make bench` runs after the Go benchmarks: the overlay
# comparison (bench-overlays.sh: raw underlay, VXLAN, tinc, detour on a
# kernel underlay and over the emulator), the emulator's own ceiling
# (bench-testbed.sh), then every other scripts/bench-*.sh in turn (long
# measurements, not run in CI).
#
# Hooks: drop a scripts/bench-NAME.sh here and it runs too; drop an
# executable into scripts/bench-overlays.d/ and it runs inside each overlay
# case of bench-overlays.sh (see scripts/bench_overlays.py). Set
# BENCH_ONLY="overlays testbed" to run only the named ones. Each one
# cleans up after itself; a failing one is reported and the others still
# run. Needs root.
set -uo pipefail
# The namespace tests whose figures need an idle machine run here, not in make test.
export DETOUR_TIMING_TESTS=1
cd "$(dirname "$0")/.."
status=0
ordered=(scripts/bench-overlays.sh scripts/bench-testbed.sh)
for b in scripts/bench-*.sh; do
	case " ${ordered[*]} " in *" $b "*) ;; *) ordered+=("$b") ;; esac
done
for b in "${ordered[@]}"; do
	[ -e "$b" ] || continue
	name=${b#scripts/bench-}
	name=${name%.sh}
	if [ -n "${BENCH_ONLY:-}" ] && [[ " $BENCH_ONLY " != *" $name "* ]]; then
		continue
	fi
	echo "== $b"
	if ! bash "$b"; then
		echo "bench.sh: $b failed" >&2
		status=1
	fi
done
exit $status
