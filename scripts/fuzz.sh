#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target of the module for FUZZTIME each
# (default 20s). Crashers are written to the package's testdata/fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-20s}
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "== $pkg $target ($t)"
		go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$t"
	done
done
